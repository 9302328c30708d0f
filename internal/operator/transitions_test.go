package operator_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TestEveryOperatorTransitionOfTheTable runs `rollback` from every position the transition table lets the
// operator leave (state.Transitions, By operator) and requires each row to be the one the write matched: a row
// nobody exercises, or an operator write the table does not declare, fails here.
func TestEveryOperatorTransitionOfTheTable(t *testing.T) {
	var seen []state.Transition
	restore := state.SetTransitionRecorder(func(tr state.Transition) { seen = append(seen, tr) })
	defer restore()
	for _, row := range state.Transitions {
		if row.By != state.WriterOperator {
			continue
		}
		t.Run(row.From.String()+"->"+row.To.String(), func(t *testing.T) {
			have := completedOnB()
			if row.To.Step == state.StepNodegroupUpdate {
				have = completedNodegroup()
			}
			have.Phase = row.From.Phase
			if row.From.Step != "" {
				have.Current = &state.Replacement{Step: row.From.Step, OldInstanceID: "i-4", InstancesBefore: []string{"i-4"}}
			}
			seen = nil
			r, err := operator.Rollback(context.Background(), seed(t, []state.Rollout{have}), have.Group, "", "alice", false, now)
			require.NoError(t, err)
			require.Equal(t, row.To, state.PositionOf(r))
			require.Equal(t, []state.Transition{row}, seen, "the write matched exactly this row")
		})
	}
}
