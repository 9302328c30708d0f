package main

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// pflag takes the first back-quoted word of a flag's usage as the value name --help prints after the flag, so
// a usage that back-quotes a command prints "--approve patch-agent approve eks:CLUSTER" for a bool flag.
// Every flag of every command prints no value name (bool flags) or one word (its type, or a placeholder such as
// FILE), never a phrase.
func TestHelpOfEveryFlagPrintsATypeOrAPlaceholderAsItsValueName(t *testing.T) {
	placeholder := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.]*$`) // string, duration, FILE, FILE.svg, age
	var bad []string
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if f.Value.Type() == "bool" && name != "" || f.Value.Type() != "bool" && !placeholder.MatchString(name) {
				bad = append(bad, fmt.Sprintf("%s --%s %s", c.CommandPath(), f.Name, name))
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
	require.Empty(t, bad, "flags whose --help prints a phrase as the value name")
}
