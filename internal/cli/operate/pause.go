package operate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/orgcmd"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
)

func NewPauseCommand() *cobra.Command {
	var group, reason, until, who string
	var replace bool
	cmd := &cobra.Command{
		Use:   "pause [REASON...]",
		Short: "Stop new instance refreshes and launch template versions of every group (or of one with --group)",
		Long: `Writes a pause lock: the global one, or one group's with --group. From the agent's next reconcile tick
no new destructive step starts in that scope — no instance refresh (the agent cancels one it started; the
instances in flight finish), no new launch template version — and the rollout's status reason says "paused (...) by WHO since T: WHY; next step: ...".

What goes on while paused: drains for Auto Scaling lifecycle hooks (scale-in, rebalancing, instance
refresh) — they protect running tasks and their lifecycle actions are completed; waits already in flight
(a replacement booting, a drain under way, a termination leaving) are watched as usual, and their timeouts
still apply.

The reason is --reason, or the words after pause (quoted or not: ` + "`patch-agent pause incident 4711`" + `),
not both.

A second pause of a scope that is already paused is refused (exit 1, naming the pause in place) unless
--replace is given: it would silently end an --until pause earlier or later than planned. Across accounts
(--organization, --accounts) a global pause in place that lasts at least as long as the one asked for is
left as it is (already-paused); one that ends earlier, or any with an end when the one asked for has none,
is left too but reported paused-until and the command exits 1: run it again with --replace. --until ends the
pause by itself, at that time: the agent wakes the paused groups then; without it the pause lasts until
` + "`patch-agent resume`" + `. After the write the command wakes the agent (--queue-url) so that it reads the pause,
and its end, within seconds.

--group is confirmed first: Auto Scaling must know the group and it must carry the tag
patch-agent/enabled=true (a group opted in that the agent has no record of yet may be paused); with
--state-file the file must hold its rollout record. A misspelt name fails, names the groups the store
knows, and pauses nothing.

The output ends with the command that undoes the pause, with the store flags given (--table, --region,
--profile, --state-file, --queue-url, and the organization-wide ones): it can be pasted as it is. -o json
prints {"schemaVersion": 1, "action": "pause", "outcome": ..., "scope": ..., "undo": ...} on stdout and the
sentences on stderr.`,
		Example: `  # stop everything during an incident
  patch-agent pause --reason "incident 4711: ECS control plane errors" --table patch-agent --region eu-west-1
  patch-agent pause incident 4711 --table patch-agent --region eu-west-1

  # one group, for two hours
  patch-agent pause --group prod-ecs-asg --reason "quarterly load test" --until 2h

  # until a fixed time (RFC 3339)
  patch-agent pause --group prod-ecs-asg --reason "release freeze" --until 2026-12-01T08:00:00Z`,
		Args: cobra.ArbitraryArgs,
	}
	stores := cli.AddStoreFlags(cmd)
	wakes := AddWakeFlag(cmd)
	orgs := orgcmd.AddOrgFlags(cmd, &stores.Profile, &stores.Regions, true)
	outFlag := orgcmd.AddChangeOutputFlag(cmd)
	cmd.Flags().StringVarP(&group, "group", "g", "", "pause only this Auto Scaling group (default: every group)")
	cmd.Flags().StringVarP(&reason, "reason", "r", "", "why (required, here or as the words after pause; shown in status and the agent's logs)")
	cmd.Flags().StringVar(&until, "until", "", "end the pause by itself: an RFC 3339 time or a duration from now (2h, 90m)")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace a pause of the same scope already in place (default: refuse)")
	cli.AddWhoFlag(cmd, &who)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := requireGroupIfGiven(cmd, group, "pause every group"); err != nil {
			return err
		}
		switch {
		case len(args) > 0 && cmd.Flags().Changed("reason"):
			return cli.Usage(cmd, fmt.Errorf("the reason is given twice, as --reason and as the words %q: give one", strings.Join(args, " ")))
		case len(args) > 0:
			reason = strings.Join(args, " ")
		}
		if strings.TrimSpace(reason) == "" {
			return cli.Usage(cmd, errors.New(`--reason is required: say why the agent is paused, e.g. --reason "incident 4711" (it is shown in status and logs)`))
		}
		if err := cli.RequireWho(cmd, who); err != nil {
			return err
		}
		now := time.Now()
		end, err := parseUntil(until, now)
		if err != nil {
			return cli.Usage(cmd, err)
		}
		if orgs.Enabled() {
			return orgcmd.RunOrgPause(cmd, orgs, outFlag.Value, org.PauseRequest{Reason: reason, Who: who, Until: end, Replace: replace})
		}
		if err := orgs.Check(cmd); err != nil {
			return err
		}
		stdout := sentencesToStderr(cmd, outFlag)
		ctx := cmd.Context()
		s, err := stores.Open(ctx)
		if err != nil {
			return err
		}
		if group != "" {
			if err := s.ConfirmGroup(ctx, group); err != nil {
				return err
			}
		}
		outcome := org.Paused
		if err := operator.CheckNotPaused(ctx, s, group, now); errors.Is(err, operator.ErrAlreadyPaused) {
			if !replace {
				// Not a usage error: the command was called right, the store holds a pause already (exit 1).
				return fmt.Errorf("%w; pass --replace to replace it", err)
			}
			outcome = org.Replaced
		} else if err != nil {
			return err
		}
		if err := operator.Pause(ctx, s, group, reason, who, end, now); err != nil {
			return err
		}
		if err := s.Save(); err != nil {
			return err
		}
		scope := state.Lock{Group: group}.Scope()
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "paused %s by %s", scope, who)
		if !end.IsZero() {
			fmt.Fprintf(out, " until %s", end.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(out, ": %s\n", strings.TrimSpace(reason))
		fmt.Fprintln(out, "From now on no new instance refresh or launch template version starts (the agent reads the pause right before each), and the agent cancels an instance refresh it started; the instances in flight finish; lifecycle-hook drains go on.")
		undo := cli.ResumeHint(cmd, group)
		fmt.Fprintf(out, "Undo with: %s\n", undo)
		wakes.Wake(cmd, s, operatorWakeUp(events.OperatorPause, group, who))
		if group != "" {
			if _, err := s.GetRollout(ctx, group); errors.Is(err, state.ErrNotFound) {
				fmt.Fprintf(out, "%s is opted in but has no rollout record yet: the pause applies from the agent's first tick on it.\n", group)
			}
		}
		return writeChange(stdout, outFlag, changeDocument{Action: "pause", Outcome: outcome, Scope: scope, Who: who,
			Reason: strings.TrimSpace(reason), Until: timeOrNil(end), Undo: undo})
	}
	return cmd
}

