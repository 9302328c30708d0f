package operate

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
)

// newSTS builds the STS client the approve command asks who is acting (a test replaces it).
var newSTS = func(cfg aws.Config) awsapi.STS { return sts.NewFromConfig(cfg) }

func NewApproveCommand() *cobra.Command {
	var (
		who      string
		force    bool
		skipSoak bool
		reason   string
		image    string
	)
	cmd := &cobra.Command{
		Use:   "approve GROUP",
		Short: "Approve the AMI a group waits for (groups tagged " + model.TagApproval + "=manual)",
		Long: `Records that you approved the group's current target AMI, and appends an "approved" entry to its history. A
group tagged ` + model.TagApproval + `=manual waits in phase Waiting with the reason "approval: waiting for ` + "`patch-agent approve GROUP`" + `"
until its target AMI is approved. After the write the command wakes the agent (an operator wake-up on its queue,
--queue-url): the rollout starts within seconds; without --queue-url, or when the send fails (a warning), at the
agent's next safety poll (within --reconcile-interval: 2 minutes with wake-up events). Other gates — soak,
maintenance window, alarms, a pause — still apply. The approval is for that AMI only: a newer AMI needs a
new approval. --ami names the AMI you reviewed (as status shows it): when the group's source moved on to
another AMI since, nothing is approved and the command says which AMI the group waits for now.

A group that is not waiting for approval (another phase, or another reason — a pause hides the approval
gate) is refused; --force records the approval anyway, and it takes effect when the group waits for that
AMI's approval.

--skip-soak --reason "..." also skips the soak time (patch-agent/min-ami-age) of that AMI: an urgent rollout
(a security fix) starts when the agent next looks at the group (woken, as above), before its soak ends; the other gates still apply. It is
accepted while the group waits for its soak or its approval, and recorded as a "soak-skipped" history entry;
the agent sends a SoakSkipped alert (metric and notification) when the rollout starts.

Who approved is the ARN of your AWS credentials (STS GetCallerIdentity), not a local user name; --who is used
only with --state-file, which has no AWS identity.

A GROUP the store has no record of is answered with the groups it holds records of. -o json prints
{"schemaVersion": 1, "group": ..., "imageId": ..., "approvedBy": ..., "phase": ..., "waitingForApproval": ...}
on stdout (for eks:CLUSTER: "cluster", "to" and "next", the command that goes on) and the sentences on stderr.`,
		Example: `  patch-agent status prod-ecs-asg            # check the AMI it waits for
  patch-agent approve prod-ecs-asg --ami ami-0abc1234def567890 --table patch-agent --region eu-west-1
  patch-agent approve prod-ecs-asg --skip-soak --reason "CVE-2026-1234 fix, INC-4711" --table patch-agent`,
		Args: cli.GroupArg,
	}
	stores := cli.AddStoreFlags(cmd)
	wakes := AddWakeFlag(cmd)
	cli.AddWhoFlag(cmd, &who)
	cmd.Flags().BoolVar(&force, "force", false, "record the approval even when the group is not waiting for approval")
	cmd.Flags().BoolVar(&skipSoak, "skip-soak", false, "also skip the AMI's soak time (needs --reason): the rollout starts before the soak ends")
	cmd.Flags().StringVar(&reason, "reason", "", "why the soak is skipped (required with --skip-soak; recorded in the history and the notification)")
	cmd.Flags().StringVar(&image, "ami", "", "the AMI you reviewed (ami-...): the approval is refused when the group's target is another AMI, its source having moved on since you looked")
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, nil, "table and wide: sentences; json: one document")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if skipSoak && strings.TrimSpace(reason) == "" {
			return cli.Usage(cmd, errors.New(`--skip-soak needs --reason "...": say why the AMI cannot wait for its soak time`))
		}
		if !skipSoak && cmd.Flags().Changed("reason") {
			return cli.Usage(cmd, errors.New("--reason goes with --skip-soak"))
		}
		if skipSoak && force {
			return cli.Usage(cmd, errors.New("--skip-soak and --force are exclusive: a soak is skipped only while the group waits for it or its approval"))
		}
		if err := checkEKSUpgradeSubject(args[0]); err != nil {
			return cli.Usage(cmd, err)
		}
		ctx := cmd.Context()
		s, stdout, who, err := openActing(cmd, stores, outFlag, who)
		if err != nil {
			return err
		}
		if isEKSUpgrade(args[0]) { // eks:CLUSTER, the plan of `patch-agent eks upgrade`
			if skipSoak {
				return cli.Usage(cmd, errors.New("--skip-soak applies to a group's rollout, not to an EKS upgrade plan"))
			}
			if image != "" {
				return cli.Usage(cmd, errors.New("--ami applies to a group's rollout, not to an EKS upgrade plan"))
			}
			return approveEKSUpgrade(cmd, stdout, s, args[0], who)
		}
		var r state.Rollout
		if skipSoak {
			r, err = operator.ApproveSkippingSoak(ctx, s, args[0], image, who, reason, time.Now())
		} else {
			r, err = operator.Approve(ctx, s, args[0], image, who, force, time.Now())
		}
		if se := (*operator.WaitingForSoakError)(nil); errors.As(err, &se) {
			se.ApproveCommand = cli.Pasteable(cmd, nil, "patch-agent approve "+cli.ShellQuote(args[0])+" --skip-soak --reason '...'")
		}
		if err != nil {
			return s.ExplainNotFound(ctx, args[0], err)
		}
		if err := s.Save(); err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "approved %s for %s by %s (phase %s)\n", r.ApprovedImage, r.Group, r.ApprovedBy, r.Phase)
		if skipSoak {
			fmt.Fprintf(out, "Soak skipped (%s): the rollout starts when the agent next looks at the group unless another gate holds it (see status).\n", r.SkipSoakReason)
		} else if operator.WaitingForApproval(r) {
			fmt.Fprintln(out, "The rollout starts when the agent next looks at the group unless another gate holds it (see status).")
		} else {
			fmt.Fprintln(out, "The group was not waiting for approval: the approval takes effect when it waits for this AMI's approval (see status).")
		}
		wakes.Wake(cmd, s, events.OperatorWakeUp{Action: events.OperatorApprove, Group: r.Group, Who: who})
		if !outFlag.Is(cli.FormatJSON) {
			return nil
		}
		return cli.WriteJSON(stdout, approvalDocument{SchemaVersion: schema.Version, Subject: r.Group, Group: r.Group, ImageID: r.ApprovedImage,
			ApprovedBy: r.ApprovedBy, Phase: string(r.Phase), WaitingForApproval: operator.WaitingForApproval(r), SkipSoakReason: r.SkipSoakReason})
	}
	return cmd
}

