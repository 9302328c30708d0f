//go:build nodemo

package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
)

// newDemoCommand of a -tags nodemo build (make build, make image: the production binary) only says where the
// demo is: it links neither the simulated account nor the demo scenarios, so that the binary that runs against
// real accounts carries no code that fakes AWS or Kubernetes (demo.go).
func newDemoCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "demo",
		Short:              "Not in this build: the demo runs from the repository (make demo)",
		Args:               cobra.ArbitraryArgs,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return cli.ExitError{Code: 2, Err: errors.New("this build of patch-agent has no demo (built with -tags nodemo, like the release image, " +
				"so that the production binary links no simulated account): run `make demo` or `go run ./cmd/patch-agent demo` in the repository")}
		},
	}
}
