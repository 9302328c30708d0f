package state_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

var update = flag.Bool("update", false, "rewrite the generated sections of docs/architecture.md (transition diagram) and docs/operations.md (vocabulary) from the state package")

func rollout(ph state.Phase, st state.Step) state.Rollout {
	r := state.Rollout{Group: "prod", Phase: ph}
	if st != "" {
		r.Current = &state.Replacement{Step: st, OldInstanceID: "i-1"}
	}
	return r
}

func TestTransitionTableRefusesIdleToTerminating(t *testing.T) {
	err := state.CheckTransition(state.WriterAgent, rollout(state.PhaseIdle, ""), rollout(state.PhaseReplacing, state.StepTerminating))
	require.ErrorIs(t, err, state.ErrTransition)
	require.ErrorContains(t, err, "agent may not move prod from Idle to Replacing/Terminating")
}

func TestTransitionTable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		by       state.Writer
		from, to state.Rollout
		allowed  bool
	}{
		{"a declared row", state.WriterAgent, rollout(state.PhaseReplacing, state.StepDraining), rollout(state.PhaseHalted, state.StepDraining), true},
		{"an older agent's step is never entered: Draining -> Terminating", state.WriterAgent, rollout(state.PhaseReplacing, state.StepDraining), rollout(state.PhaseReplacing, state.StepTerminating), false},
		{"an older agent's step is never entered: Replacing -> Replacing/Surge", state.WriterAgent, rollout(state.PhaseReplacing, ""), rollout(state.PhaseReplacing, state.StepSurge), false},
		{"staying at a position (new reason, lease renewal)", state.WriterAgent, rollout(state.PhaseWaiting, ""), rollout(state.PhaseWaiting, ""), true},
		{"a step skipped: Surge -> Terminating", state.WriterAgent, rollout(state.PhaseReplacing, state.StepSurge), rollout(state.PhaseReplacing, state.StepTerminating), false},
		{"backwards: Completed -> Replacing", state.WriterAgent, rollout(state.PhaseCompleted, ""), rollout(state.PhaseReplacing, ""), false},
		{"the operator's row is not the agent's: Halted -> Detected", state.WriterAgent, rollout(state.PhaseHalted, state.StepDraining), rollout(state.PhaseDetected, ""), false},
		{"the operator resets a halted rollout", state.WriterOperator, rollout(state.PhaseHalted, state.StepDraining), rollout(state.PhaseDetected, ""), true},
		{"the operator never moves a replacement", state.WriterOperator, rollout(state.PhaseReplacing, state.StepDraining), rollout(state.PhaseDetected, ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := state.CheckTransition(tc.by, tc.from, tc.to)
			if tc.allowed {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, state.ErrTransition)
			}
		})
	}
}

func TestTransitionTableHasNoDuplicateAndNoSelfRows(t *testing.T) {
	seen := map[state.Transition]bool{}
	for _, tr := range state.Transitions {
		key := state.Transition{From: tr.From, To: tr.To, By: tr.By}
		require.False(t, seen[key], "duplicate row %s -> %s by %s", tr.From, tr.To, tr.By)
		seen[key] = true
		require.NotEqual(t, tr.From, tr.To, "a stay is always allowed and is not a row")
		require.NotEmpty(t, tr.Why)
	}
}

func TestTransitionRecorderSeesEveryAllowedRow(t *testing.T) {
	var got []state.Transition
	restore := state.SetTransitionRecorder(func(tr state.Transition) { got = append(got, tr) })
	require.NoError(t, state.CheckTransition(state.WriterAgent, rollout(state.PhaseVerifying, ""), rollout(state.PhaseCompleted, "")))
	require.Error(t, state.CheckTransition(state.WriterAgent, rollout(state.PhaseIdle, ""), rollout(state.PhaseCompleted, "")))
	restore()
	require.NoError(t, state.CheckTransition(state.WriterAgent, rollout(state.PhaseVerifying, ""), rollout(state.PhaseCompleted, "")))
	require.Len(t, got, 1, "only the allowed row, and nothing after restore")
	require.Equal(t, state.PhaseCompleted, got[0].To.Phase)
}

// TestTransitionDiagramMatchesArchitectureDoc keeps the diagram of docs/architecture.md equal to the table;
// -update rewrites it.
func TestTransitionDiagramMatchesArchitectureDoc(t *testing.T) {
	const begin, end = "<!-- transitions:begin -->\n", "<!-- transitions:end -->"
	path := filepath.Join("..", "..", "docs", "architecture.md")
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	require.True(t, i >= 0 && j > i, "docs/architecture.md has no %q ... %q section", begin, end)
	want := state.TransitionDiagram()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644))
		return
	}
	require.Equal(t, want, s[i+len(begin):j], "docs/architecture.md's diagram differs from state.Transitions: run go test ./internal/state -run TestTransitionDiagram -update")
}
