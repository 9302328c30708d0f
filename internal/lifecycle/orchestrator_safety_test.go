package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Orchestrator unit tests of the safety rules that hold a rollout at its position (no row of the table is
// taken): the pause, another replica's lease, the serving baseline before a drain, and the rollback that gives
// back only the agent's own surge (C21).

// reconcileOnce runs one Reconcile and returns the stored record and the rows written.
func reconcileOnce(t *testing.T, rg *rig, in Inputs) (state.Rollout, []state.Transition) {
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
		view GroupView
		next string
	}{
		{"Detected: no launch template prepared", state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld},
			view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), "prepare the launch template"},
		{"Replacing: no pick", func() state.Rollout { r := replacing(StrategySurge, ""); r.Current = nil; return r }(),
			view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), "replace the next of 2 outdated instance(s)"},
		{"Surge: no surge", replacing(StrategySurge, state.StepSurge), view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), "surge for i-1"},
		{"Draining: no drain", func() state.Rollout {
			r := replacing(StrategySurge, state.StepDraining)
			r.Current.NewInstanceID = "i-9"
			return r
		}(),
			view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), "drain i-1"},
		{"Terminating: no termination", replacing(StrategySurge, state.StepTerminating),
			view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), "terminate i-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig()
			rg.seed0(tc.rec)
			stored, seen := reconcileOnce(t, rg, Inputs{View: tc.view, AMI: newAMI(), Pause: pause})
			require.Empty(t, seen, "no transition while paused")
			require.Empty(t, rg.groups.calls, "no Auto Scaling change while paused")
			require.Empty(t, rg.platform.started, "no drain while paused")
			require.Empty(t, rg.templates.pointed)
			require.Contains(t, stored.Reason, "paused (group prod) by alice")
			require.Contains(t, stored.Reason, "next step: "+tc.next)
		})
	}
}

func TestOrchestratorLeavesATargetWhoseLeaseAnotherReplicaHolds(t *testing.T) {
	rg := newRig()
	rec := replacing(StrategySurge, state.StepSurge)
	rec.LeaseOwner, rec.LeaseExpires = "other", now0.Add(-time.Second) // expired, but within the skew margin (30 s)
	rg.seed0(rec)
	stored, seen := reconcileOnce(t, rg, Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()})
	require.Empty(t, seen)
	require.Empty(t, rg.groups.calls, "no surge on another replica's target")
	require.Equal(t, "other", stored.LeaseOwner)
}

func TestOrchestratorDrainWaitsUntilTheInstancesThatStayServeDesiredCapacity(t *testing.T) {
	rg := newRig()
	rec := replacing(StrategySurge, state.StepDraining)
	rec.Current.NewInstanceID = "i-9"
	rg.seed0(rec)
	booting := serving("i-2", amiOld)
	booting.Node.Healthy = false // a health replacement of i-2 still booting
	stored, seen := reconcileOnce(t, rg, Inputs{View: view(3, false, serving("i-1", amiOld), booting, serving("i-9", amiNew)), AMI: newAMI()})
	require.Empty(t, seen)
	require.Empty(t, rg.platform.started, "draining i-1 would leave 1 serving instance for desired 2")
	require.Contains(t, stored.Reason, "waiting for 2 serving instance(s) besides i-1 before draining it (1 now)")
}

func TestC21RollbackGivesBackOnlyTheAgentsOwnSurge(t *testing.T) {
	for _, tc := range []struct {
		name      string
		desired   int32
		decrement bool
	}{
		{"desired still DesiredBefore+1: the removal takes the surge back", 3, true},
		{"an autoscaler raised desired since: removed without decrement", 5, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig()
			rec := replacing(StrategySurge, state.StepReplacementHealthy)
			rec.Phase = state.PhaseRollingBack
			rg.seed0(rec)
			unhealthy := serving("i-9", amiNew)
			unhealthy.Node.Healthy = false
			reconcileOnce(t, rg, Inputs{View: view(tc.desired, false, serving("i-1", amiOld), serving("i-2", amiOld), unhealthy), AMI: newAMI()})
			require.Equal(t, groupCall{Op: "Terminate", Target: "i-9", Decrease: tc.decrement}, rg.groups.calls[0])
		})
	}
}

