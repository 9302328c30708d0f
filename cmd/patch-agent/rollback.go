package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/operator"
)

func newRollbackCommand() *cobra.Command {
	var (
		to, who string
		yes     bool
	)
	cmd := &cobra.Command{
		Use:   "rollback GROUP",
		Short: "Roll a group back to a previous AMI, one instance at a time (asks for confirmation)",
		Long: `Starts a manual rollback: the group's rollout is pointed at a previous AMI (--to, default the AMI the group
ran before its current target) and the agent rolls the group there through its normal steps — a launch
template version with that AMI, then each instance replaced one at a time: surge, healthy replacement,
drain, terminate. The AMI rolled away from is not rolled out again while the AMI parameter still names it;
a newer AMI in the parameter is.

It is refused while a rollout is in progress (Detected, Preparing, Replacing, Verifying, RollingBack): let it
finish, or wait until it halts. Completed, RolledBack, Halted, Idle and Waiting rollouts can be rolled back.

This replaces instances. Without --yes the plan is printed and confirmation asked on the terminal; when
standard input is not a terminal, --yes is required.`,
		Example: `  # back to the AMI before the current one, after checking the plan
  patch-agent rollback prod-ecs-asg --table patch-agent --region eu-west-1

  # to a named AMI, from a script
  patch-agent rollback prod-ecs-asg --to ami-0a1a2a3a4a5a6a7a8 --yes

  # then follow it
  patch-agent status prod-ecs-asg --watch`,
		Args: cobra.ExactArgs(1),
	}
	stores := addStoreFlags(cmd)
	cmd.Flags().StringVar(&to, "to", "", "AMI to roll back to (default: the AMI the group ran before its current target)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	addWhoFlag(cmd, &who)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := requireWho(who); err != nil {
			return err
		}
		group := args[0]
		ctx := cmd.Context()
		s, err := stores.open(ctx)
		if err != nil {
			return err
		}
		plan, err := operator.PlanRollback(ctx, s, group, to)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		printRollbackPlan(out, plan)
		if !yes {
			if !isTerminal(cmd.InOrStdin()) {
				return errors.New("refusing to roll back without confirmation: standard input is not a terminal; pass --yes to confirm the plan above")
			}
			ok, err := confirm(cmd.InOrStdin(), out, fmt.Sprintf("Roll back %s to %s? Type yes to confirm: ", group, plan.To))
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("rollback not confirmed: nothing was written")
			}
		}
		r, err := operator.Rollback(ctx, s, group, plan.To, who, time.Now())
		if err != nil {
			return err
		}
		if err := s.save(); err != nil {
			return err
		}
		fmt.Fprintf(out, "rollback recorded: %s now targets %s (phase %s, requested by %s)\n", r.Group, r.TargetImageID, r.Phase, who)
		fmt.Fprintf(out, "Follow it with: patch-agent status %s --watch\n", r.Group)
		return nil
	}
	return cmd
}

// printRollbackPlan says what the rollback will do, for the confirmation.
func printRollbackPlan(w io.Writer, p operator.RollbackPlan) {
	fmt.Fprintf(w, "Rollback of %s (now %s): %s -> %s\n", p.Group, p.Phase, p.From, p.To)
	if p.Instances > 0 {
		fmt.Fprintf(w, "  %d of the group's %d instance(s) run %s (as last observed); each is replaced by one on %s,\n", p.OnFrom, p.Instances, p.From, p.To)
		fmt.Fprintln(w, "  one at a time: surge, healthy replacement, drain (DRAINING), terminate.")
	} else {
		fmt.Fprintf(w, "  every instance not on %s is replaced, one at a time: surge, healthy replacement, drain, terminate.\n", p.To)
	}
	fmt.Fprintf(w, "  %s is not rolled out again while the AMI parameter still names it.\n", p.From)
	if h := p.Halted; h != nil {
		fmt.Fprintf(w, "  note: the halted replacement of %s stopped at %s", h.OldInstanceID, h.Step)
		if h.NewInstanceID != "" {
			fmt.Fprintf(w, "; its replacement %s stays in the group and is replaced like the others", h.NewInstanceID)
		}
		fmt.Fprintf(w, ";\n  desired capacity stays one above its value before that surge (%d): set it back yourself if you want it.\n", h.DesiredBefore)
	}
}

// confirm asks question and reports whether the answer is "yes" (or "y").
func confirm(in io.Reader, out io.Writer, question string) (bool, error) {
	fmt.Fprint(out, question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("reading confirmation: %w", err)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "yes", "y":
		return true, nil
	}
	return false, nil
}
