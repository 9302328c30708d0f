package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/buildinfo"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/schema"
)

func newVersionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of patch-agent, the commit and date it was built from, and its Go version",
		Long: `Prints the version (the git tag, or a description relative to it, or the commit id), the full commit id
and the build date that make build and make image stamp into the binary, then the Go version and platform.
-o json prints {"schemaVersion": 1, "version": ..., "commit": ..., "date": ..., "go": ..., "platform": ...}.`,
		Args: cobra.NoArgs,
	}
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "table and wide: one line")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if outFlag.Is(cli.FormatJSON) {
			return cli.WriteJSON(cmd.OutOrStdout(), versionDocument{SchemaVersion: schema.Version, Info: buildinfo.Get(),
				Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH})
		}
		_, err := fmt.Fprintln(cmd.OutOrStdout(), cli.VersionLine())
		return err
	}
	return cmd
}

// versionDocument is `version -o json`: the build's identity (buildinfo.Info), the Go version and the
// platform (GOOS/GOARCH).
type versionDocument struct {
	SchemaVersion int `json:"schemaVersion"`
	buildinfo.Info
	Go       string `json:"go"`
	Platform string `json:"platform"`
}
