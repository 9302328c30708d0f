package main

import (
	"github.com/spf13/cobra"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "patch-agent",
		Short: "Keep ECS and EKS Auto Scaling groups on the current AMI, one safe replacement at a time",
		Long: `patch-agent watches the SSM parameters that name your AMIs. When one names a new AMI it moves the
launch templates of the opted-in Auto Scaling groups to it and replaces instances one at a time: a
replacement is launched and healthy first, then the old instance is drained (ECS: DRAINING; EKS: cordon and
eviction under PodDisruptionBudgets) and terminated.
It also drains instances on every Auto Scaling lifecycle hook before completing it.

Groups opt in with tags:
  patch-agent/enabled=true
  patch-agent/platform=ecs (or eks)
  patch-agent/cluster=<ECS or EKS cluster name>
  patch-agent/ami-parameter=<SSM parameter, e.g. /aws/service/ecs/optimized-ami/amazon-linux-2023/recommended>

Try it without an AWS account:  patch-agent demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.SetVersionTemplate(versionLine() + "\n")
	root.AddCommand(newRunCommand(), newDemoCommand(), newMessageCommand(), newStatusCommand(), newHistoryCommand(),
		newPauseCommand(), newResumeCommand(), newApproveCommand(), newRetryCommand(), newRollbackCommand(), newAuditCommand(),
		newVersionCommand(), newEKSCommand(), newHealthcheckCommand())
	markUsageErrors(root)
	return root
}
