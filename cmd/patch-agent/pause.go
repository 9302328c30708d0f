package main

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/state"
)

func newPauseCommand() *cobra.Command {
	var group, reason, until, who, output string
	var replace bool
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Stop new surges, drains and terminations of every group (or of one with --group)",
		Long: `Writes a pause lock: the global one, or one group's with --group. From the agent's next reconcile tick
no new destructive step starts in that scope — no surge, no rollout drain, no termination, no new launch
template version — and the rollout's status reason says "paused (...) by WHO since T: WHY; next step: ...".

What goes on while paused: drains for Auto Scaling lifecycle hooks (scale-in, rebalancing, instance
refresh) — they protect running tasks and their lifecycle actions are completed; waits already in flight
(a replacement booting, a drain under way, a termination leaving) are watched as usual, and their timeouts
still apply.

A second pause of a scope that is already paused is refused (exit 2, naming the pause in place) unless
--replace is given: it would silently end an --until pause earlier or later than planned. Across accounts
(--organization, --accounts) a global pause in place that lasts at least as long as the one asked for is
left as it is (already-paused); one that ends earlier, or any with an end when the one asked for has none,
is left too but reported paused-until and the command exits 1: run it again with --replace. --until ends the
pause by itself, at that time: the agent wakes the paused groups then; without it the pause lasts until
` + "`patch-agent resume`" + `. After the write the command wakes the agent (--queue-url) so that it reads the pause,
and its end, within seconds.

--group is confirmed first: Auto Scaling must know the group and it must carry the tag
patch-agent/enabled=true (a group opted in that the agent has no record of yet may be paused); with
--state-file the file must hold its rollout record. A misspelt name fails and pauses nothing.`,
		Example: `  # stop everything during an incident
  patch-agent pause --reason "incident 4711: ECS control plane errors" --table patch-agent --region eu-west-1

  # one group, for two hours
  patch-agent pause --group prod-ecs-asg --reason "quarterly load test" --until 2h

  # until a fixed time (RFC 3339)
  patch-agent pause --group prod-ecs-asg --reason "release freeze" --until 2026-12-01T08:00:00Z`,
		Args: cobra.NoArgs,
	}
	stores := addStoreFlags(cmd)
	wakes := addWakeFlag(cmd)
	orgs := addOrgFlags(cmd, &stores.profile, &stores.regions, true)
	addChangeOutputFlag(cmd, &output)
	cmd.Flags().StringVarP(&group, "group", "g", "", "pause only this Auto Scaling group (default: every group)")
	cmd.Flags().StringVarP(&reason, "reason", "r", "", "why (required; shown in status and the agent's logs)")
	cmd.Flags().StringVar(&until, "until", "", "end the pause by itself: an RFC 3339 time or a duration from now (2h, 90m)")
	cmd.Flags().BoolVar(&replace, "replace", false, "replace a pause of the same scope already in place (default: refuse)")
	addWhoFlag(cmd, &who)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := requireGroupIfGiven(cmd, group, "pause every group"); err != nil {
			return err
		}
		if strings.TrimSpace(reason) == "" {
			return usage(cmd, errors.New(`--reason is required: say why the agent is paused, e.g. --reason "incident 4711" (it is shown in status and logs)`))
		}
		if err := requireWho(cmd, who); err != nil {
			return err
		}
		now := time.Now()
		end, err := parseUntil(until, now)
		if err != nil {
			return usage(cmd, err)
		}
		if orgs.enabled() {
			return runOrgPause(cmd, orgs, output, org.PauseRequest{Reason: reason, Who: who, Until: end, Replace: replace})
		}
		if err := orgs.check(cmd); err != nil {
			return err
		}
		if err := checkChangeOutput(cmd); err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := stores.open(ctx)
		if err != nil {
			return err
		}
		if group != "" {
			if err := s.confirmGroup(ctx, group); err != nil {
				return err
			}
		}
		if !replace {
			err := operator.CheckNotPaused(ctx, s, group, now)
			if errors.Is(err, operator.ErrAlreadyPaused) {
				return usage(cmd, fmt.Errorf("%w; pass --replace to replace it", err))
			}
			if err != nil {
				return err
			}
		}
		if err := operator.Pause(ctx, s, group, reason, who, end, now); err != nil {
			return err
		}
		if err := s.save(); err != nil {
			return err
		}
		scope := state.Lock{Group: group}.Scope()
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "paused %s by %s", scope, who)
		if !end.IsZero() {
			fmt.Fprintf(out, " until %s", end.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(out, ": %s\n", strings.TrimSpace(reason))
		fmt.Fprintln(out, "From now on no new surge, rollout drain or termination starts (the agent reads the pause right before each); a step already under way finishes; lifecycle-hook drains go on.")
		resume := "patch-agent resume"
		if group != "" {
			resume += " --group " + group
		}
		fmt.Fprintf(out, "Undo with: %s\n", resume)
		wakes.wake(cmd, s, operatorWakeUp(events.OperatorPause, group, who))
		if group != "" {
			if _, err := s.GetRollout(ctx, group); errors.Is(err, state.ErrNotFound) {
				fmt.Fprintf(out, "%s is opted in but has no rollout record yet: the pause applies from the agent's first tick on it.\n", group)
			}
		}
		return nil
	}
	return cmd
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
		return usage(cmd, fmt.Errorf("--group is empty; omit it to %s", omitted))
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
	return t, nil
}

