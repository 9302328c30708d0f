package eksupgrade

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Summary is the workflow as `patch-agent eks upgrade --output json` (and `--status -o json`) prints it, after
// the document's schemaVersion. A self-managed node group's step carries the agent's rollout progress (nodes).
type Summary struct {
	Cluster string              `json:"cluster"`
	From    string              `json:"from,omitempty"`
	To      string              `json:"to"`
	Phase   state.WorkflowPhase `json:"phase"`
	Reason  string              `json:"reason,omitempty"`
	// DryRun marks the plan of --dry-run: nothing was written or changed.
	DryRun bool `json:"dryRun,omitempty"`
	// CurrentStep is the step being worked on ("control-plane prod"), "" once all are done.
	CurrentStep string                 `json:"currentStep,omitempty"`
	Steps       []state.WorkflowStep   `json:"steps"`
	Checks      []state.PreflightCheck `json:"checks,omitempty"`
	// Actions is what operators must do (steps in ActionRequired).
	Actions     []string  `json:"actions,omitempty"`
	RequestedBy string    `json:"requestedBy,omitempty"`
	ApprovedBy  string    `json:"approvedBy,omitempty"`
	StartedAt   time.Time `json:"startedAt,omitzero"`
	UpdatedAt   time.Time `json:"updatedAt,omitzero"`
	// RunningBy is the invocation that holds the lease, until RunningUntil ("" when none does).
	RunningBy    string    `json:"runningBy,omitempty"`
	RunningUntil time.Time `json:"runningUntil,omitzero"`
}

// NewSummary returns the summary of w; the lease is reported only while it holds at now.
func NewSummary(w state.Workflow, now time.Time) Summary {
	s := Summary{Cluster: w.Cluster, From: w.From, To: w.To, Phase: w.Phase, Reason: w.Reason, Steps: w.Steps, Checks: w.Checks,
		Actions: Actions(w), RequestedBy: w.RequestedBy, ApprovedBy: w.ApprovedBy, StartedAt: w.StartedAt, UpdatedAt: w.UpdatedAt}
	if s.Steps == nil {
		s.Steps = []state.WorkflowStep{}
	}
	if name := stepName(w); name != "-" {
		s.CurrentStep = name
	}
	if w.LeaseOwner != "" && now.Before(w.LeaseExpires) {
		s.RunningBy, s.RunningUntil = w.LeaseOwner, w.LeaseExpires
	}
	return s
}

// Render writes a summary for people: the workflow's phase and current step, its steps as a table (with
// update ids and who started each), the preflight checks when checks is set, and the actions left to
// operators. Write errors of out are not reported.
func Render(out io.Writer, s Summary, checks bool) {
	title := fmt.Sprintf("EKS upgrade of %s: %s -> %s", s.Cluster, dash(s.From), s.To)
	if s.DryRun {
		title += " (dry run: nothing was changed)"
	}
	fmt.Fprintln(out, title)
	fmt.Fprintf(out, "phase %s", s.Phase)
	if s.CurrentStep != "" && s.Phase != state.WorkflowCompleted {
		fmt.Fprintf(out, ", step %s", s.CurrentStep)
	}
	fmt.Fprintln(out)
	if s.Reason != "" {
		fmt.Fprintf(out, "reason: %s\n", oneLine(s.Reason))
	}
	if s.RunningBy != "" {
		fmt.Fprintf(out, "running: %s (lease until %s)\n", s.RunningBy, s.RunningUntil.UTC().Format(time.RFC3339))
	}
	if s.ApprovedBy != "" {
		fmt.Fprintf(out, "approved by %s\n", s.ApprovedBy)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tSTEP\tNAME\tFROM\tTO\tSTATUS\tUPDATE\tBY\tCOMPLETED\tDETAIL")
	for i, st := range s.Steps {
		detail := st.Detail
		if st.Action != "" {
			detail = "ACTION: " + st.Action
		}
		if st.Nodes != nil && (st.Status == state.StepStatusInProgress || st.Status == state.StepStatusCompleted) { // a failure keeps its reason
			detail = NodesLine(st.Nodes)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i+1, st.Kind, st.Name, dash(st.From), dash(st.To), st.Status,
			dash(st.UpdateID), dash(st.By), timeCell(st.CompletedAt), dash(oneLine(detail)))
	}
	_ = tw.Flush()
	if checks && len(s.Checks) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
		for _, c := range s.Checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Result, dash(oneLine(c.Detail)))
		}
		_ = tw.Flush()
	}
	if len(s.Actions) > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "Actions required:")
		for _, a := range s.Actions {
			fmt.Fprintf(out, "  - %s\n", a)
		}
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func timeCell(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
