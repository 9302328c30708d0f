package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

func newApproveCommand() *cobra.Command {
	var who string
	cmd := &cobra.Command{
		Use:   "approve GROUP",
		Short: "Approve the AMI a group waits for (groups tagged " + lifecycle.TagApproval + "=manual)",
		Long: `Records that you approved the group's current target AMI. A group tagged ` + lifecycle.TagApproval + `=manual waits
in phase Waiting with the reason "approval: waiting for ` + "`patch-agent approve GROUP`" + `" until its target AMI is approved;
the rollout then starts at the agent's next tick (other gates — soak, maintenance window, alarms — still
apply). The approval is for that AMI only: a newer AMI needs a new approval. Approving a group without the
tag is recorded and has no effect.`,
		Example: `  patch-agent status prod-ecs-asg            # check the AMI it waits for
  patch-agent approve prod-ecs-asg --table patch-agent --region eu-west-1`,
		Args: cobra.ExactArgs(1),
	}
	stores := addStoreFlags(cmd)
	addWhoFlag(cmd, &who)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := requireWho(who); err != nil {
			return err
		}
		ctx := cmd.Context()
		s, err := stores.open(ctx)
		if err != nil {
			return err
		}
		r, err := operator.Approve(ctx, s, args[0], who)
		if err != nil {
			return err
		}
		if err := s.save(); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "approved %s for %s by %s (phase %s)\n", r.ApprovedImage, r.Group, r.ApprovedBy, r.Phase)
		if r.Phase == state.PhaseWaiting || r.Phase == state.PhaseDetected {
			fmt.Fprintln(cmd.OutOrStdout(), "The rollout starts at the agent's next tick unless another gate holds it (see status).")
		}
		return nil
	}
	return cmd
}
