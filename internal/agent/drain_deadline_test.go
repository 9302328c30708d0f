package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The drain deadline of a terminating lifecycle action holds when the drain can never be started, amid ECS
// faults: every call setting a container instance DRAINING is refused, and every 5th ECS call fails, counted
// across operations. Retried every tick, such a drain would never reach its deadline. At its deadline (30
// minutes after the agent recorded the action) the agent holds the first old instance's action, undrained
// (field case C9): the instance is back in service, the action heartbeated and never completed, one alert
// says held, and the rollout halts within a tick or two, without a rollback; its heartbeats keep the action
// alive until then, and the failing drain is retried after a backoff, not on every tick.
func TestDrainDeadlineHoldsWhenTheDrainCannotBeStartedAmidECSFaults(t *testing.T) {
	g := demo.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil,
		sim.FaultRule{Op: "ecs:UpdateContainerInstancesState", Every: 1, Codes: []string{sim.FaultThrottlingException}},
		sim.FaultRule{Op: "ecs:*", Every: 5, Across: true, Codes: []string{sim.FaultThrottlingException}})
	w := buildAlerting(t, spec, g)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	r := runTo(t, w.World, 3*time.Hour, "halted", func(r state.Rollout) bool { return r.Phase == state.PhaseHalted }, g.Name)
	haltedAt := w.Account.Clock().Now()
	require.Contains(t, r.Reason, "drain status unknown", "the drain never started")

	rec := requireDrainHeld(t, w, 30*time.Minute)
	held := rec.DrainHeldAt.Sub(rec.ReceivedAt)
	t.Logf("%s held %s after the agent recorded its action, rollout halted %s later", rec.InstanceID, held, haltedAt.Sub(rec.DrainHeldAt))
	require.GreaterOrEqual(t, held, 30*time.Minute, "not before the drain deadline")
	require.Less(t, held, 31*time.Minute, "within a tick or two of the 30-minute deadline, not at Auto Scaling's timeout")
	require.LessOrEqual(t, haltedAt.Sub(rec.DrainHeldAt), 2*tick, "the rollout halts at the hold")
	require.NotEmpty(t, heartbeatsOf(w.World, rec.InstanceID, rec.ReceivedAt, rec.DrainHeldAt), "heartbeats kept the action alive until its deadline")

	st := spec.Faults.Stats()
	starts := st.Calls["ecs:UpdateContainerInstancesState"]
	t.Logf("%d calls, %d of them drain starts, in %s", sim.Total(st.Calls), starts, r.UpdatedAt.Sub(r.DetectedAt))
	require.Positive(t, starts, "the drains were tried")
	require.Less(t, starts, 2*60, "each drain start backed off, not retried on each of its 360 ticks")
	require.Zero(t, w.Account.Calls()["autoscaling:TerminateInstanceInAutoScalingGroup"])
	requireNoCapacityWrites(t, w.World, g.Name)

	// The refresh's other termination in flight reaches its deadline after the halt, which is not its hold: it
	// continues at its deadline, undrained, with an alert. It takes its tasks with it: the service runs short of
	// its minimumHealthyPercent (invariant 1) until ECS has started them again elsewhere. Nothing else breaks;
	// the held action waits at the end by design.
	var continued []time.Time
	for _, c := range w.Account.LifecycleCompletions() {
		if !c.Accepted || c.Caller != sim.CallerAPI || c.Transition != sim.TransitionTerminating {
			continue
		}
		require.Equal(t, sim.ResultContinue, c.Result, c.InstanceID)
		other, err := w.Store.GetHook(ctx, lifecycle.ActionKey(c.Group, c.InstanceID, c.Hook))
		require.NoError(t, err)
		t.Logf("%s continued %s after the agent recorded its action, %s after the halt", c.InstanceID, c.At.Sub(other.ReceivedAt), c.At.Sub(haltedAt))
		require.True(t, c.At.After(haltedAt), "%s: continued after the halt only", c.InstanceID)
		require.GreaterOrEqual(t, c.At.Sub(other.ReceivedAt), 30*time.Minute, "%s: not before its drain deadline", c.InstanceID)
		require.Less(t, c.At.Sub(other.ReceivedAt), 31*time.Minute, "%s: at its drain deadline", c.InstanceID)
		continued = append(continued, c.At)
	}
	require.Equal(t, float64(1+len(continued)), w.alerts(lifecycle.AlertDrainDeadline), "the hold and each undrained CONTINUE are alerts")
	for _, v := range w.Checker.Finish() {
		after := false
		for _, at := range continued {
			after = after || (!v.At.Before(at) && v.At.Sub(at) < 10*time.Minute)
		}
		require.True(t, v.Invariant == 1 && after, "only the tasks of an instance continued at its drain deadline are short: %s", v)
	}
}

