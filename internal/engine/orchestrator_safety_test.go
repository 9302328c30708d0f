package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Orchestrator unit tests of the safety rules that hold a rollout at its position (no row of the table is
// taken): the pause, another replica's lease, and the rollback that leaves an autoscaler's desired capacity
// alone (C21).

// reconcileOnce runs one Reconcile and returns the stored record and the rows written.
func reconcileOnce(t *testing.T, rg *rig, in model.Inputs) (state.Rollout, []state.Transition) {
	t.Helper()
	var seen []state.Transition
	restore := state.SetTransitionRecorder(func(tr state.Transition) { seen = append(seen, tr) })
	defer restore()
	_, err := rg.o.Reconcile(context.Background(), rg.target, in)
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
	require.NoError(t, err)
	return stored, seen
}

func TestOrchestratorPauseHoldsEveryDestructiveStep(t *testing.T) {
	pause := &state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0.Add(-time.Minute)}
	for _, tc := range []struct {
		name string
		rec  state.Rollout
		view model.GroupView
		next string
	}{
		{"Detected: no launch template prepared", state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld},
			oldFleet(), "prepare the launch template"},
		{"Preparing: no launch template version", state.Rollout{Phase: state.PhasePreparing, Strategy: model.StrategyRefresh, TargetImageID: amiNew,
			PreviousImageID: amiOld, PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}}, oldFleet(), "prepare the launch template"},
		{"Replacing/InstanceRefresh: no StartInstanceRefresh", refreshing(""), oldFleet(), "StartInstanceRefresh"},
		{"Verifying: no new instance refresh", func() state.Rollout {
			r := refreshing("ir-1")
			r.Phase, r.Current = state.PhaseVerifying, nil
			return r
		}(), view(2, false, serving("i-8", amiNew), serving("i-2", amiOld)), "a new instance refresh for i-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig()
			rg.seed0(tc.rec)
			stored, seen := reconcileOnce(t, rg, model.Inputs{View: tc.view, AMI: newAMI(), Pause: pause})
			require.Empty(t, seen, "no transition while paused")
			require.Empty(t, rg.groups.calls, "no Auto Scaling change while paused")
			require.Empty(t, rg.o.AutoScaling.(*fakeRefreshes).starts, "no instance refresh while paused")
			require.Empty(t, rg.platform.started, "no drain while paused")
			require.Empty(t, rg.templates.pointed)
			require.Equal(t, tc.rec.Phase, stored.Phase)
			require.Contains(t, stored.Reason, "paused (group prod) by alice")
			require.Contains(t, stored.Reason, "next step: "+tc.next)
		})
	}
}

func TestOrchestratorLeavesATargetWhoseLeaseAnotherReplicaHolds(t *testing.T) {
	rg := newRig()
	// The intent of a refresh written, StartInstanceRefresh not sent yet; the lease expired, but within the skew
	// margin (30 s).
	rec := refreshing("")
	rec.LeaseOwner, rec.LeaseExpires = "other", now0.Add(-time.Second)
	rg.seed0(rec)
	stored, seen := reconcileOnce(t, rg, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.Empty(t, seen)
	require.Empty(t, rg.o.AutoScaling.(*fakeRefreshes).starts, "no instance refresh on another replica's target")
	require.Empty(t, rg.groups.calls)
	require.Equal(t, "other", stored.LeaseOwner)
}

// C21: an autoscaler raised desired capacity from 3 to 5 during the rollout, then the refresh failed and the
// rollout rolls back. The rollback is a refresh back to the previous launch template version, MinHealthyPercentage
// 100 and MaxHealthyPercentage above it (Auto Scaling applies both to the desired capacity it has then: the
// autoscaler's 5): the agent writes neither desired capacity nor MaxSize, so desired capacity stays where the
// autoscaler set it and no instance leaves before its replacement serves.
func TestC21RollbackByRefreshKeepsTheAutoscalersDesiredCapacity(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusFailed, now0.Add(-time.Minute))}
	rg.seed0(refreshing("ir-1")) // started at desired 3
	v := view(5, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-3", amiNew), serving("i-4", amiOld), serving("i-5", amiOld))
	v.Max = 6
	stored, _ := reconcileOnce(t, rg, model.Inputs{View: v, AMI: newAMI()})
	require.Equal(t, state.PhaseRollingBack, stored.Phase, stored.Reason)
	require.Empty(t, groupWrites(rg), "no desired capacity, MaxSize or termination written")
	require.Len(t, f.starts, 1, "one refresh back")
	in := f.starts[0]
	require.Equal(t, "1", aws.ToString(in.DesiredConfiguration.LaunchTemplate.Version))
	require.Equal(t, int32(100), aws.ToInt32(in.Preferences.MinHealthyPercentage), "serving capacity never below desired")
	require.Greater(t, aws.ToInt32(in.Preferences.MaxHealthyPercentage), int32(100), "launched above desired capacity, never below it")
}
