package runcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/schema"
)

func NewHealthcheckCommand() *cobra.Command {
	var (
		addr    string
		timeout time.Duration
		outFlag *cli.OutputValue
	)
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Ask the running agent whether it is ready (the container health check); exit 1 with the reason when not",
		Long: `Asks the agent running in this container (or on this host) for GET /readyz on --addr, the agent's
--health-addr: its queue and state table are reachable with its own credentials (GetQueueAttributes,
DescribeTable) and its reconcile loop ticked within 3 intervals. Prints every check; exits 0 when ready, 1 with
the first failing check as the one reason otherwise (including an agent that does not answer).

The image has no shell or curl, so this is the task definition's health check:
  "HealthCheck": {"Command": ["CMD", "/patch-agent", "healthcheck"], "StartPeriod": 60}
To verify credentials, region, queue, table and read permissions before starting, use patch-agent run --check.
-o json prints {"schemaVersion": 1, "ready": ..., "checks": [{"name", "ok", "error"}]} (ready false, with no
check, when the agent does not answer).`,
		Example: `  patch-agent healthcheck
  patch-agent healthcheck --addr 127.0.0.1:9090`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return cli.Usage(cmd, fmt.Errorf("--addr %q: want HOST:PORT or :PORT: %w", addr, err))
			}
			return healthcheck(cmd.Context(), cmd.OutOrStdout(), outFlag.Is(cli.FormatJSON), addr, timeout)
		},
	}
	outFlag = cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "table and wide: one line a check")
	cmd.Flags().StringVar(&addr, "addr", ":8080", "the agent's --health-addr; an empty host means 127.0.0.1")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answer (the agent bounds each check to 3s)")
	return cmd
}

// healthcheck asks addr's /readyz and returns nil when the agent is ready, else an ExitError 1 naming the
// first failing check. asJSON prints the readiness document (healthDocument) instead of the lines.
func healthcheck(ctx context.Context, out io.Writer, asJSON bool, addr string, timeout time.Duration) error {
	rd, err := readiness(ctx, out, !asJSON, addr, timeout)
	if asJSON {
		if rd.Checks == nil {
			rd.Checks = []health.CheckResult{}
		}
		if werr := cli.WriteJSON(out, healthDocument{SchemaVersion: schema.Version, Readiness: rd}); werr != nil {
			return werr
		}
	}
	return err
}

// healthDocument is `healthcheck -o json`: the agent's readiness document after schemaVersion.
type healthDocument struct {
	SchemaVersion int `json:"schemaVersion"`
	health.Readiness
}

// readiness asks addr's /readyz and returns what the agent answered (the zero Readiness when it did not),
// printing one line a check when lines is set, and nil when the agent is ready.
func readiness(ctx context.Context, out io.Writer, lines bool, addr string, timeout time.Duration) (health.Readiness, error) {
	var none health.Readiness
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return none, fmt.Errorf("--addr %q: want HOST:PORT or :PORT: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/readyz"
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return none, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return none, cli.ExitError{Code: 1, Err: fmt.Errorf("not healthy: the agent does not answer on %s (is patch-agent run serving --health-addr %s?): %w", url, addr, err)}
	}
	defer resp.Body.Close()
	var rd health.Readiness
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rd); err != nil {
		return none, cli.ExitError{Code: 1, Err: fmt.Errorf("not healthy: %s answered %s with no readiness document: %w", url, resp.Status, err)}
	}
	for _, c := range rd.Checks {
		switch {
		case !lines:
		case c.OK:
			fmt.Fprintf(out, "  ok       %s\n", c.Name)
		default:
			fmt.Fprintf(out, "  FAILED   %s: %s\n", c.Name, c.Error)
		}
	}
	if rd.Ready && resp.StatusCode == http.StatusOK {
		if lines {
			fmt.Fprintln(out, "ready")
		}
		return rd, nil
	}
	rd.Ready = false
	for _, c := range rd.Checks {
		if !c.OK {
			return rd, cli.ExitError{Code: 1, Err: fmt.Errorf("not healthy: %s: %s", c.Name, c.Error)}
		}
	}
	return rd, cli.ExitError{Code: 1, Err: errors.New("not healthy: " + strings.TrimSpace(resp.Status))}
}
