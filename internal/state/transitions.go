package state

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Position is where a rollout record stands: its Phase and, while an instance is being replaced, the Step of
// that replacement (Current.Step; "" when Current is nil). The zero Position is a target without a record.
//
// Designed for what comes next: a record with more than one replacement in flight (policy-v2) is checked
// replacement by replacement against the same Step rows; a managed node group target or another strategy
// (capacity providers) adds rows, never a second table.
type Position struct {
	Phase Phase
	Step  Step
}

// PositionOf returns where r stands.
func PositionOf(r Rollout) Position {
	p := Position{Phase: r.Phase}
	if r.Current != nil {
		p.Step = r.Current.Step
	}
	return p
}

// String renders the position as "Phase/Step", "Phase" without a replacement, "(none)" for no record.
func (p Position) String() string {
	switch {
	case p.Phase == "" && p.Step == "":
		return "(none)"
	case p.Step == "":
		return string(p.Phase)
	}
	return string(p.Phase) + "/" + string(p.Step)
}

// Writer says who writes a transition: the agent's rollout engine (engine.Orchestrator) or an
// operator command (internal/operator: rollback).
type Writer string

// Writers of rollout records.
const (
	WriterAgent    Writer = "agent"
	WriterOperator Writer = "operator"
)

// Transition is one allowed move of a rollout record from one Position to another.
type Transition struct {
	From, To Position
	By       Writer
	// Why says in a few words what makes the move (drawn on the diagram of docs/architecture.md).
	Why string
}

// ErrTransition is wrapped by CheckTransition's error: the write would move a record in a way the table does
// not declare (a bug, or a newer agent writing the table).
var ErrTransition = errors.New("transition not in the rollout transition table")

func at(ph Phase, st Step) Position { return Position{Phase: ph, Step: st} }

// The rows of a record an older agent left at one of its steps (StepSurge, StepReplacementHealthy,
// StepDraining, StepTerminating) or between two of them: the agent halts it without rollback, and an operator's
// retry or rollback starts it again by instance refresh.
const (
	olderAgent      = "left mid-replacement by an older agent"
	olderAgentReset = "retry or manual rollback of an older agent's rollout"
)

