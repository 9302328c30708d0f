package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// The drain deadline of a terminating lifecycle action holds when the drain can never be started, amid ECS
// faults: every call setting a container instance DRAINING is refused, and every 5th ECS call fails, counted
// across operations. Retried every tick, such a drain would never reach its deadline. At its deadline (30
// minutes after the agent recorded the action) the agent holds the first old instance's action, undrained
// (field case C9): the instance is back in service, the action heartbeated and never completed, one alert
// says held, and the rollout halts within a tick or two, without a rollback; its heartbeats keep the action
// alive until then, and the failing drain is retried after a backoff, not on every tick.
func TestDrainDeadlineHoldsWhenTheDrainCannotBeStartedAmidECSFaults(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil,
		sim.FaultRule{Op: "ecs:UpdateContainerInstancesState", Every: 1, Codes: []string{sim.FaultThrottlingException}},
		sim.FaultRule{Op: "ecs:*", Every: 5, Across: true, Codes: []string{sim.FaultThrottlingException}})
	w := buildAlerting(t, spec, g)
	w.PublishAMI(g.Parameter, testworld.ImageB)
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

	// The refresh's other termination in flight reaches its deadline while the first hold halts the rollout: it
	// is held too, never continued undrained, so no service runs short and nothing breaks (the held actions
	// wait at the end by design).
	for _, c := range w.Account.LifecycleCompletions() {
		require.False(t, c.Accepted && c.Caller == sim.CallerAPI && c.Transition == sim.TransitionTerminating,
			"no terminating action of the refresh is continued undrained: %+v", c)
	}
	require.Empty(t, w.Checker.Finish())
}

// requireDrainHeld asserts that the world's rollout is Halted by the first drain the agent held at its deadline
// (field case C9), and that the hold stays while the world runs on for d: the reason names the held instance
// and the way forward (`patch-agent retry`, `patch-agent rollback`); the refresh was cancelled, never rolled
// back; the instance waits in Terminating:Wait and serves again (its container instance ACTIVE); its action's
// record is held, never completed, and heartbeated since the hold, and so is every other drain of the refresh
// held meanwhile; one DrainDeadline alert says held for each. It returns the first held action's record.
func requireDrainHeld(t *testing.T, w alertWorld, d time.Duration) state.Hook {
	t.Helper()
	ctx := context.Background()
	group := w.g.Name
	r := w.Rollout(ctx, group)
	require.Equal(t, state.PhaseHalted, r.Phase, r.Reason)
	var rec state.Hook
	for _, i := range w.Account.Group(group).Instances {
		h, err := w.Store.GetHook(ctx, model.ActionKey(group, i.ID, testworld.HookName))
		if err == nil && !h.DrainHeldAt.IsZero() {
			require.Empty(t, rec.InstanceID, "one drain held: %s and %s", rec.InstanceID, h.InstanceID)
			rec = h
		}
	}
	require.NotEmpty(t, rec.InstanceID, "a drain held: %s", r.Reason)
	id := rec.InstanceID
	require.Contains(t, r.Reason, "failed: drain of "+id+" on lifecycle hook "+testworld.HookName+" held: drain did not finish within 30m0s")
	require.Contains(t, r.Reason, id+" is back in service but stays in Terminating:Wait")
	require.Contains(t, r.Reason, "`patch-agent retry "+group+"`")
	require.Contains(t, r.Reason, "`patch-agent rollback "+group+"`")
	require.Positive(t, w.Account.Calls()["autoscaling:CancelInstanceRefresh"], "the refresh is cancelled")
	require.Zero(t, w.Account.Calls()["autoscaling:RollbackInstanceRefresh"], "a held drain halts without a rollback")
	notified := w.notified(t, model.AlertDrainDeadline)
	require.Len(t, notified, 1, "one alert")
	require.Contains(t, notified[0].Detail, id+": held: ")

	w.run(t, d)
	require.Equal(t, state.PhaseHalted, w.Rollout(ctx, group).Phase, "halted stays halted")
	rec, err := w.Store.GetHook(ctx, model.ActionKey(group, id, testworld.HookName))
	require.NoError(t, err)
	// Every drain held meanwhile — the first, and any other termination of the refresh that reached its deadline
	// while the first hold halted it — stays held: in Terminating:Wait, back in service, heartbeated, never
	// completed; one held alert each.
	heldRecords := 0
	for _, i := range w.Account.Group(group).Instances {
		h, err := w.Store.GetHook(ctx, model.ActionKey(group, i.ID, testworld.HookName))
		if err != nil || h.DrainHeldAt.IsZero() {
			continue
		}
		heldRecords++
		require.Equal(t, "Terminating:Wait", i.LifecycleState, "%s held on the terminating hook, not terminated", i.ID)
		require.Equal(t, "ACTIVE", i.ContainerInstanceStatus, "%s back in service", i.ID)
		require.NotEqual(t, state.HookCompleted, h.State, i.ID)
		for _, c := range w.Account.LifecycleCompletions() {
			require.False(t, c.Caller == sim.CallerAPI && c.InstanceID == i.ID, "the held action is never completed: %+v", c)
		}
		require.NotEmpty(t, heartbeatsOf(w.World, i.ID, h.DrainHeldAt, w.Account.Clock().Now()), "%s heartbeated while held", i.ID)
	}
	require.False(t, rec.DrainHeldAt.IsZero(), "the first stays held")
	held := 0
	for _, n := range w.notified(t, model.AlertDrainDeadline) {
		if strings.Contains(n.Detail, ": held: ") {
			held++
		}
	}
	require.Equal(t, heldRecords, held, "one held alert per held drain")
	require.GreaterOrEqual(t, w.alerts(model.AlertDrainDeadline), 1.0)
	return rec
}

// heartbeatsOf returns the accepted heartbeats of instance's lifecycle actions in [from, to).
func heartbeatsOf(w *testworld.World, instance string, from, to time.Time) []sim.Completion {
	var out []sim.Completion
	for _, h := range w.Account.Heartbeats() {
		if h.Accepted && h.InstanceID == instance && !h.At.Before(from) && h.At.Before(to) {
			out = append(out, h)
		}
	}
	return out
}