// approvalDocument is `approve -o json`: the approval as recorded, every field present ("" when it does not
// apply). For a group: group, imageId (the AMI approved), phase, waitingForApproval (false: it takes effect
// when the group waits for that AMI's approval) and skipSoakReason ("" unless --skip-soak); for eks:CLUSTER:
// cluster, to (the Kubernetes version) and next (the command that goes on with the upgrade).
type approvalDocument struct {
	SchemaVersion      int    `json:"schemaVersion"`
	Subject            string `json:"subject"`
	Group              string `json:"group"`
	ImageID            string `json:"imageId"`
	Cluster            string `json:"cluster"`
	To                 string `json:"to"`
	ApprovedBy         string `json:"approvedBy"`
	Phase              string `json:"phase"`
	WaitingForApproval bool   `json:"waitingForApproval"`
	SkipSoakReason     string `json:"skipSoakReason"`
	Next               string `json:"next"`
}

// actingIdentity is who a command that approves or requests records: with an AWS store (DynamoDB), always the
// STS caller's ARN (GetCallerIdentity), never the local --who, so that the two-person rule and the audit trail
// compare identities AWS vouches for whatever flags a later run is given; with a state file, --who (required).
// A --who that differs from the STS caller is noted on stderr and not used.
// openActing opens the store of stores and names who acts on it (actingIdentity, from --who); stdout is where
// the -o json document goes once the sentences go to stderr (sentencesToStderr).
func openActing(cmd *cobra.Command, stores *cli.StoreFlags, outFlag *cli.OutputValue, who string) (s *cli.OpenedStore, stdout io.Writer, actor string, err error) {
	if s, err = stores.Open(cmd.Context()); err != nil {
		return nil, nil, "", err
	}
	stdout = sentencesToStderr(cmd, outFlag)
	actor, err = actingIdentity(cmd, s, who)
	return s, stdout, actor, err
}

func actingIdentity(cmd *cobra.Command, s *cli.OpenedStore, who string) (string, error) {
	if s.AWS == nil {
		return who, cli.RequireWho(cmd, who)
	}
	arn, err := operator.CallerIdentity(cmd.Context(), newSTS(*s.AWS))
	if err != nil {
		return "", err
	}
	if cmd.Flags().Changed("who") && who != arn {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: recording the STS caller %s, not --who %q\n", arn, who)
	}
	return arn, nil
}
