package operate

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/schema"
)

func NewRollbackCommand() *cobra.Command {
	var (
		to, who    string
		yes, force bool
	)
	cmd := &cobra.Command{
		Use:   "rollback GROUP",
		Short: "Roll a group back to a previous AMI, one instance at a time (asks for confirmation)",
		Long: `Starts a manual rollback: the group's rollout is pointed at a previous AMI (--to, default the AMI the group
ran before its current target) and the agent rolls the group there through its normal steps — a launch
template version with that AMI, then an instance refresh (launch before terminate, each new instance held
until it serves, each old one drained; desired capacity is not written). The AMI rolled away from is not rolled out again while the AMI parameter still names it;
a newer AMI in the parameter is.

A rollout in its instance refresh (Replacing/InstanceRefresh) can be rolled back at any moment, mid-refresh
included (RollbackInstanceRefresh while Auto Scaling allows it, else a refresh back to the previous version).
Completed, RolledBack, Halted, Idle and Waiting rollouts can be rolled back. A rollout in any other step of
progress is refused: Detected or Preparing (its refresh starts within a tick; pause it to hold it there),
Verifying, RollingBack, or a Replacing step an older agent's strategy left: let it finish, or wait until it
halts.

--to takes an AMI id exactly (ami- and 8 or 17 lowercase hex digits) that the group's history names (as the
previous or new AMI of an entry) or that is the group's previous AMI; --force rolls back to an AMI the
history does not know, and the plan says so. Rolling back to the AMI the group already targets is refused, and so
is rolling a rolled-back group to the AMI it rolled back from: ` + "`patch-agent retry GROUP`" + ` rolls that one again,
through every gate.

This replaces instances. Without --yes the plan is printed and confirmation asked on the terminal (type
yes; Ctrl-C aborts and writes nothing); when standard input is not a terminal, --yes is required.

An EKS managed node group (GROUP nodegroup/CLUSTER/NAME) is rolled back from Completed or Halted/NodegroupUpdate
to the release, or launch template version, it ran before its target: the agent sends one UpdateNodegroupVersion
with a ClientRequestToken recorded first, and EKS replaces the nodes itself. --to and --force do not apply.

Before asking, it reads the group's AMI source as the agent would (its tag patch-agent/ami-parameter, then
that SSM parameter) and warns on stderr when the source already names an AMI other than the two of the plan:
the agent rolls the group to that AMI at its next look, superseding the rollback. A source it cannot read is
one line on stderr, and the rollback goes on. -o json prints {"schemaVersion": 1, "group": ..., "from": ...,
"to": ..., "sourceWarning": ...} on stdout once the rollback is recorded, the plan and the rest on stderr.

Once the rollback is recorded the command wakes the agent (--queue-url, an operator wake-up on its queue): it
starts within seconds; without --queue-url, or when the send fails (a warning), at its next safety poll.`,
		Example: `  # back to the AMI before the current one, after checking the plan
  patch-agent rollback prod-ecs-asg --table patch-agent --region eu-west-1

  # to a named AMI, from a script
  patch-agent rollback prod-ecs-asg --to ami-0a1a2a3a4a5a6a7a8 --yes

  # then follow it
  patch-agent status prod-ecs-asg --watch`,
		Args: cli.GroupArg,
	}
	stores := cli.AddStoreFlags(cmd)
	wakes := AddWakeFlag(cmd)
	cmd.Flags().StringVar(&to, "to", "", "AMI to roll back to (default: the AMI the group ran before its current target)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&force, "force", false, "roll back to a --to AMI that the group's history does not name")
	outFlag := cli.AddOutputFlag(cmd, cli.FormatTable, cli.StandardFormats, map[string]string{"text": cli.FormatTable},
		"table and wide: the plan and what was done in sentences; json: one document on stdout once the rollback is recorded, the plan on stderr")
	cli.AddWhoFlag(cmd, &who)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := cli.RequireWho(cmd, who); err != nil {
			return err
		}
		stdout := sentencesToStderr(cmd, outFlag) // the plan, the prompt and the wake-up's line: stdout holds only the document
		if cmd.Flags().Changed("to") {
			if err := operator.ValidateAMIID(to); err != nil {
				return cli.Usage(cmd, fmt.Errorf("--to: %w", err))
			}
		}
		group := args[0]
		ctx := cmd.Context()
		s, err := stores.Open(ctx)
		if err != nil {
			return err
		}
		plan, err := operator.PlanRollback(ctx, s, group, to, force)
		if ue := (*operator.UnrecordedImageError)(nil); errors.As(err, &ue) {
			ue.HistoryCommand = cli.Pasteable(cmd, cli.Command(cmd, "history"), "patch-agent history "+cli.ShellQuote(group))
		}
		if pe := (*operator.RolloutInProgressError)(nil); errors.As(err, &pe) {
			pe.PauseCommand = cli.Pasteable(cmd, cli.Command(cmd, "pause"), "patch-agent pause --group "+cli.ShellQuote(group)+" --reason '...'")
		}
		if err != nil {
			return s.ExplainNotFound(ctx, group, err)
		}
		out := cmd.OutOrStdout()
		printRollbackPlan(out, plan)
		warning := warnRollbackSource(ctx, cmd.ErrOrStderr(), s, plan)
		if !yes {
			if !StdinIsTerminal(cmd.InOrStdin()) {
				return errors.New("refusing to roll back without confirmation: standard input is not a terminal; pass --yes to confirm the plan above")
			}
			ok, err := confirm(ctx, cmd.InOrStdin(), out, fmt.Sprintf("Roll back %s to %s? Type yes to confirm: ", group, plan.To))
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("rollback not confirmed (only yes confirms): nothing was written")
			}
		}
		confirmed := plan.To
		if plan.Nodegroup != nil {
			confirmed = "" // a node group's rollback names no AMI: always its previous release or version
		}
		r, err := operator.Rollback(ctx, s, group, confirmed, who, force, time.Now())
		if err != nil {
			return err
		}
		if err := s.Save(); err != nil {
			return err
		}
		target := r.TargetImageID
		if plan.Nodegroup != nil || plan.Refresh != nil {
			// A node group's rollback, and one of an instance refresh, keep the record's target (the AMI rolled
			// back from) while they run: the plan names where they go.
			target = plan.To
		}
		fmt.Fprintf(out, "rollback recorded: %s now targets %s (phase %s, requested by %s)\n", r.Group, target, r.Phase, who)
		wakes.Wake(cmd, s, events.OperatorWakeUp{Action: events.OperatorRollback, Group: r.Group, Who: who})
		fmt.Fprintf(out, "Follow it with: %s\n", cli.Pasteable(cmd, cli.Command(cmd, "status"), "patch-agent status "+cli.ShellQuote(r.Group)+" --watch"))
		if outFlag.Is(cli.FormatJSON) {
			return cli.WriteJSON(stdout, RollbackDocument{SchemaVersion: schema.Version, Group: r.Group, Phase: string(r.Phase),
				From: plan.From, To: target, Who: who, SourceWarning: warning})
		}
		return nil
	}
	return cmd
}