// changeDocument is `pause -o json` and `resume -o json` of one account: what the command did. Outcome is
// one of the organization-wide outcomes (paused, replaced, resumed, not-paused) or "expired" (resume removed
// a pause that had already ended); Scope is "global" or "group NAME"; Until is null for a pause without an
// end; Undo is the command that undoes a pause ("" for a resume).
type changeDocument struct {
	SchemaVersion int        `json:"schemaVersion"`
	Action        string     `json:"action"`
	Outcome       string     `json:"outcome"`
	Scope         string     `json:"scope"`
	Who           string     `json:"who"`
	Reason        string     `json:"reason"`
	Until         *time.Time `json:"until"`
	// StillPausedBy is the pause that holds the group after resume --group lifted its own ("" when none).
	StillPausedBy string `json:"stillPausedBy"`
	Undo          string `json:"undo"`
}

// timeOrNil is t in UTC, nil for the zero time.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// sentencesToStderr sends what cmd prints for people to stderr when -o json is chosen, so that stdout holds
// only the document, and returns the writer of the document (stdout).
func sentencesToStderr(cmd *cobra.Command, o *cli.OutputValue) io.Writer {
	stdout := cmd.OutOrStdout()
	if o.Is(cli.FormatJSON) {
		cmd.SetOut(cmd.ErrOrStderr())
	}
	return stdout
}

