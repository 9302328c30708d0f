package state

import (
	"fmt"
	"slices"
	"strings"
)

// The rollout vocabulary: the words every printer (the demo, `patch-agent status` and `history`, the
// notifications' phase fields, the logs' rollout_step field, the docs) uses for where a rollout stands. A
// phase or a step is shown as its persisted value, the constant itself ("Replacing", "ReplacementHealthy"),
// and a position as Position.String ("Replacing/ReplacementHealthy"); no printer has words of its own for
// them. Phases and Steps list the words with what each means; a test fails when the transition table names a
// phase or a step they do not list, or they list one the table does not name.

// String returns the phase as every printer shows it: its persisted value.
func (p Phase) String() string { return string(p) }

// String returns the step as every printer shows it: its persisted value.
func (s Step) String() string { return string(s) }

// phaseTerms are the phases with what each means in an operator's words, in the order a rollout passes them.
var phaseTerms = []struct {
	Phase   Phase
	Meaning string
}{
	{PhaseIdle, "every instance runs the target AMI; nothing to do"},
	{PhaseDetected, "a new target AMI was resolved from the source (or an operator asked for a rollback)"},
	{PhaseWaiting, "a gate (soak, maintenance window, approval, pause, alarm, AMI gate) holds the rollout; the reason says which and until when"},
	{PhasePreparing, "a launch template version with the target AMI is made and the instance refresh's intent recorded"},
	{PhaseReplacing, "outdated instances are being replaced; the step says how far the replacement in flight is"},
	{PhaseVerifying, "no outdated instance is left: every instance in service, and the warm pool, is checked on the target AMI"},
	{PhaseCompleted, "every instance runs the target AMI; waits for the next AMI"},
	{PhaseHalted, "a failure stopped the rollout without rollback; the reason says why and what moves it on"},
	{PhaseRollingBack, "a failure (or an operator) is putting the group back on the previous AMI"},
	{PhaseRolledBack, "the group is back on the previous AMI; the AMI rolled back from is not rolled again"},
}

// stepTerms are the steps with what each means: those of older agents' records first, then the steps of the
// rollouts whose replacement AWS carries out.
var stepTerms = []struct {
	Step    Step
	Meaning string
}{
	{StepSurge, "an older agent's step (it raised desired capacity to launch a replacement): this agent halts the rollout and says what to check"},
	{StepReplacementHealthy, "an older agent's step (its replacement booting): this agent halts the rollout and says what to check"},
	{StepDraining, "an older agent's step (its old instance draining): this agent halts the rollout and says what to check"},
	{StepTerminating, "an older agent's step (its old instance terminating): this agent halts the rollout and says what to check"},
	{StepInstanceRefresh, "EC2 Auto Scaling replaces the instances by an instance refresh; the agent holds each launch until it serves and drains each termination"},
	{StepNodegroupUpdate, "EKS replaces the nodes of a managed node group itself (UpdateNodegroupVersion), followed with DescribeUpdate"},
}

// Phases returns every phase of the vocabulary, in the order a rollout passes them. A test holds them to the
// phases the transition table names.
func Phases() []Phase {
	out := make([]Phase, len(phaseTerms))
	for i, t := range phaseTerms {
		out[i] = t.Phase
	}
	return out
}

// Steps returns every step of the vocabulary. A test holds them to the steps the transition table names.
func Steps() []Step {
	out := make([]Step, len(stepTerms))
	for i, t := range stepTerms {
		out[i] = t.Step
	}
	return out
}

// PhaseMeaning says what phase p means; "" for a word that is not a phase.
func PhaseMeaning(p Phase) string {
	for _, t := range phaseTerms {
		if t.Phase == p {
			return t.Meaning
		}
	}
	return ""
}

// StepMeaning says what step s means; "" for a word that is not a step.
func StepMeaning(s Step) string {
	for _, t := range stepTerms {
		if t.Step == s {
			return t.Meaning
		}
	}
	return ""
}

// IsPhase reports whether word is a phase of the vocabulary.
func IsPhase(word string) bool { return slices.Contains(Phases(), Phase(word)) }

// IsStep reports whether word is a step of the vocabulary.
func IsStep(word string) bool { return slices.Contains(Steps(), Step(word)) }

// IsPosition reports whether s is a position as Position.String renders it: a phase, or "Phase/Step" with a
// step the table names with that phase.
func IsPosition(s string) bool {
	ph, st, ok := strings.Cut(s, "/")
	if !ok {
		return IsPhase(ph)
	}
	for _, tr := range Transitions {
		for _, p := range []Position{tr.From, tr.To} {
			if string(p.Phase) == ph && string(p.Step) == st {
				return true
			}
		}
	}
	return false
}

// VocabularyTable renders the vocabulary as two Markdown tables, phases then steps, each word with its
// meaning and, for a step, the phases the transition table names it with. docs/operations.md embeds it
// between the markers "<!-- vocabulary:begin -->" and "<!-- vocabulary:end -->"; `go test ./internal/state
// -run TestVocabularyTable -update` rewrites it.
func VocabularyTable() string {
	var b strings.Builder
	b.WriteString("| Phase | Meaning |\n|---|---|\n")
	for _, p := range Phases() {
		fmt.Fprintf(&b, "| `%s` | %s |\n", p, PhaseMeaning(p))
	}
	b.WriteString("\n| Step | In phase | Meaning |\n|---|---|---|\n")
	for _, s := range Steps() {
		var in []string
		for _, tr := range Transitions {
			for _, p := range []Position{tr.From, tr.To} {
				if p.Step == s && !slices.Contains(in, "`"+string(p.Phase)+"`") {
					in = append(in, "`"+string(p.Phase)+"`")
				}
			}
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", s, strings.Join(in, ", "), StepMeaning(s))
	}
	return b.String()
}
