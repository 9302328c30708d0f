package operator_test

import (
	"testing"

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
		{name: "a rolled-back record that still gives its surge back waits",
			in:     state.Rollout{Group: "g", Phase: state.PhaseRolledBack, TargetImageID: failed, PreviousImageID: good, HaltedSurgeTo: 4},
			refuse: "still giving back"},
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
