package main

import (
	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/cli/orgcmd"
	"github.com/patch-agent/patch-agent/internal/cli/runcmd"
)

// exitStatusHelp lists the exit statuses of every command: the one place they are written down (docs/operations.md
// repeats it, held to this text by a test).
const exitStatusHelp = `Exit status:
  0    success
  1    error: the work failed or was refused (a pause already in place, a rollback not confirmed, a group
       not waiting for approval, an account that failed), or its check failed (healthcheck, message inspect)
  2    usage error only: an unknown command or flag, a missing or malformed argument or flag value, flags
       that do not go together; a hint names the command's --help
  3    the command ran and found what it was asked to report: audit --fail-if-behind found a group behind,
       audit --iac --fail-if-hardcoded found a hard-coded AMI, eks upgrade waits for an approval or a pause
  130  interrupted (Ctrl-C) before anything was written`

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

Try it without an AWS account:  patch-agent demo

Output: every command that prints takes -o table (the default, 120 columns), -o wide (every column in
full) and -o json (one document that starts with "schemaVersion"); status, history and audit also take
-o csv. message inspect prints JSON unless told otherwise. A command run with -o json that is refused or
fails before it printed its document prints instead, on stdout,
{"schemaVersion": 1, "error": {"message": "...", "exitStatus": N}}; the message is on stderr too.

` + exitStatusHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       cli.Version(),
		// A deprecated spelling of a flag's value is named on stderr before the command runs; the command
		// runs as if the current spelling had been given.
		PersistentPreRun: func(cmd *cobra.Command, _ []string) { cli.NoteDeprecatedOutput(cmd, cmd.ErrOrStderr()) },
	}
	root.SetVersionTemplate(cli.VersionLine() + "\n")
	root.AddCommand(runcmd.NewRunCommand(), newDemoCommand(), operate.NewMessageCommand(), operate.NewStatusCommand(),
		operate.NewHistoryCommand(), operate.NewPauseCommand(), operate.NewResumeCommand(), operate.NewApproveCommand(),
		operate.NewRetryCommand(), operate.NewRollbackCommand(), orgcmd.NewAuditCommand(), newVersionCommand(),
		operate.NewEKSCommand(), runcmd.NewHealthcheckCommand())
	cli.MarkUsageErrors(root)
	cli.DeprecationNotesOnStderr(root)
	return root
}
