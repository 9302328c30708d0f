package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

func TestRearmForRetry(t *testing.T) {
	const good, failed, manual = "ami-0a1a2a3a4a5a6a7a8", "ami-0b1b2b3b4b5b6b7b8", "ami-0c1c2c3c4c5c6c7c8"
	for _, tc := range []struct {
		name   string
		in     state.Rollout
		again  string
		want   state.Rollout // the record after a retry (when again is set)
		refuse string        // the error's words (when again is empty)
	}{
		{name: "an automatic rollback forgets its failed target; the group's AMI stays the previous",
			in:    state.Rollout{Group: "g", Phase: state.PhaseRolledBack, TargetImageID: failed, PreviousImageID: good},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseRolledBack, PreviousImageID: good}},
		{name: "a rollback by instance refresh keeps the failed AMI as target and rolled-back-from: both forgotten",
			in:    state.Rollout{Group: "g", Phase: state.PhaseRolledBack, TargetImageID: failed, PreviousImageID: good, RollbackFrom: failed, Strategy: "refresh"},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseRolledBack, PreviousImageID: good, Strategy: "refresh"}},
		{name: "a manual rollback, completed, forgets the AMI it rolled back from",
			in:    state.Rollout{Group: "g", Phase: state.PhaseCompleted, TargetImageID: manual, PreviousImageID: failed, RollbackFrom: failed},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseCompleted, TargetImageID: manual, PreviousImageID: failed}},
		{name: "a managed node group's rolled-back release is forgotten",
			in: state.Rollout{Group: "ng", Phase: state.PhaseRolledBack, TargetImageID: failed, RollbackFrom: "1.31.7-20261201",
				Nodegroup: &state.NodegroupProgress{AMIType: "AL2023_ARM_64_STANDARD", TargetRelease: "1.31.7-20261201", PreviousRelease: "1.31.7-20261101"}},
			again: "1.31.7-20261201",
			want: state.Rollout{Group: "ng", Phase: state.PhaseRolledBack, TargetImageID: failed,
				Nodegroup: &state.NodegroupProgress{AMIType: "AL2023_ARM_64_STANDARD", PreviousRelease: "1.31.7-20261101"}}},
		{name: "a CUSTOM managed node group's rolled-back AMI is forgotten",
			in: state.Rollout{Group: "ng", Phase: state.PhaseRolledBack, TargetImageID: failed, RollbackFrom: failed,
				Nodegroup: &state.NodegroupProgress{AMIType: "CUSTOM"}},
			again: failed, want: state.Rollout{Group: "ng", Phase: state.PhaseRolledBack, Nodegroup: &state.NodegroupProgress{AMIType: "CUSTOM"}}},
		{name: "completed with nothing rolled back", in: state.Rollout{Group: "g", Phase: state.PhaseCompleted, TargetImageID: failed},
			refuse: "nothing to retry"},
		{name: "halted: roll back first", in: state.Rollout{Group: "g", Phase: state.PhaseHalted, Reason: "failed: replacement not healthy"},
			refuse: "roll it back first (`patch-agent rollback g`)"},
		{name: "a halted rollout by instance refresh starts over with the same target",
			in: state.Rollout{Group: "g", Phase: state.PhaseHalted, Reason: "failed: instance refresh r-1 cancelled by someone else", TargetImageID: failed,
				PreviousImageID: good, Refresh: &state.RefreshProgress{ID: "r-1", Version: "2", PreviousVersion: "1", Status: "Cancelled"},
				Current: &state.Replacement{Step: state.StepInstanceRefresh}},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseDetected, Reason: "failed: instance refresh r-1 cancelled by someone else",
				TargetImageID: failed, PreviousImageID: good, Refresh: &state.RefreshProgress{ID: "r-1", Version: "2", PreviousVersion: "1", Status: "Cancelled"}}},
		{name: "an older agent's rollout halted mid-replacement starts over by instance refresh with the same target",
			in: state.Rollout{Group: "g", Phase: state.PhaseHalted, Reason: "failed: an older patch-agent left this rollout mid-replacement", TargetImageID: failed,
				PreviousImageID: good, Strategy: "surge", Current: &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4"}, Replaced: []string{"i-1"}},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseDetected, Reason: "failed: an older patch-agent left this rollout mid-replacement",
				TargetImageID: failed, PreviousImageID: good, Replaced: []string{"i-1"}}},
		{name: "an older agent's rollout halted between two replacements (drain-first)",
			in:    state.Rollout{Group: "g", Phase: state.PhaseHalted, TargetImageID: failed, PreviousImageID: good, Strategy: "drain-first"},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseDetected, TargetImageID: failed, PreviousImageID: good}},
		{name: "an older agent's rollout with no strategy recorded, halted at its step",
			in: state.Rollout{Group: "g", Phase: state.PhaseHalted, TargetImageID: failed, PreviousImageID: good,
				Current: &state.Replacement{Step: state.StepSurge, OldInstanceID: "i-4"}},
			again: failed, want: state.Rollout{Group: "g", Phase: state.PhaseDetected, TargetImageID: failed, PreviousImageID: good}},
		{name: "an older agent's rollout that is still active: it halts first", in: state.Rollout{Group: "g", Phase: state.PhaseReplacing, Strategy: "surge",
			TargetImageID: failed, Current: &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4"}}, refuse: "rolled-back or halted rollout only"},
		{name: "an active rollout", in: state.Rollout{Group: "g", Phase: state.PhaseReplacing}, refuse: "rolled-back or halted rollout only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.in.Clone()
			again, err := operator.RearmForRetry(&r)
			if tc.refuse != "" {
				require.ErrorContains(t, err, tc.refuse)
				require.Equal(t, tc.in, r, "a refusal changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.again, again)
			require.Equal(t, tc.want, r)
			require.Equal(t, tc.in.Phase == state.PhaseRolledBack, operator.Rearmed(r), "a re-armed rolled-back record is told apart")
			require.False(t, operator.Rearmed(tc.in))
		})
	}
}

// `patch-agent retry` of a rollout an older agent left mid-replacement (halted by this agent at its Draining
// step, strategy surge): the record goes back to Detected with the same target, no strategy and no replacement
// in flight, so the agent starts it again through every gate and rolls it by instance refresh; history says
// who retried it. The write is the table's row Halted/Draining -> Detected by the operator.
func TestRetryRearmsAnOlderAgentsHaltedRolloutToRollByRefresh(t *testing.T) {
	ctx := context.Background()
	halted := completedOnB()
	halted.Phase, halted.TargetImageID, halted.PreviousImageID, halted.Strategy = state.PhaseHalted, amiC, amiB, "surge"
	halted.Reason = "failed: an older patch-agent left this rollout mid-replacement (step Draining, replacing i-4) by its surge strategy"
	halted.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4", StepStartedAt: now.Add(-time.Hour)}
	require.True(t, halted.ByOlderEngine())
	m := seed(t, []state.Rollout{halted})
	var seen []state.Transition
	restore := state.SetTransitionRecorder(func(tr state.Transition) { seen = append(seen, tr) })
	r, again, err := operator.Retry(ctx, m, "prod", "alice", now)
	restore()
	require.NoError(t, err)
	require.Equal(t, amiC, again)
	require.Equal(t, state.PhaseDetected, r.Phase)
	require.Empty(t, r.Strategy, "the agent chooses the strategy again: instance refresh")
	require.Nil(t, r.Current, "no replacement in flight")
	require.Equal(t, amiC, r.TargetImageID, "the same target")
	require.Equal(t, amiB, r.PreviousImageID)
	require.False(t, r.ByOlderEngine())
	require.Contains(t, r.Reason, "retry of "+amiC+" requested by alice")
	require.Len(t, seen, 1)
	require.Equal(t, state.Transition{From: state.Position{Phase: state.PhaseHalted, Step: state.StepDraining},
		To: state.Position{Phase: state.PhaseDetected}, By: state.WriterOperator, Why: seen[0].Why}, seen[0])
	stored, err := m.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, r, stored)
	hist, err := m.History(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.HistoryEntry{Group: "prod", At: now, Event: operator.HistoryRetried, NewImage: amiC, Detail: "alice"}, hist[len(hist)-1])
}

// The rollback plan names the replacement in flight only for an older agent's record, whose extra instance
// desired capacity may still hold; a rollout by instance refresh halted at its refresh has none.
func TestPlanRollbackNamesTheHaltedReplacementOfAnOlderAgentOnly(t *testing.T) {
	ctx := context.Background()
	older := completedOnB()
	older.Phase, older.TargetImageID, older.PreviousImageID, older.Strategy = state.PhaseHalted, amiC, amiB, "drain-first"
	older.Current = &state.Replacement{Step: state.StepTerminating, OldInstanceID: "i-4"}
	p, err := operator.PlanRollback(ctx, seed(t, []state.Rollout{older}), "prod", "", false)
	require.NoError(t, err)
	require.Equal(t, &state.Replacement{Step: state.StepTerminating, OldInstanceID: "i-4"}, p.Halted)

	byRefresh := older
	byRefresh.Strategy, byRefresh.Current = "refresh", &state.Replacement{Step: state.StepInstanceRefresh}
	byRefresh.Refresh = &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", ID: "ir-1", Status: "Cancelled"}
	p, err = operator.PlanRollback(ctx, seed(t, []state.Rollout{byRefresh}), "prod", "", false)
	require.NoError(t, err)
	require.Nil(t, p.Halted)
}
