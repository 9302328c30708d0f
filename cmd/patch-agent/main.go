// Command patch-agent keeps the EC2 capacity of Amazon ECS and Amazon EKS clusters on the current AMI.
// Run `patch-agent --help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	// Maintenance windows name IANA time zones (patch-agent/maintenance-window, internal/lifecycle): the
	// release image holds no zone files, so the zone database is embedded (~450 kB) and time.LoadLocation
	// falls back to it (package time/tzdata).
	_ "time/tzdata"
)

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	os.Exit(report(os.Stderr, err))
}
