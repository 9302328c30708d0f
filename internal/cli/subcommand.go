package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// SubcommandArgs is the Args of a command that only groups subcommands: an argument is an unknown
// subcommand, reported with the list of the known ones (a usage error: Report adds the --help hint).
func SubcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return Usage(cmd, fmt.Errorf("unknown subcommand %q for %s; available subcommands:\n%s",
		args[0], cmd.CommandPath(), strings.TrimSuffix(subcommandList(cmd), "\n")))
}

// NeedsSubcommand is the RunE of a command that only groups subcommands, run without one: a usage error
// that lists them (Report adds the --help hint).
func NeedsSubcommand(cmd *cobra.Command, _ []string) error {
	return Usage(cmd, fmt.Errorf("%s needs a subcommand:\n%s", cmd.CommandPath(), strings.TrimSuffix(subcommandList(cmd), "\n")))
}

// subcommandList lists cmd's subcommands, one "  name  short description" line each.
func subcommandList(cmd *cobra.Command) string {
	var subs []*cobra.Command
	width := 0
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			subs = append(subs, c)
			width = max(width, len(c.Name()))
		}
	}
	var b strings.Builder
	for _, c := range subs {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.Name(), c.Short)
	}
	return b.String()
}
