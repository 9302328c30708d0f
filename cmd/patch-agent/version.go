package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/buildinfo"
)

// version is the version patch-agent was built as: set from git by `make build`, `make image` and
// `make release` (internal/buildinfo; the tag for a release), else the module version of
// `go install ...@v1.2.3` or the commit the toolchain stamped, else "dev".
func version() string { return buildinfo.Get().Version }

// versionLine is what `patch-agent version` and `patch-agent --version` print, e.g.
// "patch-agent v1.2.3 (commit 0123abc..., built 2026-12-01T09:00:00Z, go1.26.8, linux/amd64)".
func versionLine() string {
	b := buildinfo.Get()
	return fmt.Sprintf("patch-agent %s (commit %s, built %s, %s, %s/%s)", b.Version, b.Commit, b.Date,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of patch-agent, the commit and date it was built from, and its Go version",
		Long: `Prints the version (the git tag, or a description relative to it, or the commit id), the full commit id
and the build date that make build and make image stamp into the binary, then the Go version and platform.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
			return err
		},
	}
}
