package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/operator"
)

func newApproveCommand() *cobra.Command {
	var (
		who   string
		force bool
	)
	cmd := &cobra.Command{
		Use:   "approve GROUP",
		Short: "Approve the AMI a group waits for (groups tagged " + lifecycle.TagApproval + "=manual)",
		Long: `Records that you approved the group's current target AMI, and appends an "approved" entry to its history. A
group tagged ` + lifecycle.TagApproval + `=manual waits in phase Waiting with the reason "approval: waiting for ` + "`patch-agent approve GROUP`" + `"
until its target AMI is approved; the rollout then starts at the agent's next tick (other gates — soak,
maintenance window, alarms, a pause — still apply). The approval is for that AMI only: a newer AMI needs a
new approval.

A group that is not waiting for approval (another phase, or another reason — a pause hides the approval
gate) is refused; --force records the approval anyway, and it takes effect when the group waits for that
AMI's approval.`,
		Example: `  patch-agent status prod-ecs-asg            # check the AMI it waits for
  patch-agent approve prod-ecs-asg --table patch-agent --region eu-west-1`,
		Args: groupArg,
	}
	stores := addStoreFlags(cmd)
	addWhoFlag(cmd, &who)
	cmd.Flags().BoolVar(&force, "force", false, "record the approval even when the group is not waiting for approval")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := requireWho(cmd, who); err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := stores.open(ctx)
		if err != nil {
			return err
		}
		if isEKSUpgrade(args[0]) { // eks:CLUSTER, the plan of `patch-agent eks upgrade`
			return approveEKSUpgrade(cmd, s, args[0], who)
		}
		r, err := operator.Approve(ctx, s, args[0], who, force, time.Now())
		if err != nil {
			return err
		}
		if err := s.save(); err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "approved %s for %s by %s (phase %s)\n", r.ApprovedImage, r.Group, r.ApprovedBy, r.Phase)
		if operator.WaitingForApproval(r) {
			fmt.Fprintln(out, "The rollout starts at the agent's next tick unless another gate holds it (see status).")
		} else {
			fmt.Fprintln(out, "The group was not waiting for approval: the approval takes effect when it waits for this AMI's approval (see status).")
		}
		return nil
	}
	return cmd
}
