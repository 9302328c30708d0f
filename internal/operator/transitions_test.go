package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TestEveryOperatorTransitionOfTheTable runs `rollback` and `retry` (as the row's Why names them) from every
// position the transition table lets the operator leave (state.Transitions, By operator) and requires each row
// to be the one the write matched: a row nobody exercises, or an operator write the table does not declare,
// fails here. A row of an older agent's step is run on a record of that agent's (strategy surge).
func TestEveryOperatorTransitionOfTheTable(t *testing.T) {
	var seen []state.Transition
	restore := state.SetTransitionRecorder(func(tr state.Transition) { seen = append(seen, tr) })
	defer restore()
	for _, row := range state.Transitions {
		if row.By != state.WriterOperator {
			continue
		}
		var commands []string
		for _, c := range []string{"rollback", "retry"} {
			if strings.Contains(row.Why, c) {
				commands = append(commands, c)
			}
		}
		require.NotEmpty(t, commands, "row %s -> %s (%s) names no command", row.From, row.To, row.Why)
		for _, command := range commands {
			t.Run(row.From.String()+"->"+row.To.String()+" "+command, func(t *testing.T) {
				have := completedOnB()
				if row.To.Step == state.StepNodegroupUpdate {
					have = completedNodegroup()
				}
				byRefresh := row.To.Step == state.StepInstanceRefresh || row.From.Step == state.StepInstanceRefresh
				if byRefresh {
					have.Strategy = "refresh"
					have.Refresh = &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", ID: "ir-1", Status: "InProgress"}
				}
				have.Phase = row.From.Phase
				if row.From.Step != "" {
					have.Current = &state.Replacement{Step: row.From.Step, OldInstanceID: "i-4"}
				}
				seen = nil
				var r state.Rollout
				var err error
				if command == "retry" {
					if byRefresh {
						have.Refresh.Status = "Cancelled"
					} else {
						have.Strategy = "surge" // a rollout an older agent left mid-replacement
					}
					r, _, err = operator.Retry(context.Background(), seed(t, []state.Rollout{have}), have.Group, "alice", now)
				} else {
					r, err = operator.Rollback(context.Background(), seed(t, []state.Rollout{have}, completedOldToA), have.Group, "", "alice", false, now)
				}
				require.NoError(t, err)
				require.Equal(t, row.To, state.PositionOf(r))
				require.Equal(t, []state.Transition{row}, seen, "the write matched exactly this row")
			})
		}
	}
}

// TestRollbackInTheMiddleOfAnInstanceRefresh: `patch-agent rollback` takes over a refresh in progress (no "let it
// finish first"): the record asks the agent for RollbackInstanceRefresh, by the operator, to the previous
// launch template version; --to is refused there.
func TestRollbackInTheMiddleOfAnInstanceRefresh(t *testing.T) {
	have := completedOnB()
	have.Phase, have.Strategy = state.PhaseReplacing, "refresh"
	have.Current = &state.Replacement{Step: state.StepInstanceRefresh}
	have.Refresh = &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", ID: "ir-1", Status: "InProgress",
		Cancel: "maintenance window closed"}
	store := seed(t, []state.Rollout{have})
	_, err := operator.Rollback(context.Background(), store, have.Group, "ami-0123456789abcdef0", "alice", false, now)
	require.ErrorContains(t, err, "drop --to")
	plan, err := operator.PlanRollback(context.Background(), store, have.Group, "", false)
	require.NoError(t, err)
	require.Equal(t, &operator.RefreshRollbackPlan{ID: "ir-1", Status: "InProgress", PreviousVersion: "2"}, plan.Refresh)
	r, err := operator.Rollback(context.Background(), store, have.Group, plan.To, "alice", false, now) // as the CLI confirms it
	require.NoError(t, err)
	require.Equal(t, state.PhaseRollingBack, r.Phase)
	require.True(t, r.Refresh.Rollback)
	require.True(t, r.Refresh.ByAPI)
	require.Equal(t, "alice", r.Refresh.RequestedBy)
	require.Empty(t, r.Refresh.Cancel, "the rollback replaces the cancel")
}