func newResumeCommand() *cobra.Command {
	var group, output string
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Remove the global pause (or one group's with --group)",
		Long: `Deletes a pause lock written by ` + "`patch-agent pause`" + `: the global one, or one group's with --group. Rollouts
continue from the step they were held before: within seconds, as the command wakes the agent (--queue-url); without
--queue-url, or when the send fails (a warning), at the agent's next safety poll (within its --reconcile-interval). A group's own pause and the global
pause are separate: resuming one leaves the other in place — after resume --group, a group the global pause
still holds stays paused, and the output says so. The output names the pause it lifted (who, since when,
why), as the delete itself returned it: a pause taken a moment before is lifted, never missed. Resuming a scope that is not paused says "nothing to
resume" and exits 0; resuming --group of a group that is not paused and that Auto Scaling does not know
(with --state-file: that has no rollout record) fails, as a misspelt name.`,
		Example: `  patch-agent resume --table patch-agent --region eu-west-1
  patch-agent resume --group prod-ecs-asg`,
		Args: cobra.NoArgs,
	}
	stores := addStoreFlags(cmd)
	wakes := addWakeFlag(cmd)
	orgs := addOrgFlags(cmd, &stores.profile, &stores.regions, true)
	addChangeOutputFlag(cmd, &output)
	cmd.Flags().StringVarP(&group, "group", "g", "", "resume only this Auto Scaling group's own pause (default: the global pause)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if orgs.enabled() {
			return runOrgResume(cmd, orgs, output)
		}
		if err := orgs.check(cmd); err != nil {
			return err
		}
		if err := checkChangeOutput(cmd); err != nil {
			return err
		}
		if err := requireGroupIfGiven(cmd, group, "resume the global pause"); err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := stores.open(ctx)
		if err != nil {
			return err
		}
		lifted, err := operator.Resume(ctx, s, group, time.Now())
		if errors.Is(err, operator.ErrNotPaused) {
			// A lock of a group that is gone can still be lifted (above); nothing paused and no such group is
			// a misspelt name.
			if group != "" {
				if cerr := s.confirmGroup(ctx, group); cerr != nil {
					return cerr
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "nothing to resume: %v\n", err)
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.save(); err != nil {
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
				fmt.Fprintf(out, "resumed %s, but %s remains paused by the %s lock (by %s: %s); `patch-agent resume` lifts it\n",
					scope, group, l.Scope(), l.Who, l.Reason)
				return nil
			}
		}
		if !lifted.Active(time.Now()) {
			// An expired pause held nothing: say so, instead of suggesting that rollouts were held until now.
			fmt.Fprintf(out, "removed the %s pause lock (by %s: %s), which had already ended at %s: nothing was paused\n",
				scope, cmp.Or(lifted.Who, "unknown"), cmp.Or(lifted.Reason, "no reason given"), lifted.Until.UTC().Format(time.RFC3339))
			return nil
		}
		fmt.Fprintf(out, "resumed %s (paused by %s since %s: %s): rollouts continue when the agent next looks at them\n",
			scope, cmp.Or(lifted.Who, "unknown"), lifted.Since.UTC().Format(time.RFC3339), cmp.Or(lifted.Reason, "no reason given"))
		wakes.wake(cmd, s, operatorWakeUp(events.OperatorResume, group, cmp.Or(defaultWho(), "unknown"))) // resume records no one: who only for the agent's log
		return nil
	}
	return cmd
}
