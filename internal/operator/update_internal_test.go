package operator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// TestOperatorWriteNotInTheTransitionTableIsRefused: an operator change that would move a record in a way
// state.Transitions does not declare (Completed -> Replacing/Terminating) writes nothing and says why.
func TestOperatorWriteNotInTheTransitionTableIsRefused(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	before, err := m.PutRollout(ctx, state.Rollout{Group: "prod", Phase: state.PhaseCompleted, TargetImageID: "ami-0b1b2b3b4b5b6b7b8"})
	require.NoError(t, err)
	_, err = update(ctx, m, "prod", func(r *state.Rollout) (bool, error) {
		r.Phase, r.Current = state.PhaseReplacing, &state.Replacement{Step: state.StepTerminating, OldInstanceID: "i-1"}
		return true, nil
	}, func(state.Rollout) []state.HistoryEntry { return nil })
	require.ErrorIs(t, err, state.ErrTransition)
	after, err := m.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing written")
}
