package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// terminationsCalled lists the instances the rig's group fake was asked to terminate, in order.
func terminationsCalled(rg *rig) []string {
	var out []string
	for _, c := range rg.groups.calls {
		if c.Op == "Terminate" {
			out = append(out, c.Target)
		}
	}
	return out
}

// TestBatchMemberIsNeverTerminatedOnAnotherMembersPauseCheck: a surge batch of 2 with ECS managed draining,
// budget 1. i-2's slot went back during a pause; meanwhile Auto Scaling terminated i-1 itself (ECS drains it),
// so i-1 is Current again. After the resume i-1 claims the only slot in a guarded write, whose pause check
// belongs to i-1's effect only: i-2's termination checks and claims on its own, so ECS never drains i-2 on a
// termination without a slot beside i-1's drain.
func TestBatchMemberIsNeverTerminatedOnAnotherMembersPauseCheck(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rec := replacing(StrategySurge, state.StepDraining)
	rec.ECSManagedDraining = true
	rec.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-2", NewInstanceID: "i-8", DesiredBefore: 2,
		InstancesBefore: []string{"i-1", "i-2"}, StepStartedAt: now0.Add(-time.Minute), SurgeTo: 4}
	rec.Batch = []state.Replacement{{Step: state.StepDraining, OldInstanceID: "i-1", NewInstanceID: "i-9", DesiredBefore: 2,
		InstancesBefore: []string{"i-1", "i-2"}, StepStartedAt: now0.Add(-time.Minute), SurgeTo: 4}}
	rg.seed0(rec)
	v := view(4, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-8", amiNew), serving("i-9", amiNew))

	// Look 1: i-2 (Y) claims the slot and moves to Terminating; its termination call fails.
	rg.groups.err = context.DeadlineExceeded
	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.Error(t, err)
	rg.groups.err, rg.groups.calls = nil, nil
	require.Equal(t, []string{"prod/i-2"}, slotsHeld(t, rg.store))

	// Look 2: paused: Y gives its slot back (fix C); X's claim is held by the pause.
	require.NoError(t, rg.store.PutLock(ctx, state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0}))
	rg.clock.Step(time.Minute)
	_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Empty(t, slotsHeld(t, rg.store))

	// Look 3, still paused: Auto Scaling terminates i-1 (X) on its own (health check); ECS managed draining sets
	// it DRAINING.
	x := draining("i-1", amiOld)
	x.LifecycleState = "Terminating:Wait"
	v = view(4, false, x, serving("i-2", amiOld), serving("i-8", amiNew), serving("i-9", amiNew))
	rg.clock.Step(time.Minute)
	_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	t.Logf("paused: Current %s/%s, batch %s/%s, slots %v", stored.Current.OldInstanceID, stored.Current.Step, stored.Batch[0].OldInstanceID, stored.Batch[0].Step, slotsHeld(t, rg.store))

	// Look 4: the pause is lifted.
	require.NoError(t, rg.store.DeleteLock(ctx, "prod"))
	rg.clock.Step(time.Minute)
	_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	t.Logf("resume: err %v; terminated %v; slots %v", err, terminationsCalled(rg), slotsHeld(t, rg.store))
	for _, id := range terminationsCalled(rg) {
		require.Contains(t, slotsHeld(t, rg.store), "prod/"+id, "ECS drains %s on its termination without a slot, beside i-1's drain, budget 1", id)
	}
	require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
	require.Empty(t, terminationsCalled(rg), "i-2 waits for the slot i-1's drain holds")
}

// TestDrainHeldByAGateGivesBackASlotLeftByAnEarlierAttempt: an earlier attempt on i-1 recorded its start and
// slot, its drain call failed, and the replacement stopped serving (the start is cleared, the slot left
// listed). Back at Draining of i-1 the slot counts as live again; a firing alarm then holds the drain for two
// hours: the slot goes back, so the cluster's other groups do not wait behind a drain that is not under way.
func TestDrainHeldByAGateGivesBackASlotLeftByAnEarlierAttempt(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	alarms := &gateAlarms{}
	rg.target.Policy.Alarms, rg.o.Alarms = []string{"p99"}, alarms
	v := recordedDrainStart(t, rg, now0.Add(-time.Minute)) // start recorded, slot held, drain call failed

	gone := view(3, false, serving("i-1", amiOld), serving("i-2", amiOld))
	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: gone, AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	t.Logf("replacement gone: prod %s, drain start %v, slots %v", stepOf(stored), stored.Current.DrainStartedAt, slotsHeld(t, rg.store))

	alarms.firing = []string{"p99"}
	for range 8 { // two hours of 15 min looks: the replacement serves again, the alarm holds the drain
		rg.clock.Step(15 * time.Minute)
		v.ObservedAt = rg.clock.Now()
		_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
		require.NoError(t, err)
	}
	stored, err = rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	o2 := *rg.o
	o2.lastStored = state.Rollout{}
	_, _, reason, err := o2.planClusterBudget(ctx, Target{Group: "other", Platform: PlatformECS, Cluster: "c1"}, state.Rollout{Group: "other"}, InstanceView{ID: "i-7"})
	require.NoError(t, err)
	t.Logf("after 2 h held by the alarm: prod %s (%s), started %v, slots %v; other group's plan: %q", stepOf(stored), stored.Reason, rg.platform.started, slotsHeld(t, rg.store), reason)
	require.Empty(t, rg.platform.started)
	require.Empty(t, slotsHeld(t, rg.store), "a drain held by a gate and not under way holds no slot")
}

