package eksupgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Managed node groups: the step goes through the agent's managed-node-group rollout, never around it.

// An AMI the rollout's AMI gate refuses (the Kubernetes 1.31 release's image is deregistered): nothing updates
// the node group, the step is not Completed (it waits, or halts, with the gate's reason), and `--status`
// (table and JSON) shows the rollout's progress and that reason. The step never calls UpdateNodegroupVersion
// directly.
func TestManagedNodegroupStepGoesThroughTheNodegroupRolloutsGates(t *testing.T) {
	w := newWorld(t)
	w.a.SetImageState(demo.UpgradeImage, ec2types.ImageStateDeregistered)
	r := w.runner("run-1")
	r.MaxWait = 30 * time.Minute
	_, runErr := r.Run(context.Background(), upgrade())
	wf, err := w.store.GetWorkflow(context.Background(), cluster)
	require.NoError(t, err)

	require.Equal(t, 0, w.updateCalls()["UpdateNodegroupVersion"], "nothing updated the node group")
	ng, ok := w.a.EKSNodegroup(cluster, demo.UpgradeNodegroup)
	require.True(t, ok)
	require.Equal(t, "1.30", ng.Version)
	require.Equal(t, demo.UpgradeReleaseFrom, ng.ReleaseVersion)
	st := stepOf(t, wf, eksupgrade.KindManagedNodegroup, demo.UpgradeNodegroup)
	require.NotEqual(t, state.StepStatusCompleted, st.Status)
	require.NotEqual(t, state.WorkflowCompleted, wf.Phase)
	ro, err := w.store.GetRollout(context.Background(), model.NodegroupKey(cluster, demo.UpgradeNodegroup))
	require.NoError(t, err)
	const refused = "AMI refused: " + demo.UpgradeImage + " is deregistered"
	require.Contains(t, ro.Reason, refused, "the agent's rollout was stopped by its AMI gate")
	if wf.Phase == state.WorkflowHalted {
		require.Contains(t, wf.Reason, refused)
	} else {
		require.ErrorContains(t, runErr, "not done after")
		require.Equal(t, state.StepStatusInProgress, st.Status)
		require.NotNil(t, st.Nodes)
		require.Contains(t, st.Nodes.Reason, refused, "the step shows why the rollout waits")
	}

	var out bytes.Buffer
	eksupgrade.Render(&out, eksupgrade.NewSummary(wf, w.a.Clock().Now()), false)
	require.Regexp(t, `managed-nodegroup\s+web\s+1\.30\s+1\.31\s+(InProgress|Failed)\s+.*AMI refused`, out.String())
	doc, err := json.Marshal(eksupgrade.NewSummary(wf, w.a.Clock().Now()))
	require.NoError(t, err)
	require.Contains(t, string(doc), `"reason":"`)
	require.Contains(t, string(doc), refused)
}

// A failed EKS update of the agent's rollout (PodEvictionFailure) halts the step with the rollout's reason;
// the workflow is not Completed and the node group is not on 1.31.
func TestManagedNodegroupStepHaltsWithTheHaltedRolloutsReason(t *testing.T) {
	w := newWorld(t)
	w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: cluster, Nodegroup: demo.UpgradeNodegroup, PodEviction: true})
	r := w.runner("run-1")
	r.MaxWait = 2 * time.Hour
	wf, err := r.Run(context.Background(), upgrade())
	require.NoError(t, err)
	require.Equal(t, state.WorkflowHalted, wf.Phase, wf.Reason)
	require.Contains(t, wf.Reason, "failed: managed-nodegroup web: the agent's rollout of nodegroup/demo-eks/web is")
	require.Contains(t, wf.Reason, "PodEvictionFailure")
	require.Equal(t, state.StepStatusFailed, stepOf(t, wf, eksupgrade.KindManagedNodegroup, demo.UpgradeNodegroup).Status)
	require.Equal(t, state.StepStatusPending, stepOf(t, wf, eksupgrade.KindSelfManagedNodegroup, testworld.EKSGroupName).Status, "nothing after it")
	ng, _ := w.a.EKSNodegroup(cluster, demo.UpgradeNodegroup)
	require.Equal(t, "1.30", ng.Version)
}

