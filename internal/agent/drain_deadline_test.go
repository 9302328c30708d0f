package agent_test

import (
	"context"
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
// across operations. Retried every tick, such a drain would never reach its deadline. The agent completes each
// old instance's action with CONTINUE at its deadline (30 minutes after the agent recorded the action),
// undrained, and alerts it, so the refresh goes on and the rollout completes; its heartbeats keep the action
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
	r := runTo(t, w.World, 3*time.Hour, "ended", ended(demo.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, "the refresh goes on past each drain deadline: %s", r.Reason)
	settle(t, w.World, time.Minute)

	var deadlines []time.Time // when each undrained action was completed
	for _, c := range w.Account.LifecycleCompletions() {
		if !c.Accepted || c.Caller != sim.CallerAPI || c.Transition != sim.TransitionTerminating {
			continue
		}
		deadlines = append(deadlines, c.At)
		require.Equal(t, sim.ResultContinue, c.Result, c.InstanceID)
		rec, err := w.Store.GetHook(ctx, lifecycle.ActionKey(c.Group, c.InstanceID, c.Hook))
		require.NoError(t, err)
		held := c.At.Sub(rec.ReceivedAt)
		t.Logf("%s completed %s after the agent recorded its action", c.InstanceID, held)
		require.GreaterOrEqual(t, held, 30*time.Minute, "not before the drain deadline")
		require.Less(t, held, 31*time.Minute, "within a tick or two of the 30-minute deadline, not at Auto Scaling's timeout")
	}
	require.Len(t, deadlines, 2, "each old instance's terminating action completed by the agent")
	require.Equal(t, 2.0, w.alerts(lifecycle.AlertDrainDeadline), "each undrained CONTINUE is an alert")
	require.NotEmpty(t, w.Account.Heartbeats(), "heartbeats kept the actions alive until their deadline")
	st := spec.Faults.Stats()
	starts := st.Calls["ecs:UpdateContainerInstancesState"]
	t.Logf("%d calls, %d of them drain starts, in %s", sim.Total(st.Calls), starts, r.UpdatedAt.Sub(r.DetectedAt))
	require.Positive(t, starts, "the drains were tried")
	require.Less(t, starts, 2*60, "each drain start backed off, not retried on each of its 360 ticks")
	requireAllOn(t, w.World, g.Name, demo.ImageB, 2)
	// An old instance terminated undrained takes its tasks with it: the service runs short of its
	// minimumHealthyPercent (invariant 1) until ECS has started them again elsewhere. Nothing else breaks.
	for _, v := range w.Checker.Finish() {
		after := false
		for _, at := range deadlines {
			after = after || (!v.At.Before(at) && v.At.Sub(at) < 10*time.Minute)
		}
		require.True(t, v.Invariant == 1 && after, "only the tasks of an instance terminated at its drain deadline are short: %s", v)
	}
}
