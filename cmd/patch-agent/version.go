package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/buildinfo"
	"github.com/patch-agent/patch-agent/internal/schema"
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
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of patch-agent, the commit and date it was built from, and its Go version",
		Long: `Prints the version (the git tag, or a description relative to it, or the commit id), the full commit id
and the build date that make build and make image stamp into the binary, then the Go version and platform.
-o json prints {"schemaVersion": 1, "version": ..., "commit": ..., "date": ..., "go": ..., "platform": ...}.`,
		Args: cobra.NoArgs,
	}
	outFlag := addOutputFlag(cmd, formatTable, standardFormats, nil, "table and wide: one line")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if outFlag.is(formatJSON) {
			return writeJSON(cmd.OutOrStdout(), versionDocument{SchemaVersion: schema.Version, Info: buildinfo.Get(),
				Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH})
		}
		_, err := fmt.Fprintln(cmd.OutOrStdout(), versionLine())
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
