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

// TestRefreshIsCancelledWhenAStackUpdateDeletesTheAgentsTerminatingHook: mid-refresh, a stack update deletes the
// group's terminating hook (DeleteLifecycleHook). From then on Auto Scaling terminates old instances without
// waiting for a drain. The agent's next read of the group's hooks (its hook check, within the poll interval)
// cancels its refresh, and the rollout waits naming the missing hook; it starts no refresh while the hook is
// missing. Once the hook is back the rollout starts a refresh that skips the instances already on the target,
// and completes.
func TestRefreshIsCancelledWhenAStackUpdateDeletesTheAgentsTerminatingHook(t *testing.T) {
	g := testworld.GroupSetup{Name: "rf", Min: 2, Max: 5, Desired: 4, Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
	spec := oneGroup(&g)
	w := buildRefresh(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	onB := func() int { // instances of the group in service on ImageB
		n := 0
		for _, i := range w.Account.Group(g.Name).Instances {
			if i.ImageID == testworld.ImageB && i.LifecycleState == "InService" {
				n++
			}
		}
		return n
	}
	ok, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return onB() >= 1 })
	require.NoError(t, err)
	require.True(t, ok, "the first replacement serves: %+v", w.Rollout(ctx, g.Name))
	require.NoError(t, w.Account.DeleteLifecycleHook(g.Name, testworld.HookName))

	r := runTo(t, w, 30*time.Minute, "the refresh cancelled for the missing hook", func(r state.Rollout) bool {
		return r.Phase == state.PhaseWaiting && strings.Contains(r.Reason, "instance refresh needs the agent's lifecycle hooks")
	}, g.Name)
	require.Contains(t, r.Reason, "no terminating lifecycle hook")
	// Until the agent read the hooks again, Auto Scaling terminated what the refresh had in flight without a
	// drain (the checker's invariants 2 and 1 see it: the hook's deletion, not the agent's doing); from the
	// cancel on, nothing more.
	undrained := 0
	for _, term := range w.Account.Terminations() {
		if !term.DrainedAtRequest {
			undrained++
		}
	}
	require.LessOrEqual(t, undrained, 2, "the refresh's termination in flight and the cancel's return to desired capacity")
	violations := len(w.Checker.Violations)
	require.Equal(t, 1, w.Account.Calls()["autoscaling:CancelInstanceRefresh"])
	starts := w.Account.Calls()["autoscaling:StartInstanceRefresh"]
	require.NoError(t, w.RunFor(ctx, 20*time.Minute))
	require.Equal(t, starts, w.Account.Calls()["autoscaling:StartInstanceRefresh"], "no refresh while the hook is missing")
	require.Equal(t, state.PhaseWaiting, w.Rollout(ctx, g.Name).Phase)

	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: testworld.HookName, Transition: sim.TransitionTerminating,
		HeartbeatTimeout: 300 * time.Second, DefaultResult: sim.ResultContinue, QueueURL: w.QueueURL}))
	r = runTo(t, w, 3*time.Hour, "completed", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, 4, onB())
	require.Len(t, w.Checker.Finish(), violations, "no invariant broken once the refresh was cancelled")
}
