package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// completedNodegroup is managed node group prod/workers rolled from release 1.31.7-20250101 to 1.31.7-20250610.
func completedNodegroup() state.Rollout {
	return state.Rollout{Group: "nodegroup/prod/workers", Platform: "eks-managed", Cluster: "prod", Phase: state.PhaseCompleted,
		TargetImageID: amiB, PreviousImageID: amiA, Source: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/release_version",
		SourceVersion: 3, DetectedAt: now.Add(-2 * time.Hour), Instances: 3, OnTarget: 3, Steps: 5, UpdatedAt: now.Add(-time.Hour),
		Nodegroup: &state.NodegroupProgress{Cluster: "prod", Name: "workers", AMIType: "AL2023_x86_64_STANDARD", KubernetesVersion: "1.31",
			TargetRelease: "1.31.7-20250610", PreviousRelease: "1.31.7-20250101", UpdateToken: "patch-agent-forward", UpdateID: "u-1",
			UpdateStatus: "Successful", MaxUnavailable: 2}}
}

// TestManagedNodegroupRollbackRecordsATokenAndRefusesWhatItCannotDo: the operator's rollback of a managed node
// group moves it to RollingBack/NodegroupUpdate with a new ClientRequestToken (the agent sends the update) and
// refuses, writing nothing, what would be wrong: an AMI id or --force, a position other than Completed and
// Halted/NodegroupUpdate, an EKS update still InProgress, no previous version recorded.
func TestManagedNodegroupRollbackRecordsATokenAndRefusesWhatItCannotDo(t *testing.T) {
	halted := completedNodegroup()
	halted.Phase, halted.Current = state.PhaseHalted, &state.Replacement{Step: state.StepNodegroupUpdate}
	halted.Nodegroup.UpdateStatus, halted.Nodegroup.UpdateErrors = "Failed", []string{"PodEvictionFailure: x"}
	inProgress := halted.Clone()
	inProgress.Nodegroup.UpdateStatus = "InProgress"
	replacing := completedNodegroup()
	replacing.Phase, replacing.Current = state.PhaseReplacing, &state.Replacement{Step: state.StepNodegroupUpdate}
	noPrevious := completedNodegroup()
	noPrevious.Nodegroup.PreviousRelease = ""
	custom := completedNodegroup()
	custom.Nodegroup.AMIType, custom.Nodegroup.TargetRelease, custom.Nodegroup.PreviousRelease = "CUSTOM", "", ""
	custom.Nodegroup.LaunchTemplateID, custom.Nodegroup.PreviousTemplateVersion, custom.Nodegroup.TargetTemplateVersion = "lt-1", "1", "2"
	for _, tc := range []struct {
		name      string
		have      state.Rollout
		to        string
		force     bool
		wantErr   string
		wantTo    string
		wantToken bool
	}{
		{name: "from Completed, to the previous release", have: completedNodegroup(), wantTo: "release 1.31.7-20250101"},
		{name: "from Halted/NodegroupUpdate after a failed update", have: halted, wantTo: "release 1.31.7-20250101"},
		{name: "custom: to the previous launch template version", have: custom, wantTo: "launch template lt-1 version 1"},
		{name: "an AMI id does not apply", have: completedNodegroup(), to: amiA, wantErr: "not to an AMI"},
		{name: "force does not apply", have: completedNodegroup(), force: true, wantErr: "drop --to and --force"},
		{name: "an update in progress is refused", have: replacing, wantErr: "from Completed or Halted/NodegroupUpdate only"},
		{name: "an EKS update still InProgress is refused", have: inProgress, wantErr: "still InProgress"},
		{name: "no previous release recorded", have: noPrevious, wantErr: "no previous release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := seed(t, []state.Rollout{tc.have})
			r, err := operator.Rollback(context.Background(), s, tc.have.Group, tc.to, "alice", tc.force, now)
			stored, gerr := s.GetRollout(context.Background(), tc.have.Group)
			require.NoError(t, gerr)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Equal(t, tc.have.Phase, stored.Phase, "nothing written")
				require.Equal(t, tc.have.Nodegroup.UpdateToken, stored.Nodegroup.UpdateToken)
				return
			}
			require.NoError(t, err)
			require.Equal(t, state.Position{Phase: state.PhaseRollingBack, Step: state.StepNodegroupUpdate}, state.PositionOf(stored))
			require.True(t, stored.Nodegroup.Rollback)
			require.Equal(t, "alice", stored.Nodegroup.RequestedBy)
			require.NotEmpty(t, stored.Nodegroup.UpdateToken)
			require.NotEqual(t, tc.have.Nodegroup.UpdateToken, stored.Nodegroup.UpdateToken, "a new token: never the update EKS already ran")
			require.Empty(t, stored.Nodegroup.UpdateID, "the agent sends the update and records its id")
			require.Empty(t, stored.Nodegroup.UpdateErrors)
			require.Equal(t, tc.have.TargetImageID, stored.TargetImageID, "the target stays: the agent records RollbackFrom when the rollback succeeds")
			require.Equal(t, r.Nodegroup.UpdateToken, stored.Nodegroup.UpdateToken)
			hist, err := s.History(context.Background(), tc.have.Group)
			require.NoError(t, err)
			require.Len(t, hist, 1)
			require.Equal(t, operator.HistoryManualRollback, hist[0].Event)
			require.Equal(t, tc.wantTo, hist[0].NewImage)
		})
	}
}

func TestManagedNodegroupRollbackCountsTheNodesOnTheAMIStatusShows(t *testing.T) {
	ctx := context.Background()
	s := seed(t, []state.Rollout{completedNodegroup()})
	_, err := operator.Rollback(ctx, s, "nodegroup/prod/workers", "", "alice", false, now)
	require.NoError(t, err)
	rows, err := operator.Status(ctx, s, "nodegroup/prod/workers", now)
	require.NoError(t, err)
	require.Equal(t, amiA, rows[0].TargetImageID, "status shows the AMI the rollback goes to")
	require.Equal(t, 0, rows[0].OnTarget, "the three nodes still run B")
	require.Equal(t, 3, rows[0].Other)
}
