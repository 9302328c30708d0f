package operate

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/schema"
)

func NewRetryCommand() *cobra.Command {
	var who string
	cmd := &cobra.Command{
		Use:   "retry GROUP",
		Short: "Roll again the AMI a group's rollout rolled back from, once its cause is fixed",
		Long: `After a rollout halts and rolls back (status: RolledBack), or after a manual rollback, the agent does not roll
the failed AMI again while its source still names it: only a newer AMI starts a rollout. Once the cause is
fixed (a PodDisruptionBudget that blocked every eviction, a service that could not start on the AMI, an
instance type short of capacity), retry lets the agent roll that AMI once more. The agent detects it at its
next look (woken at once with --queue-url) and takes it through every gate again: the AMI gate, soak, approval,
maintenance window, alarms and pause. An EKS managed node group retries its rolled-back release the same way.

A Halted rollout by instance refresh starts over (its refresh has ended; the next one skips the instances already
on the AMI), and so does a rollout an older agent left mid-replacement once you checked what its reason names;
another Halted rollout is rolled back first (patch-agent rollback GROUP); an active one is left alone. The retry is
recorded in the group's history ("retried", with who asked). A GROUP the store has no record of is answered with
the groups it holds records of. A retry already requested, that the agent has not taken yet, is not recorded
again: the command says so and succeeds. -o json prints {"schemaVersion": 1, "group": ..., "retried": ...,
"phase": ..., "reason": ..., "retriedBy": ..., "alreadyRequested": ...}.`,
		Example: `  patch-agent status prod-ecs-asg            # RolledBack, with the reason
  patch-agent retry prod-ecs-asg --table patch-agent --region eu-west-1`,
		Args: cli.GroupArg,
	}
	stores := cli.AddStoreFlags(cmd)
	wakes := AddWakeFlag(cmd)
	cli.AddWhoFlag(cmd, &who)
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "table and wide: a sentence; json: one document")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		s, stdout, who, err := openActing(cmd, stores, outFlag, who)
		if err != nil {
			return err
		}
		r, again, err := operator.Retry(ctx, s, args[0], who, time.Now())
		already := errors.Is(err, operator.ErrRetryAlreadyRequested)
		switch {
		case already:
			// The request stands as recorded: asking again writes nothing and succeeds.
			if again, err = operator.PendingRetry(ctx, s, r); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "a retry of %s is already requested (%s): nothing written; status shows when the agent takes it.\n",
				r.Group, r.Reason)
		case err != nil:
			return s.ExplainNotFound(ctx, args[0], err)
		default:
			if err := s.Save(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "retry of %s for %s recorded by %s: the agent rolls it again at its next look, through every gate (see status).\n",
				again, r.Group, who)
			wakes.Wake(cmd, s, events.OperatorWakeUp{Action: events.OperatorRetry, Group: r.Group, Who: who})
		}
		if !outFlag.Is(cli.FormatJSON) {
			return nil
		}
		return cli.WriteJSON(stdout, retryDocument{SchemaVersion: schema.Version, Group: r.Group, Retried: again, Phase: string(r.Phase),
			Reason: r.Reason, RetriedBy: who, AlreadyRequested: already})
	}
	return cmd
}

// retryDocument is `retry -o json`: the retry as recorded, every field present.
type retryDocument struct {
	SchemaVersion int    `json:"schemaVersion"`
	Group         string `json:"group"`
	Retried       string `json:"retried"` // the AMI (or EKS release) the agent rolls again
	Phase         string `json:"phase"`
	Reason        string `json:"reason"`
	RetriedBy     string `json:"retriedBy"`
	// AlreadyRequested: a retry was requested before and the agent has not taken it yet; nothing was written
	// (retriedBy is who asked this time, the reason names who asked first).
	AlreadyRequested bool `json:"alreadyRequested"`
}