// Every member of a batch records the group as the surge found it (desired capacity and the instances then),
// not only the first: a member without InstancesBefore would take the group's old instances for its
// replacements (a false "launched AMI A" halt, and a rollback that terminates an undrained old instance on the
// target AMI).
func TestOrchestratorBatchSurgeRecordsTheGroupForEveryMember(t *testing.T) {
	rg := newRig()
	rec := replacing(StrategySurge, state.StepSurge)
	rec.Current.InstancesBefore = nil
	rec.Batch = []state.Replacement{{Step: state.StepSurge, OldInstanceID: "i-2", DesiredBefore: 2, StepStartedAt: now0.Add(-time.Minute)}}
	rg.seed0(rec)
	// An autoscaler scaled out to 3 while the surge was held: the surge goes on top of it.
	stored, _ := reconcileOnce(t, rg, Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-3", amiOld)), AMI: newAMI()})
	require.Len(t, rg.groups.calls, 1, "one surge of the whole batch")
	require.Equal(t, int32(5), rg.groups.calls[0].N, "the batch's surge on top of the autoscaler's 3")
	require.Len(t, stored.Batch, 1)
	for _, m := range append([]state.Replacement{*stored.Current}, stored.Batch...) {
		require.Equal(t, int32(3), m.DesiredBefore, "member %s", m.OldInstanceID)
		require.Equal(t, []string{"i-1", "i-2", "i-3"}, m.InstancesBefore, "member %s", m.OldInstanceID)
	}
}

// TestOrchestratorDrainIsHeldByThePauseCheckOfItsOwnWrite: the drain's write-ahead ("drain starting") is the
// guarded write (state.Store.PutRolloutUnlessPaused), so a pause lock in the store holds the drain as a lock
// read before it did, with the same reason on status; no pause lock is read at all (Inputs.PauseRead is not
// called: the guard replaces the Query); a look that only waits writes nothing; a group lock whose Until has
// passed does not hold (invariant 7).
func TestOrchestratorDrainIsHeldByThePauseCheckOfItsOwnWrite(t *testing.T) {
	pause := state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0.Add(-time.Minute)}
	expired := pause
	expired.Until = now0.Add(-time.Second)
	global := pause
	global.Group = state.GlobalScope
	drainable := func() state.Rollout {
		r := replacing(StrategySurge, state.StepDraining)
		r.Current.NewInstanceID = "i-9"
		return r
	}
	ready := view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew))
	booting9 := serving("i-9", amiNew)
	booting9.Node.Healthy = false // the surge instance still booting: the rollout waits for it
	for _, tc := range []struct {
		name       string
		view       GroupView
		lock       *state.Lock
		waits      bool
		wantDrain  bool
		wantReason string
	}{
		{"a group pause in the store holds the drain", ready, &pause, false, false, "paused (group prod) by alice"},
		{"the global pause in the store holds the drain", ready, &global, false, false, "paused (global) by alice"},
		{"no pause: the drain starts", ready, nil, false, true, ""},
		{"a pause whose Until has passed does not hold", ready, &expired, false, true, ""},
		{"a look that only waits is not held", view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), booting9), &pause, true, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig()
			rec := drainable()
			if tc.waits {
				rec.Current.Step = state.StepReplacementHealthy
			}
			rg.seed0(rec)
			if tc.lock != nil {
				require.NoError(t, rg.store.PutLock(context.Background(), *tc.lock))
			}
			reads := 0
			read := func(context.Context) (*state.Lock, error) { reads++; return nil, errors.New("no lock read expected") }
			_, err := rg.o.Reconcile(context.Background(), rg.target, Inputs{View: tc.view, AMI: newAMI(), PauseRead: read})
			require.NoError(t, err)
			require.Zero(t, reads, "no pause lock read: the write checks the pause")
			if tc.wantDrain {
				require.Equal(t, []string{"i-1"}, rg.platform.started)
			} else {
				require.Empty(t, rg.platform.started, "no drain")
			}
			stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
			require.NoError(t, err)
			if tc.wantReason != "" {
				require.Contains(t, stored.Reason, tc.wantReason)
				require.Contains(t, stored.Reason, "next step: drain i-1")
				require.True(t, stored.Current.DrainStartedAt.IsZero(), "the drain's start is not recorded: it did not start")
			}
			if tc.waits {
				require.NotContains(t, stored.Reason, "paused", "a wait is not held")
			}
		})
	}
}