// Transitions is the one declared table of the rollout state machine: every (phase, step) -> (phase, step)
// move a writer may make. A write that stays at its Position (a new reason, a count, a lease renewal, the same
// step for the next instance) is always allowed and is not listed. docs/architecture.md draws this table
// (TransitionDiagram; a test keeps them equal), and tests fail when a row is never exercised: the agent's
// rows by internal/engine's orchestrator unit tests, the operator's by internal/operator's.
var Transitions = []Transition{
	{at("", ""), at(PhaseIdle, ""), WriterAgent, "first sight, already on the target AMI"},
	{at("", ""), at(PhaseDetected, ""), WriterAgent, "new AMI"},
	{at(PhaseIdle, ""), at(PhaseDetected, ""), WriterAgent, "new AMI"},
	{at(PhaseCompleted, ""), at(PhaseDetected, ""), WriterAgent, "new AMI"},
	{at(PhaseRolledBack, ""), at(PhaseDetected, ""), WriterAgent, "new AMI"},
	{at(PhaseWaiting, ""), at(PhaseDetected, ""), WriterAgent, "a newer AMI replaces a refused one"},
	{at(PhaseDetected, ""), at(PhaseWaiting, ""), WriterAgent, "AMI gate refuses, or a gate holds"},
	{at(PhaseDetected, ""), at(PhasePreparing, ""), WriterAgent, "gates pass, strategy chosen"},
	{at(PhaseWaiting, ""), at(PhasePreparing, ""), WriterAgent, "gates pass, strategy chosen"},
	{at(PhaseDetected, ""), at(PhaseHalted, ""), WriterAgent, "group cannot be rolled"},
	{at(PhaseWaiting, ""), at(PhaseHalted, ""), WriterAgent, "group cannot be rolled"},
	{at(PhasePreparing, ""), at(PhaseHalted, ""), WriterAgent, "no launch template"},
	{at(PhasePreparing, ""), at(PhaseDetected, ""), WriterAgent, "an older agent's rollout starts again by instance refresh"},
	{at(PhaseReplacing, ""), at(PhaseHalted, ""), WriterAgent, olderAgent},
	{at(PhaseReplacing, StepSurge), at(PhaseHalted, StepSurge), WriterAgent, olderAgent},
	{at(PhaseReplacing, StepReplacementHealthy), at(PhaseHalted, StepReplacementHealthy), WriterAgent, olderAgent},
	{at(PhaseReplacing, StepDraining), at(PhaseHalted, StepDraining), WriterAgent, olderAgent},
	{at(PhaseReplacing, StepTerminating), at(PhaseHalted, StepTerminating), WriterAgent, olderAgent},
	{at(PhaseVerifying, ""), at(PhaseHalted, ""), WriterAgent, olderAgent},
	{at(PhaseRollingBack, StepReplacementHealthy), at(PhaseHalted, StepReplacementHealthy), WriterAgent, olderAgent},
	{at(PhaseVerifying, ""), at(PhaseCompleted, ""), WriterAgent, "all on the target"},
	{at(PhasePreparing, ""), at(PhaseReplacing, StepNodegroupUpdate), WriterAgent, "managed node group: update token recorded"},
	{at(PhaseReplacing, StepNodegroupUpdate), at(PhaseVerifying, ""), WriterAgent, "managed node group: EKS update Successful"},
	{at(PhaseReplacing, StepNodegroupUpdate), at(PhaseRollingBack, StepNodegroupUpdate), WriterAgent, "managed node group: EKS update Failed, roll back"},
	{at(PhaseReplacing, StepNodegroupUpdate), at(PhaseHalted, StepNodegroupUpdate), WriterAgent, "managed node group: EKS update Failed, no rollback"},
	{at(PhaseRollingBack, StepNodegroupUpdate), at(PhaseRolledBack, ""), WriterAgent, "managed node group: previous version restored"},
	{at(PhaseRollingBack, StepNodegroupUpdate), at(PhaseHalted, StepNodegroupUpdate), WriterAgent, "managed node group: rollback update Failed"},
	{at("", ""), at(PhaseHalted, ""), WriterAgent, "not rolled: misconfigured, or a managed node group's Auto Scaling group"},
	{at(PhaseHalted, ""), at(PhaseIdle, ""), WriterAgent, "not rolled no more (tags fixed), already on the target AMI"},
	{at(PhaseHalted, ""), at(PhaseDetected, ""), WriterAgent, "not rolled no more (tags fixed), new AMI"},
	{at(PhasePreparing, ""), at(PhaseReplacing, StepInstanceRefresh), WriterAgent, "instance refresh: intent recorded"},
	{at(PhaseVerifying, ""), at(PhaseReplacing, StepInstanceRefresh), WriterAgent, "instance refresh: an instance not on the target"},
	{at(PhaseReplacing, StepInstanceRefresh), at(PhaseVerifying, ""), WriterAgent, "instance refresh Successful"},
	{at(PhaseReplacing, StepInstanceRefresh), at(PhaseWaiting, ""), WriterAgent, "instance refresh cancelled (pause, window end, approval withdrawn), or someone else's holds the group"},
	{at(PhaseReplacing, StepInstanceRefresh), at(PhaseDetected, ""), WriterAgent, "instance refresh cancelled: a newer AMI"},
	{at(PhaseReplacing, StepInstanceRefresh), at(PhaseRollingBack, StepInstanceRefresh), WriterAgent, "instance refresh Failed, ABANDONed launch or alarm: roll back"},
	{at(PhaseReplacing, StepInstanceRefresh), at(PhaseHalted, StepInstanceRefresh), WriterAgent, "instance refresh halted, no rollback"},
	{at(PhaseRollingBack, StepInstanceRefresh), at(PhaseRolledBack, ""), WriterAgent, "instance refresh: previous version restored"},
	{at(PhaseRollingBack, StepInstanceRefresh), at(PhaseHalted, StepInstanceRefresh), WriterAgent, "instance refresh: rollback failed"},

	{at(PhaseIdle, ""), at(PhaseDetected, ""), WriterOperator, "manual rollback"},
	{at(PhaseCompleted, ""), at(PhaseDetected, ""), WriterOperator, "manual rollback"},
	{at(PhaseRolledBack, ""), at(PhaseDetected, ""), WriterOperator, "manual rollback"},
	{at(PhaseWaiting, ""), at(PhaseDetected, ""), WriterOperator, "manual rollback"},
	{at(PhaseHalted, ""), at(PhaseDetected, ""), WriterOperator, "manual rollback, or retry"},
	{at(PhaseHalted, StepSurge), at(PhaseDetected, ""), WriterOperator, olderAgentReset},
	{at(PhaseHalted, StepReplacementHealthy), at(PhaseDetected, ""), WriterOperator, olderAgentReset},
	{at(PhaseHalted, StepDraining), at(PhaseDetected, ""), WriterOperator, olderAgentReset},
	{at(PhaseHalted, StepTerminating), at(PhaseDetected, ""), WriterOperator, olderAgentReset},
	{at(PhaseCompleted, ""), at(PhaseRollingBack, StepNodegroupUpdate), WriterOperator, "managed node group: manual rollback, token recorded"},
	{at(PhaseHalted, StepNodegroupUpdate), at(PhaseRollingBack, StepNodegroupUpdate), WriterOperator, "managed node group: manual rollback, token recorded"},
	{at(PhaseReplacing, StepInstanceRefresh), at(PhaseRollingBack, StepInstanceRefresh), WriterOperator, "instance refresh: manual rollback mid-refresh"},
	{at(PhaseHalted, StepInstanceRefresh), at(PhaseRollingBack, StepInstanceRefresh), WriterOperator, "instance refresh: manual rollback after a halt"},
	{at(PhaseHalted, StepInstanceRefresh), at(PhaseDetected, ""), WriterOperator, "instance refresh: retry after a halt"},
}