// RollbackDocument is `rollback -o json`: the rollback as recorded. SourceWarning is the stderr warning that
// the group's AMI source already names a newer AMI, which supersedes the rollback at the agent's next look
// ("" when it does not, or when the source could not be read).
type RollbackDocument struct {
	SchemaVersion int    `json:"schemaVersion"`
	Group         string `json:"group"`
	Phase         string `json:"phase"`
	From          string `json:"from"`
	To            string `json:"to"`
	Who           string `json:"who"`
	SourceWarning string `json:"sourceWarning,omitempty"`
}

// warnRollbackSource runs the source check of plan (checkRollbackSource) and writes its outcome to w: a
// warning when the source names an AMI that supersedes the rollback (returned, for -o json), one line when the
// source cannot be read, nothing when it names the plan's own AMIs. A managed node group's rollback is not
// checked: its source is a release, which EKS resolves.
func warnRollbackSource(ctx context.Context, w io.Writer, s *cli.OpenedStore, plan operator.RollbackPlan) string {
	if plan.Nodegroup != nil {
		return ""
	}
	rd, err := NewSourceReaders(s)
	var c sourceCheck
	if err == nil {
		c, err = checkRollbackSource(ctx, rd, plan)
	}
	if err != nil {
		fmt.Fprintf(w, "note: could not read the AMI source of %s (%v); not checked whether a newer AMI supersedes this rollback\n", plan.Group, err)
		return ""
	}
	if !c.Superseding {
		return ""
	}
	warning := fmt.Sprintf("%s already names %s, neither %s nor %s: the agent rolls %s to %s at its next look, superseding this rollback "+
		"(point the parameter back, or pause the group, to keep %s)", c.Parameter, c.Image, plan.From, plan.To, plan.Group, c.Image, plan.To)
	fmt.Fprintf(w, "warning: %s\n", warning)
	return warning
}

// drainWords names the drain of a platform: the container instance set to DRAINING (ECS), the node cordoned
// and its pods evicted (EKS).
func drainWords(platform string) string {
	switch platform {
	case "ecs":
		return "drained (container instance DRAINING)"
	case "eks":
		return "drained (node cordoned, pods evicted under their PodDisruptionBudgets)"
	}
	return "drained"
}

