package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the module version patch-agent was built as (`go install ...@v1.2.3`), or "dev" for a build
// from a working tree.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// versionLine is what `patch-agent version` and `patch-agent --version` print.
func versionLine() string {
	return fmt.Sprintf("patch-agent %s (%s, %s/%s)", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of patch-agent and the Go version it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
}