// TestBatchMemberIsNotDrainedOnAViewThatCountsADrainJustStartedAsServing: a surge batch of 2, budget 2; the
// agent crashed after i-1's drain write-ahead and replacement i-9 is no longer healthy. On the resume i-1's
// drain starts without a write (its start and slot are recorded); the batch's next member is not judged in the
// same call on the look's view, which still shows i-1 serving: i-2 is not drained with only i-8 serving against
// desired capacity 2 (invariant 1).
func TestBatchMemberIsNotDrainedOnAViewThatCountsADrainJustStartedAsServing(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rg.o.Policy.ClusterBudget = 2
	rec := replacing(StrategySurge, state.StepDraining)
	rec.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-1", NewInstanceID: "i-8", DesiredBefore: 2,
		InstancesBefore: []string{"i-1", "i-2"}, StepStartedAt: now0.Add(-time.Minute), SurgeTo: 4, DrainStartedAt: now0.Add(-time.Minute)}
	rec.Batch = []state.Replacement{{Step: state.StepDraining, OldInstanceID: "i-2", NewInstanceID: "i-9", DesiredBefore: 2,
		InstancesBefore: []string{"i-1", "i-2"}, StepStartedAt: now0.Add(-time.Minute), SurgeTo: 4}}
	rg.seed0(rec)
	_, err := rg.store.PutClusterBudget(ctx, state.ClusterBudget{Cluster: "ecs/c1", Slots: []state.DrainSlot{{Group: "prod", InstanceID: "i-1", At: now0.Add(-time.Minute)}}})
	require.NoError(t, err)
	sick := serving("i-9", amiNew)
	sick.Node.Healthy = false
	v := view(4, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-8", amiNew), sick)
	v.Instances[0].Node.Tasks = 3

	_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	t.Logf("err %v; drains started %v; slots %v", err, rg.platform.started, slotsHeld(t, rg.store))
	require.Equal(t, []string{"i-1"}, rg.platform.started, "i-1 and i-2 draining with only i-8 serving: desired 2")
}

// TestECSManagedDrainingTerminationIsHeldByAFiringAlarm: with ECS managed draining the termination is where
// ECS's drain begins, so the alarm gate that holds a plain drain holds it too.
func TestECSManagedDrainingTerminationIsHeldByAFiringAlarm(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rg.target.Policy.Alarms, rg.o.Alarms = []string{"p99"}, &gateAlarms{firing: []string{"p99"}}
	rec, v := drainReady()
	rec.ECSManagedDraining = true
	rg.seed0(rec)
	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	t.Logf("alarm p99 firing: terminated %v", terminationsCalled(rg))
	require.Empty(t, terminationsCalled(rg), "a firing alarm holds the drain of a plain group; ECS drains i-1 on this termination")
}

// stallBeforeRelease runs fn (another replica's look) at the first budget read, then lets the read go on: replica
// A stalled (or its request hung in retries) between its lease check and its give-back.
type stallBeforeRelease struct {
	state.Store
	fn func()
}

func (s *stallBeforeRelease) GetClusterBudget(ctx context.Context, cluster string) (state.ClusterBudget, error) {
	if fn := s.fn; fn != nil {
		s.fn = nil
		fn()
	}
	return s.Store.GetClusterBudget(ctx, cluster)
}

// TestStaleReplicasGiveBackNeverReleasesTheSlotOfALiveDrain: replica A, paused, gives back the slot of a
// recorded start, but stalls past its lease before the release; the pause is lifted and replica B takes the
// group over and drains i-1 (recorded start, slot held: no budget write). A's give-back is fenced by the
// rollout record as A knew it, which B has moved since: it releases nothing, so i-1's drain keeps its slot and
// no other group of the cluster drains beside it on a budget of 1.
func TestStaleReplicasGiveBackNeverReleasesTheSlotOfALiveDrain(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	v := recordedDrainStart(t, rg, now0.Add(-time.Minute))
	v.Instances[0].Node.Tasks = 3
	lock := state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0}
	b := *rg.o
	b.Owner = "b"
	rg.o.Store = &stallBeforeRelease{Store: rg.store, fn: func() {
		rg.clock.Step(3 * time.Minute) // past A's lease and its margin
		v2 := v
		v2.ObservedAt = rg.clock.Now()
		_, err := b.Reconcile(ctx, rg.target, Inputs{View: v2, AMI: newAMI()}) // the pause was lifted
		require.NoError(t, err)
		t.Logf("replica b: drains started %v, slots %v", rg.platform.started, slotsHeld(t, rg.store))
	}}
	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI(), Pause: &lock})
	t.Logf("replica a: err %v; drains started %v; slots %v", err, rg.platform.started, slotsHeld(t, rg.store))
	require.Equal(t, []string{"i-1"}, rg.platform.started)
	o2 := b
	o2.lastStored = state.Rollout{}
	_, _, reason, err := o2.planClusterBudget(ctx, Target{Group: "other", Platform: PlatformECS, Cluster: "c1"}, state.Rollout{Group: "other"}, InstanceView{ID: "i-7"})
	require.NoError(t, err)
	t.Logf("other group's plan beside i-1's drain: %q", reason)
	require.Contains(t, reason, "i-1 (prod)", "no other drain beside i-1's on a budget of 1")
	_, ok := rg.o.Stored()
	require.False(t, ok, "replica a's record, proved stale by the fence, is not handed on as the stored one")
	require.Contains(t, slotsHeld(t, rg.store), "prod/i-1", "i-1 is DRAINING (replica b) and holds no slot")
}
