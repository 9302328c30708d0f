package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Invariant 3: an autoscaler scales in while the surge is held after its write-ahead (SurgeTo durable, the
// SetDesiredCapacity call not made: a crash, then a pause). The surge is planned again on top of what the
// autoscaler wants now; a resumed surge that wrote the SurgeTo planned before the scale in would set desired 2
// above what the autoscaler wanted, and undo its scale in for good.
func TestSurgeHeldWhileAnAutoscalerScalesInGoesOnTopOfWhatItWantsNow(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(map[bool]string{false: "crash", true: "crash then pause"}[paused], func(t *testing.T) {
			ctx := context.Background()
			g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 8, Desired: 3}
			w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 4}})
			settle(t, w.World, 10*time.Second)
			fuse := &demo.Fuse{OnWrite: func(r state.Rollout) bool {
				return r.Current != nil && r.Current.Step == state.StepSurge && r.Current.SurgeTo != 0
			}}
			w.Restart(fuse)
			w.PublishAMI(g.Parameter, demo.ImageB)
			done, err := w.RunUntil(ctx, tick, time.Hour, fuse.Blown)
			require.NoError(t, err)
			require.True(t, done)
			require.Equal(t, int32(3), w.Account.Group(g.Name).Desired, "the surge was not sent")
			if paused {
				require.NoError(t, w.Store.PutLock(ctx, state.Lock{Group: g.Name, Reason: "freeze", Who: "alice", Since: w.Account.Clock().Now()}))
			}
			w.Restart(nil)
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 2), "the autoscaler scales in while the surge is held")
			if paused {
				_, err := w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
				require.NoError(t, err)
				require.NoError(t, w.Store.DeleteLock(ctx, g.Name))
			}
			maxDesired := int32(0)
			_, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
				maxDesired = max(maxDesired, w.Account.Group(g.Name).Desired)
				return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted
			})
			require.NoError(t, err)
			settle(t, w.World, 5*time.Minute)
			t.Logf("max desired %d, final desired %d, rollout %s %q", maxDesired, w.Account.Group(g.Name).Desired,
				w.Rollout(ctx, g.Name).Phase, w.Rollout(ctx, g.Name).Reason)
			for _, c := range w.Account.DesiredChanges(g.Name) {
				t.Logf("desired %d -> %d by %s at %s", c.From, c.To, c.By, c.At.Format(time.TimeOnly))
			}
			t.Logf("checker: %v", w.Checker.Finish())
			require.LessOrEqual(t, maxDesired, int32(3), "never more than the autoscaler's 2 + the agent's 1")
			require.Equal(t, int32(2), w.Account.Group(g.Name).Desired, "desired ends where the autoscaler set it")
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// Field case C18, warm pool with ReuseOnScaleIn: the agent picked an instance (the record at Surge, nothing
// surged yet) and is held (a crash, then a pause). An autoscaler scales in meanwhile; with the reuse policy the
// instance goes back to the pool, drained, still on AMI A. The surge recycles the pool first. Were desired
// raised at once, Auto Scaling would draw the old-AMI instance back from the pool, the agent would take it for
// its replacement and halt the rollout as "the group's launch template change did not take effect", rolling
// back a good AMI.
func TestC18ScaleInToTheWarmPoolWhileTheSurgeIsHeldIsRecycledNotTakenForABadReplacement(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 3}
	w, _ := buildPool(t, &g, sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)})
	require.Empty(t, poolOf(w, g.Name))
	fuse := &demo.Fuse{OnWrite: func(r state.Rollout) bool {
		return r.Current != nil && r.Current.Step == state.StepSurge && r.Current.SurgeTo == 0
	}}
	w.Restart(fuse)
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, fuse.Blown)
	require.NoError(t, err)
	require.True(t, done, "crashed after the pick")
	require.NoError(t, w.Store.PutLock(ctx, state.Lock{Group: g.Name, Reason: "freeze", Who: "alice", Since: w.Account.Clock().Now()}))
	w.Restart(nil)
	back := scaleInToPool(t, w, g.Name, 2)
	bv, _ := w.Account.Instance(back)
	t.Logf("back in the pool: %s on %s (%s)", back, bv.ImageID, bv.LifecycleState)
	require.Equal(t, demo.ImageA, bv.ImageID)
	require.NoError(t, w.Store.DeleteLock(ctx, g.Name))
	_, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return !w.Rollout(ctx, g.Name).Active() })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	for _, h := range w.Account.DesiredChanges(g.Name) {
		t.Logf("desired %d -> %d by %s", h.From, h.To, h.By)
	}
	t.Logf("rollout %s %q, desired %d", r.Phase, r.Reason, w.Account.Group(g.Name).Desired)
	require.Equal(t, state.PhaseCompleted, r.Phase, "a scale in to the pool must not roll back a good AMI: %s", r.Reason)
}
