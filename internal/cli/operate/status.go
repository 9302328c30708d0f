package operate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/orgcmd"
	"github.com/patch-agent/patch-agent/internal/operator"
)

// minWatchInterval keeps --watch from hammering the table (each redraw is a Scan).
const minWatchInterval = time.Second

func NewStatusCommand() *cobra.Command {
	var (
		watch    bool
		interval time.Duration
		only     []string
	)
	cmd := &cobra.Command{
		Use:   "status [GROUP]",
		Short: "Show each managed group's rollout: phase, step, AMIs, instances on target, pause",
		Long: `Prints one line per managed Auto Scaling group (or only GROUP) from the agent's state: the rollout
phase and replacement step, how many instances run the target AMI (ON TARGET), the target AMI, the scope
of the pause that holds the group (a global pause holds every group), and the reason the rollout waits,
halted or rolled back — in 120 columns, the reason cut at word boundaries with the times it names kept (on a
line of its own below the row when the other columns leave it too little room). -o wide adds the cluster, the instances not
on target (OTHER), the previous AMI and when the target was detected, the instance being replaced and its
replacement, who paused and why, and the warning. -o json prints {"schemaVersion": 1, "groups": [...]}
with every field present (null for a time or a pause that is not set); -o csv the columns of wide, one value
a cell. A GROUP the store has no record of is answered with the groups it holds records of. It reads only the state table: the counts are those the agent last observed
(it writes them when they change), so status needs no Auto Scaling or EC2 permission.

Reasons: "paused (...) by WHO since T: WHY; next step: ..." — a pause holds the rollout before that step;
"soak: ...", "approval: ...", "maintenance window ... closed", "alarm(s) ... in ALARM" — a gate holds it;
"failed: ..." — the rollout halted (Halted) or is rolling back (RollingBack); "rolling back ..." — a refresh
takes the group back to its previous launch template version (RollingBack); "rolled back after: ..." — it
was rolled back (RolledBack); "cancelling instance refresh ..." — a gate or a newer AMI stopped the refresh and
the agent finishes the launches and drains in flight;
"waiting for i-... to settle" — an instance is still launching or terminating.
docs/operations.md explains each.

--watch redraws every --interval until Ctrl-C (the screen is cleared only when stdout is a terminal;
otherwise a new table is printed each time; with --output json one JSON document per line).`,
		Example: `  # every group, from the agent's table
  patch-agent status --table patch-agent --region eu-west-1

  # one group as JSON
  patch-agent status prod-ecs-asg --output json | jq '.groups[0] | {phase, step, onTarget, instances, reason}'

  # follow a rollout live
  patch-agent status prod-ecs-asg --watch --interval 5s

  # the state a demo left behind
  patch-agent demo --state-file demo.json && patch-agent status --state-file demo.json`,
		Args: cobra.MaximumNArgs(1),
	}
	stores := cli.AddStoreFlags(cmd)
	orgs := orgcmd.AddOrgFlags(cmd, &stores.Profile, &stores.Regions, true)
	orgcmd.AddOnlyFlag(cmd, &only)
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, []string{cli.FormatTable, cli.FormatWide, cli.FormatJSON, cli.FormatCSV}, nil,
		"table fits 120 columns, wide has every column, csv the columns of wide")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "redraw every --interval until Ctrl-C")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between two redraws with --watch (at least 1s)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		output := outFlag.Value
		if orgs.Enabled() {
			return orgcmd.RunOrgStatus(cmd, orgs, output, only, args)
		}
		if err := orgs.Check(cmd, "only"); err != nil {
			return err
		}
		if len(only) > 0 {
			return cli.Usage(cmd, fmt.Errorf("--only needs --organization or --accounts FILE"))
		}
		if watch && interval < minWatchInterval {
			return cli.Usage(cmd, fmt.Errorf("--interval %s is below %s", interval, minWatchInterval))
		}
		group := ""
		if len(args) == 1 {
			group = args[0]
		}
		ctx := cmd.Context()
		s, err := stores.Open(ctx)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		show := func() error {
			rows, err := operator.Status(ctx, s, group, time.Now())
			if err != nil {
				return s.ExplainNotFound(ctx, group, err)
			}
			return printStatus(out, output, rows, watch)
		}
		if !watch {
			return show()
		}
		return watchStatus(ctx, out, cmd.ErrOrStderr(), output, interval, s, show)
	}
	return cmd
}