// writeChange writes d to w (schemaVersion set) when -o json is chosen; table and wide printed sentences.
func writeChange(w io.Writer, o *cli.OutputValue, d changeDocument) error {
	if !o.Is(cli.FormatJSON) {
		return nil
	}
	d.SchemaVersion = schema.Version
	return cli.WriteJSON(w, d)
}

// operatorWakeUp is the wake-up of pause or resume: for group, or for the global lock when group is "".
func operatorWakeUp(action, group, who string) events.OperatorWakeUp {
	if group == "" {
		return events.OperatorWakeUp{Action: action, Scope: events.OperatorGlobal, Who: who}
	}
	return events.OperatorWakeUp{Action: action, Group: group, Who: who}
}

// requireGroupIfGiven refuses an empty --group given explicitly: omitting the flag means the global scope,
// an empty value is a mistake (an unset shell variable) that must not widen the command to every group.
func requireGroupIfGiven(cmd *cobra.Command, group, omitted string) error {
	if cmd.Flags().Changed("group") && strings.TrimSpace(group) == "" {
		return cli.Usage(cmd, fmt.Errorf("--group is empty; omit it to %s", omitted))
	}
	return nil
}

// parseUntil reads --until: empty (no end), a positive duration from now, or an RFC 3339 time.
func parseUntil(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--until %s: a duration must be positive", s)
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--until %q: want an RFC 3339 time (2026-12-01T08:00:00Z) or a duration from now (2h, 90m)", s)
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("--until %s is not in the future (now %s)", s, now.UTC().Format(time.RFC3339))
	}
	return t, nil
}

