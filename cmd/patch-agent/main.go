// Command patch-agent keeps the EC2 capacity of Amazon ECS and Amazon EKS clusters on the current AMI.
// Run `patch-agent --help` for the commands.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"

	// Maintenance windows name IANA time zones (patch-agent/maintenance-window, internal/model): the
	// release image holds no zone files, so the zone database is embedded (~450 kB) and time.LoadLocation
	// falls back to it (package time/tzdata).
	_ "time/tzdata"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := execute(ctx, newRootCommand(), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs root on args and returns the exit status: the error, if any, goes to stderr as report writes
// it. A command run with -o json that fails before it printed anything on stdout also prints the error there,
// as one document (WriteErrorDocument), so that a script reading stdout gets JSON whatever the outcome; a
// command that printed its document before failing (healthcheck not ready, audit --fail-if-behind) prints
// only that one.
func execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	out := &countingWriter{w: stdout}
	root.SetArgs(args)
	root.SetOut(out)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	code := cli.Report(stderr, err)
	if code != 0 && out.n == 0 && cmd != nil && cli.JSONAsked(cmd, args) {
		cli.WriteErrorDocument(stdout, err, code)
	}
	return code
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