// printStatus writes rows as a table or as JSON (indented; one line per redraw when watching).
func printStatus(out io.Writer, output string, rows []operator.StatusRow, watching bool) error {
	switch {
	case output == "json" && watching:
		b, err := json.Marshal(operator.NewStatusDocument(rows))
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, string(b))
		return err
	case output == "json":
		return cli.WriteJSON(out, operator.NewStatusDocument(rows))
	case output == "csv":
		return operator.WriteStatusCSV(out, rows)
	case len(rows) == 0:
		_, err := fmt.Fprintln(out, "no rollout recorded yet: the agent writes one per managed group on its first reconcile tick")
		return err
	case output == "wide":
		operator.RenderWideTable(out, rows)
		return nil
	}
	operator.RenderTable(out, rows)
	return nil
}

// watchStatus redraws every interval until ctx is cancelled (Ctrl-C), which ends it without error. The
// first failure ends the watch with its error; later ones (a throttled Scan, a state file being rewritten)
// are shown and the watch goes on.
func watchStatus(ctx context.Context, out, errOut io.Writer, output string, interval time.Duration, s *cli.OpenedStore, show func() error) error {
	tty := cli.IsTerminal(out)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if output == cli.FormatTable || output == cli.FormatWide {
			if tty {
				fmt.Fprint(out, "\x1b[H\x1b[2J") // cursor home, clear screen
			} else if n > 0 {
				fmt.Fprintln(out)
			}
			fmt.Fprintf(out, "%s — %s, every %s (Ctrl-C to stop)\n\n", s.Where, time.Now().UTC().Format(time.RFC3339), interval)
		}
		err := s.Reload()
		if err == nil {
			err = show()
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && n == 0:
			return err
		case err != nil:
			fmt.Fprintf(errOut, "patch-agent: %v (retrying in %s)\n", err, interval)
		}
		timer.Reset(interval)
	}
}

func NewHistoryCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history GROUP",
		Short: "Show a group's AMI history: detected, completed, halted, rolled back, manual rollbacks",
		Long: `Prints the AMI history of one Auto Scaling group, oldest first: every new AMI the agent detected (with the
SSM parameter and its version), every rollout that completed, halted or was rolled back, every manual
rollback (with who asked for it) and every approval. FROM → TO reads in the direction of each event — for
rolling-back and rolled-back from the failed AMI to the restored one. -o wide adds the SOURCE column and
the full DETAIL; -o json prints {"schemaVersion": 1, "group": ..., "entries": [...]},
each entry with both (fromImageId/toImageId and previousImageId/newImageId); -o csv one row an entry. A GROUP
the store has no record of is answered with the groups it holds records of.`,
		Example: `  patch-agent history prod-ecs-asg --table patch-agent --region eu-west-1
  patch-agent history prod-ecs-asg --output json | jq -r '.entries[] | select(.event == "completed") | .newImageId'`,
		Args: cli.GroupArg,
	}
	stores := cli.AddStoreFlags(cmd)
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, []string{cli.FormatTable, cli.FormatWide, cli.FormatJSON, cli.FormatCSV}, nil,
		"table fits 120 columns, wide has every column, csv the columns of wide")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		output := outFlag.Value
		ctx := cmd.Context()
		s, err := stores.Open(ctx)
		if err != nil {
			return err
		}
		hist, err := operator.History(ctx, s, args[0])
		if err != nil {
			return s.ExplainNotFound(ctx, args[0], err)
		}
		out := cmd.OutOrStdout()
		switch {
		case output == "json":
			return cli.WriteJSON(out, operator.NewHistoryDocument(args[0], hist))
		case output == "csv":
			return operator.WriteHistoryCSV(out, hist)
		case len(hist) == 0:
			fmt.Fprintf(out, "no history for %s yet: the agent records one when it detects a new AMI\n", args[0])
			return nil
		case output == "wide":
			operator.RenderWideHistory(out, hist)
			return nil
		}
		operator.RenderHistory(out, hist)
		return nil
	}
	return cmd
}