func NewResumeCommand() *cobra.Command {
	var group, who string
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Remove the global pause (or one group's with --group)",
		Long: `Deletes a pause lock written by ` + "`patch-agent pause`" + `: the global one, or one group's with --group. Rollouts
continue from the step they were held before: within seconds, as the command wakes the agent (--queue-url); without
--queue-url, or when the send fails (a warning), at the agent's next safety poll (within its --reconcile-interval). A group's own pause and the global
pause are separate: resuming one leaves the other in place — after resume --group, a group the global pause
still holds stays paused, and the output says so. The output names the pause it lifted (who, since when,
why), as the delete itself returned it: a pause taken a moment before is lifted, never missed. --who (as
pause's) names who resumed in the agent's wake-up and log and, across accounts, in each row. Resuming a scope that is not paused says "nothing to
resume" and exits 0; resuming --group of a group that is not paused and that Auto Scaling does not know
(with --state-file: that has no rollout record) fails, as a misspelt name.`,
		Example: `  patch-agent resume --table patch-agent --region eu-west-1
  patch-agent resume --group prod-ecs-asg`,
		Args: cobra.NoArgs,
	}
	stores := cli.AddStoreFlags(cmd)
	wakes := AddWakeFlag(cmd)
	orgs := orgcmd.AddOrgFlags(cmd, &stores.Profile, &stores.Regions, true)
	outFlag := orgcmd.AddChangeOutputFlag(cmd)
	cmd.Flags().StringVarP(&group, "group", "g", "", "resume only this Auto Scaling group's own pause (default: the global pause)")
	cli.AddWhoFlag(cmd, &who)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		who = cmp.Or(strings.TrimSpace(who), "unknown") // a resume records no lock: who is only named, never required
		if orgs.Enabled() {
			return orgcmd.RunOrgResume(cmd, orgs, outFlag.Value, who)
		}
		if err := orgs.Check(cmd); err != nil {
			return err
		}
		stdout := sentencesToStderr(cmd, outFlag)
		if err := requireGroupIfGiven(cmd, group, "resume the global pause"); err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := stores.Open(ctx)
		if err != nil {
			return err
		}
		lifted, err := operator.Resume(ctx, s, group, time.Now())
		if errors.Is(err, operator.ErrNotPaused) {
			// A lock of a group that is gone can still be lifted (above); nothing paused and no such group is
			// a misspelt name.
			if group != "" {
				if cerr := s.ConfirmGroup(ctx, group); cerr != nil {
					return cerr
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nothing to resume: %v\n", err)
			if hint := stillHeldHint(ctx, cmd, s, group); hint != "" {
				fmt.Fprintln(cmd.OutOrStdout(), hint)
			}
			return writeChange(stdout, outFlag, changeDocument{Action: "resume", Outcome: org.NotPaused, Scope: state.Lock{Group: group}.Scope()})
		}
		if err != nil {
			return err
		}
		if err := s.Save(); err != nil {
			return err
		}
		scope := state.Lock{Group: group}.Scope()
		out := cmd.OutOrStdout()
		if group != "" {
			locks, err := s.ListLocks(ctx)
			if err != nil {
				return fmt.Errorf("%s's own pause is lifted, but the pause locks could not be read again: %w", group, err)
			}
			if l := operator.ActivePause(locks, group, time.Now()); l != nil {
				fmt.Fprintf(out, "resumed %s, but %s remains paused by the %s lock (by %s: %s); `%s` lifts it\n",
					scope, group, l.Scope(), l.Who, l.Reason, cli.ResumeHint(cmd, l.Group))
				return writeChange(stdout, outFlag, changeDocument{Action: "resume", Outcome: org.Resumed, Scope: scope, Who: lifted.Who,
					Reason: lifted.Reason, Until: timeOrNil(lifted.Until), StillPausedBy: l.Scope()})
			}
		}
		doc := changeDocument{Action: "resume", Outcome: org.Resumed, Scope: scope, Who: lifted.Who, Reason: lifted.Reason, Until: timeOrNil(lifted.Until)}
		if !lifted.Active(time.Now()) {
			// An expired pause held nothing: say so, instead of suggesting that rollouts were held until now.
			fmt.Fprintf(out, "removed the %s pause lock (by %s: %s), which had already ended at %s: nothing was paused\n",
				scope, cmp.Or(lifted.Who, "unknown"), cmp.Or(lifted.Reason, "no reason given"), lifted.Until.UTC().Format(time.RFC3339))
			doc.Outcome = "expired"
			return writeChange(stdout, outFlag, doc)
		}
		fmt.Fprintf(out, "resumed %s (paused by %s since %s: %s): rollouts continue when the agent next looks at them\n",
			scope, cmp.Or(lifted.Who, "unknown"), lifted.Since.UTC().Format(time.RFC3339), cmp.Or(lifted.Reason, "no reason given"))
		wakes.Wake(cmd, s, operatorWakeUp(events.OperatorResume, group, who)) // the lock is gone: who only for the agent's log
		return writeChange(stdout, outFlag, doc)
	}
	return cmd
}

// stillHeldHint is the command that lifts what still holds after a resume found its own scope not paused: for the
// global scope, the first group pause ("Lift it with: patch-agent resume --group G ..."); for a group, the global
// pause. "" when nothing holds (or the locks cannot be read). The command repeats the store flags given.
func stillHeldHint(ctx context.Context, cmd *cobra.Command, s *cli.OpenedStore, group string) string {
	locks, err := s.ListLocks(ctx)
	if err != nil {
		return ""
	}
	now := time.Now()
	for _, l := range locks {
		if !l.Active(now) {
			continue
		}
		if group == state.GlobalScope && l.Group != state.GlobalScope {
			return "Lift a group's pause with: " + cli.ResumeHint(cmd, l.Group)
		}
		if group != state.GlobalScope && l.Group == state.GlobalScope {
			return "Lift the global pause with: " + cli.ResumeHint(cmd, "")
		}
	}
	return ""
}