// CheckTransition returns nil when by may move a record from from to to: the table lists the move, or the
// record stays at its Position. Otherwise it returns an error wrapping ErrTransition that names both
// positions. Every allowed call is reported to the recorder of SetTransitionRecorder, if any.
func CheckTransition(by Writer, from, to Rollout) error {
	f, t := PositionOf(from), PositionOf(to)
	if f == t {
		return nil
	}
	for _, tr := range Transitions {
		if tr.By == by && tr.From == f && tr.To == t {
			transitionRecorder.record(tr)
			return nil
		}
	}
	return fmt.Errorf("%w: %s may not move %s from %s to %s", ErrTransition, by, from.Group, f, t)
}

var transitionRecorder recorder

type recorder struct {
	mu sync.Mutex
	fn func(Transition)
}

func (r *recorder) record(t Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fn != nil {
		r.fn(t)
	}
}

// SetTransitionRecorder makes every allowed table row CheckTransition matches reported to fn (nil: none) and
// returns a function that restores the previous recorder. A test hook: the tests that prove every row is
// exercised use it; the agent never sets it.
func SetTransitionRecorder(fn func(Transition)) (restore func()) {
	transitionRecorder.mu.Lock()
	defer transitionRecorder.mu.Unlock()
	prev := transitionRecorder.fn
	transitionRecorder.fn = fn
	return func() {
		transitionRecorder.mu.Lock()
		defer transitionRecorder.mu.Unlock()
		transitionRecorder.fn = prev
	}
}

// mermaidID names a position in the diagram.
func mermaidID(p Position) string {
	if p.Phase == "" {
		return "[*]"
	}
	if p.Step == "" {
		return string(p.Phase)
	}
	return string(p.Phase) + "_" + string(p.Step)
}

// TransitionDiagram renders Transitions as a Mermaid state diagram (stateDiagram-v2), one edge per row with
// the writer when it is the operator, in table order. docs/architecture.md embeds it between the markers
// "<!-- transitions:begin -->" and "<!-- transitions:end -->"; `go test ./internal/state -run
// TestTransitionDiagram -update` rewrites it.
func TransitionDiagram() string {
	var b strings.Builder
	b.WriteString("```mermaid\nstateDiagram-v2\n")
	seen := map[Position]bool{}
	for _, tr := range Transitions {
		for _, p := range []Position{tr.From, tr.To} {
			if p.Phase != "" && p.Step != "" && !seen[p] {
				seen[p] = true
				fmt.Fprintf(&b, "    state \"%s / %s\" as %s\n", p.Phase, p.Step, mermaidID(p))
			}
		}
	}
	for _, tr := range Transitions {
		why := tr.Why
		if tr.By == WriterOperator {
			why = "operator: " + why
		}
		fmt.Fprintf(&b, "    %s --> %s : %s\n", mermaidID(tr.From), mermaidID(tr.To), why)
	}
	b.WriteString("```\n")
	return b.String()
}
