package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TestManagedNodegroupOperatorRollbackSendsOneUpdateBackWithTheRecordedToken: `patch-agent rollback` of a managed
// node group (operator.Rollback) from Completed or Halted/NodegroupUpdate records a new ClientRequestToken and
// RollingBack/NodegroupUpdate; the agent then sends exactly one UpdateNodegroupVersion, with that token, to the
// previous release (or launch template version), ends RolledBack with the nodes back on the previous AMI and
// never rolls the release it left again on its own. EKS drains; the agent touches nothing of the group.
func TestManagedNodegroupOperatorRollbackSendsOneUpdateBackWithTheRecordedToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		custom bool
		failed bool // the forward update fails and the rollout halts (no automatic rollback)
		param  string
		back   string
	}{
		{"release, from Completed", false, false, "ReleaseVersion", releaseOld},
		{"custom launch template, from Completed", true, false, "LaunchTemplateVersion", "1"},
		{"release, from Halted/NodegroupUpdate after a failed update", false, true, "ReleaseVersion", releaseOld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newNGWorld(t, tc.custom, nil)
			w.o.Policy.RollbackOnFailure = false
			w.runUntil(state.PhaseIdle)
			if tc.failed {
				w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: "prod", Nodegroup: "workers", PodEviction: true})
			}
			if tc.custom {
				w.a.PutParameter(ngCustomPath, ngAMI2)
			} else {
				w.a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2}))
			}
			want := state.PhaseCompleted
			if tc.failed {
				want = state.PhaseHalted
			}
			before := w.runUntil(want)
			forward := before.Nodegroup.TargetRelease
			if tc.custom {
				forward = ngAMI2
			}
			require.Len(t, w.nodegroupUpdates(), 1)

			key := model.NodegroupKey("prod", "workers")
			plan, err := operator.PlanRollback(context.Background(), w.store, key, "", false)
			require.NoError(t, err)
			require.NotNil(t, plan.Nodegroup, "the plan names the node group, whose nodes EKS replaces")
			r, err := operator.Rollback(context.Background(), w.store, key, "", "alice", false, w.clk.Now())
			require.NoError(t, err)
			require.Equal(t, state.Position{Phase: state.PhaseRollingBack, Step: state.StepNodegroupUpdate}, state.PositionOf(r))
			token := r.Nodegroup.UpdateToken
			require.NotEqual(t, before.Nodegroup.UpdateToken, token, "a token of its own: never the update EKS already ran")
			require.Empty(t, r.Nodegroup.UpdateID, "recorded before the call; the agent sends it")
			require.Len(t, w.nodegroupUpdates(), 1, "the operator's command calls no AWS API")

			r = w.runUntil(state.PhaseRolledBack)
			ups := w.nodegroupUpdates()
			require.Len(t, ups, 2, "exactly one UpdateNodegroupVersion for the rollback")
			require.Equal(t, tc.back, ups[1].Params[tc.param], "back to the previous version")
			require.Equal(t, token, ups[1].Token, "sent with the token the operator recorded")
			require.Contains(t, r.Reason, "manual rollback by alice")
			require.Equal(t, forward, r.RollbackFrom, "the version rolled away from is not rolled again")
			require.Equal(t, []string{ngAMI1, ngAMI1, ngAMI1}, w.nodes(), "EKS put every node back on the previous AMI")
			for range 5 {
				r, err := w.tick()
				require.NoError(t, err)
				require.Equal(t, state.PhaseRolledBack, r.Phase, "it stays rolled back while the source names the version it left")
			}
			require.Len(t, w.nodegroupUpdates(), 2)
			rows, err := operator.Status(context.Background(), w.store, key, w.clk.Now())
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Equal(t, ngAMI1, rows[0].TargetImageID, "status shows the AMI the rollback went to, not the one it left")
			require.Equal(t, 3, rows[0].OnTarget, "ON TARGET counts the nodes on that AMI")
			require.Contains(t, w.history(), operator.HistoryManualRollback)
			require.Contains(t, w.history(), "rolled-back")
			w.requireGroupUntouched()
		})
	}
}
