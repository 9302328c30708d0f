package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// ExitUsage is the exit status of a usage error: a mistake in how a command was called (an unknown command
// or flag, a missing or malformed argument), told apart from a failure of the work itself (status 1).
const ExitUsage = 2

// usageError is a mistake in how a command was called. It prints as the mistake alone; Report adds the
// one-line hint naming the command's --help and returns exit status 2.
type usageError struct {
	path string // the command's path, "patch-agent pause"
	err  error
}

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Usage marks err (nil stays nil) as a usage error of cmd.
func Usage(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	return usageError{path: cmd.CommandPath(), err: err}
}

// MarkUsageErrors makes the flag errors and argument errors of root and every command below it usage errors,
// and so the error of a command that needs an AWS region and has none (RegionRequired): a flag missing.
func MarkUsageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return Usage(cmd, err) })
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error { return Usage(cmd, args(cmd, a)) }
		}
		if runE := c.RunE; runE != nil {
			c.RunE = func(cmd *cobra.Command, a []string) error {
				err := runE(cmd, a)
				if errors.As(err, new(missingRegionError)) {
					return Usage(cmd, err)
				}
				return err
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// Report prints err to stderr (main reports the error of every command with it) and returns the exit status:
// 2 with a hint for a usage error (and for cobra's "unknown command"), the code of an ExitError, else 1.
func Report(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "patch-agent:", err)
	var ue usageError
	var ee ExitError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", ue.path)
		return ExitUsage
	case strings.HasPrefix(err.Error(), "unknown command "):
		fmt.Fprintln(stderr, "Run 'patch-agent --help' for the commands.")
		return ExitUsage
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

// ExitError carries a process exit code through cobra: Report returns Code, and main exits with it.
type ExitError struct {
	Code int   // the exit status
	Err  error // what is printed on stderr
}

func (e ExitError) Error() string { return e.Err.Error() }

func (e ExitError) Unwrap() error { return e.Err }