// requireDrainHeld asserts that the world's rollout is Halted by the one drain the agent held at its deadline
// (field case C9), and that the hold stays while the world runs on for d: the reason names the held instance
// and the way forward (`patch-agent retry`, `patch-agent rollback`); the refresh was cancelled, never rolled
// back; the instance waits in Terminating:Wait and serves again (its container instance ACTIVE); its action's
// record is held, never completed, and heartbeated since the hold; one DrainDeadline alert says held. It
// returns the held action's record.
func requireDrainHeld(t *testing.T, w alertWorld, d time.Duration) state.Hook {
	t.Helper()
	ctx := context.Background()
	group := w.g.Name
	r := w.Rollout(ctx, group)
	require.Equal(t, state.PhaseHalted, r.Phase, r.Reason)
	var rec state.Hook
	for _, i := range w.Account.Group(group).Instances {
		h, err := w.Store.GetHook(ctx, lifecycle.ActionKey(group, i.ID, demo.HookName))
		if err == nil && !h.DrainHeldAt.IsZero() {
			require.Empty(t, rec.InstanceID, "one drain held: %s and %s", rec.InstanceID, h.InstanceID)
			rec = h
		}
	}
	require.NotEmpty(t, rec.InstanceID, "a drain held: %s", r.Reason)
	id := rec.InstanceID
	require.Contains(t, r.Reason, "failed: drain of "+id+" on lifecycle hook "+demo.HookName+" held: drain did not finish within 30m0s")
	require.Contains(t, r.Reason, id+" is back in service but stays in Terminating:Wait")
	require.Contains(t, r.Reason, "`patch-agent retry "+group+"`")
	require.Contains(t, r.Reason, "`patch-agent rollback "+group+"`")
	require.Positive(t, w.Account.Calls()["autoscaling:CancelInstanceRefresh"], "the refresh is cancelled")
	require.Zero(t, w.Account.Calls()["autoscaling:RollbackInstanceRefresh"], "a held drain halts without a rollback")
	notified := w.notified(t, lifecycle.AlertDrainDeadline)
	require.Len(t, notified, 1, "one alert")
	require.Contains(t, notified[0].Detail, id+": held: ")

	w.run(t, d)
	require.Equal(t, state.PhaseHalted, w.Rollout(ctx, group).Phase, "halted stays halted")
	inst, ok := w.Account.Instance(id)
	require.True(t, ok)
	require.Equal(t, "Terminating:Wait", inst.LifecycleState, "held on the terminating hook, not terminated")
	require.Equal(t, "ACTIVE", inst.ContainerInstanceStatus, "back in service")
	rec, err := w.Store.GetHook(ctx, lifecycle.ActionKey(group, id, demo.HookName))
	require.NoError(t, err)
	require.NotEqual(t, state.HookCompleted, rec.State)
	require.False(t, rec.DrainHeldAt.IsZero(), "still held")
	for _, c := range w.Account.LifecycleCompletions() {
		require.False(t, c.Caller == sim.CallerAPI && c.InstanceID == id, "the held action is never completed: %+v", c)
	}
	require.NotEmpty(t, heartbeatsOf(w.World, id, rec.DrainHeldAt, w.Account.Clock().Now()), "heartbeated while held")
	held := 0
	for _, n := range w.notified(t, lifecycle.AlertDrainDeadline) {
		if strings.Contains(n.Detail, ": held: ") {
			held++
		}
	}
	require.Equal(t, 1, held, "one held alert")
	require.GreaterOrEqual(t, w.alerts(lifecycle.AlertDrainDeadline), 1.0)
	return rec
}

// heartbeatsOf returns the accepted heartbeats of instance's lifecycle actions in [from, to).
func heartbeatsOf(w *demo.World, instance string, from, to time.Time) []sim.Completion {
	var out []sim.Completion
	for _, h := range w.Account.Heartbeats() {
		if h.Accepted && h.InstanceID == instance && !h.At.Before(from) && h.At.Before(to) {
			out = append(out, h)
		}
	}
	return out
}