// StdinIsTerminal decides whether rollback may ask for confirmation; tests replace it.
var StdinIsTerminal = cli.IsTerminal

// printRollbackPlan says what the rollback will do, for the confirmation. The counts are the record's (what
// the agent last observed): it knows how many instances run From, not which AMI the others run.
func printRollbackPlan(w io.Writer, p operator.RollbackPlan) {
	fmt.Fprintf(w, "Rollback of %s (now %s): %s -> %s\n", p.Group, p.Phase, p.From, p.To)
	if ng := p.Nodegroup; ng != nil {
		fmt.Fprintf(w, "  the agent sends one UpdateNodegroupVersion to %s for managed node group %s/%s;\n", p.To, ng.Cluster, ng.Name)
		fmt.Fprintf(w, "  EKS replaces the nodes itself (cordon, evictions under PodDisruptionBudgets, %s); the agent drains nothing.\n", model.UpdateConfigWords(ng.MaxUnavailable, ng.MaxUnavailablePercentage))
		fmt.Fprintf(w, "  %s is not rolled out again while its source still names it.\n", p.From)
		return
	}
	if f := p.Refresh; f != nil && f.ID == "" {
		fmt.Fprintf(w, "  no instance refresh is recorded as sent yet: the agent rolls back one it finds running on the target's version\n")
		fmt.Fprintf(w, "  (an answer it lost), else starts a refresh back to launch template version %s; desired capacity is not written.\n", f.PreviousVersion)
		fmt.Fprintf(w, "  %s is not rolled out again while its source still names it.\n", p.From)
		return
	}
	if f := p.Refresh; f != nil {
		fmt.Fprintf(w, "  the agent rolls instance refresh %s (%s) back now: RollbackInstanceRefresh while Auto Scaling allows it,\n", f.ID, f.Status)
		fmt.Fprintf(w, "  else a refresh to launch template version %s; desired capacity is not written.\n", f.PreviousVersion)
		fmt.Fprintf(w, "  %s is not rolled out again while its source still names it.\n", p.From)
		return
	}
	if p.Unrecorded {
		fmt.Fprintf(w, "  --force: %s is not in the group's history nor its previous AMI; make sure it exists in this region and runs this group's workload.\n", p.To)
	}
	switch {
	case p.Instances > 0:
		fmt.Fprintf(w, "  %d of the group's %d instance(s) run %s (as last observed); an instance refresh to a launch template version with %s\n", p.OnFrom, p.Instances, p.From, p.To)
		fmt.Fprintf(w, "  replaces them, launching before terminating: each new instance held until it serves, each old one %s; desired capacity is not written.\n", drainWords(p.Platform))
	default:
		fmt.Fprintf(w, "  an instance refresh to a launch template version with %s replaces every instance not on it, launching before terminating.\n", p.To)
	}
	fmt.Fprintf(w, "  %s is not rolled out again while the AMI parameter still names it.\n", p.From)
	if h := p.Halted; h != nil {
		fmt.Fprintf(w, "  note: an older patch-agent left its replacement of %s at step %s: check the group's desired capacity and MaxSize\n", h.OldInstanceID, h.Step)
		fmt.Fprintf(w, "  first (that agent wrote them) and lower what is left over; the rollout's reason on status says what to look at.\n")
	}
}

// errAborted ends a command interrupted (Ctrl-C, SIGTERM) before it wrote anything, with the shell's status
// for SIGINT.
var errAborted = cli.ExitError{Code: 130, Err: errors.New("aborted: nothing was written")}

// confirm asks question and reports whether the answer is "yes" (any case, surrounding spaces ignored;
// "y" is not enough). The answer is read in a goroutine so that ctx's cancellation (Ctrl-C: main's
// signal.NotifyContext) ends the wait at once with errAborted; the goroutine is left blocked on in, which
// is fine for a process about to exit.
func confirm(ctx context.Context, in io.Reader, out io.Writer, question string) (bool, error) {
	fmt.Fprint(out, question)
	type answer struct {
		line string
		err  error
	}
	answers := make(chan answer, 1)
	go func() {
		line, err := bufio.NewReader(in).ReadString('\n')
		answers <- answer{line, err}
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "\naborted")
		return false, errAborted
	case a := <-answers:
		if a.err != nil && !errors.Is(a.err, io.EOF) {
			return false, fmt.Errorf("reading confirmation: %w", a.err)
		}
		return strings.EqualFold(strings.TrimSpace(a.line), "yes"), nil
	}
}
