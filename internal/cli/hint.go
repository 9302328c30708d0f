package cli

import (
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// storeFlagNames are the flags that say where a command acts: the store (--table, --region, --profile,
// --state-file), the wake-up queue and the organization-wide selection. A hint naming a follow-up command
// repeats those the user gave (pasteable), so that it acts where the first one did.
var storeFlagNames = []string{"table", "state-file", "region", "profile", "queue-url", "organization", "ou", "accounts",
	"role-name", "external-id", "deployment", "concurrency", "account-timeout"}

// Pasteable returns the command line base followed by every flag of storeFlagNames that cmd was given (and
// that the follow-up, next, takes; nil: every one), each value quoted for a POSIX shell where it needs it,
// a repeatable flag once per value: a line the user can paste as it is.
func Pasteable(cmd *cobra.Command, next *cobra.Command, base string) string {
	var b strings.Builder
	b.WriteString(base)
	for _, name := range storeFlagNames {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed || next != nil && next.Flags().Lookup(name) == nil {
			continue
		}
		for _, v := range flagValues(f) {
			b.WriteString(" --" + name)
			if f.Value.Type() != "bool" {
				b.WriteString(" " + ShellQuote(v))
			}
		}
	}
	return b.String()
}

// flagValues returns each value of f: one for a plain flag, every one of a repeatable flag.
func flagValues(f *pflag.Flag) []string {
	if s, ok := f.Value.(interface{ GetSlice() []string }); ok {
		return s.GetSlice()
	}
	return []string{f.Value.String()}
}

// shellSafe matches a word a POSIX shell reads as it is.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// ShellQuote quotes s for a POSIX shell: as it is when it needs no quoting, else in single quotes (a single
// quote inside written '\”).
func ShellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Command returns the command at path below cmd's root ("eks", "upgrade"), nil when there is none.
func Command(cmd *cobra.Command, path ...string) *cobra.Command {
	c, rest, err := cmd.Root().Find(path)
	if err != nil || len(rest) > 0 || c == cmd.Root() {
		return nil
	}
	return c
}

// Sibling returns the command named name beside cmd (a subcommand of cmd's parent), nil when there is none.
func Sibling(cmd *cobra.Command, name string) *cobra.Command {
	if cmd.Parent() == nil {
		return nil
	}
	for _, c := range cmd.Parent().Commands() {
		if c.Name() == name {
			return c
		}
	}
	return nil
}

// ResumeHint is the command that lifts the pause cmd wrote for group ("" the global one), with the store
// flags cmd was given.
func ResumeHint(cmd *cobra.Command, group string) string {
	base := "patch-agent resume"
	if group != "" {
		base += " --group " + ShellQuote(group)
	}
	return Pasteable(cmd, Sibling(cmd, "resume"), base)
}