// After the PodEvictionFailure is fixed, --retry moves the halted step on: the agent's rolled-back rollout is
// re-armed (a "retried" entry in its history), the agent rolls the node group again, and the workflow completes.
func TestRetryAfterAPodEvictionFailureRollsTheNodegroupAgainAndCompletes(t *testing.T) {
	w := newWorld(t)
	w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: cluster, Nodegroup: demo.UpgradeNodegroup, PodEviction: true})
	r := w.runner("run-1")
	r.MaxWait = 2 * time.Hour
	wf, err := r.Run(context.Background(), upgrade())
	require.NoError(t, err)
	require.Equal(t, state.WorkflowHalted, wf.Phase, wf.Reason)
	require.Contains(t, wf.Reason, "then run again with --retry, which rolls it again", "the halt says how to move on")

	req := upgrade()
	req.Retry = true
	r = w.runner("run-2")
	r.MaxWait = 2 * time.Hour
	wf, err = r.Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	ng, _ := w.a.EKSNodegroup(cluster, demo.UpgradeNodegroup)
	require.Equal(t, "1.31", ng.Version)
	key := model.NodegroupKey(cluster, demo.UpgradeNodegroup)
	hist, err := w.store.History(context.Background(), key)
	require.NoError(t, err)
	require.Contains(t, events(hist), operator.HistoryRetried)
}

// A managed node group the agent does not manage (no opt-in tag) is not updated by the workflow: its step is
// ActionRequired, naming the tag, and no UpdateNodegroupVersion is sent.
func TestManagedNodegroupStepOfANodegroupNotOptedInIsActionRequired(t *testing.T) {
	w := newWorld(t)
	r := aloneRunner(w, "run-1") // no agent: every node group call is the workflow's
	r.MaxWait = 20 * time.Minute
	_, err := r.Run(context.Background(), upgrade())
	require.ErrorContains(t, err, "self-managed node group "+testworld.EKSGroupName, "the workflow went on to the next step")
	wf, err := w.store.GetWorkflow(context.Background(), cluster)
	require.NoError(t, err)
	st := stepOf(t, wf, eksupgrade.KindManagedNodegroup, demo.UpgradeNodegroup)
	require.Equal(t, state.StepStatusActionRequired, st.Status)
	require.Contains(t, st.Action, model.TagEnabled+"=true")
	require.Contains(t, eksupgrade.Actions(wf)[0], "managed-nodegroup web: ")
	require.Contains(t, events(w.history(t)), "managed-nodegroup-action-required")
	require.Equal(t, 0, w.updateCalls()["UpdateNodegroupVersion"], "the workflow never updates a node group itself")
}

// The step is Completed only once DescribeNodegroup shows the node group ACTIVE on the target version and the
// release the agent's rollout targets, and the rollout's record is Completed on a release of that version.
func TestManagedNodegroupStepCompletesOnlyWhenTheNodegroupIsOnTheTargetVersion(t *testing.T) {
	w := newWorld(t)
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	st := stepOf(t, wf, eksupgrade.KindManagedNodegroup, demo.UpgradeNodegroup)
	require.Equal(t, state.StepStatusCompleted, st.Status)
	ng, _ := w.a.EKSNodegroup(cluster, demo.UpgradeNodegroup)
	require.Equal(t, "1.31", ng.Version)
	require.Equal(t, demo.UpgradeReleaseTo, ng.ReleaseVersion)
	ro, err := w.store.GetRollout(context.Background(), model.NodegroupKey(cluster, demo.UpgradeNodegroup))
	require.NoError(t, err)
	require.Equal(t, state.PhaseCompleted, ro.Phase)
	require.Equal(t, demo.UpgradeReleaseTo, ro.Nodegroup.TargetRelease)
	var u *sim.EKSUpdateView
	for _, x := range w.a.EKSUpdates(cluster) {
		if x.Nodegroup == demo.UpgradeNodegroup {
			u = &x
		}
	}
	require.NotNil(t, u)
	require.Equal(t, ekstypes.UpdateStatusSuccessful, u.Status)
	require.Equal(t, "1.31", u.Params["Version"], "the rollout sent the target version with the release")
}
