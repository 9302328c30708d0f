package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// A pause taken while a long pass runs (seconds to minutes for a fleet under the rate limits) holds the rest of
// that pass: the locks are read right before each target's first new destructive step, not once at the pass's
// start, so group b's old instance is not drained and terminated after `pause` has returned.
func TestPauseTakenWhileAPassRunsHoldsEveryTargetThePassHasNotReached(t *testing.T) {
	obs := newBlockingObserver("a")
	w := build(t, demo.Spec{Observer: obs, Groups: []demo.GroupSetup{
		{Name: "a", Cluster: "c1", Parameter: "/golden/a", Min: 1, Max: 2, Desired: 1},
		{Name: "b", Cluster: "c1", Parameter: "/golden/b", Min: 1, Max: 3, Desired: 2},
	}, Services: map[string]int{"web": 2}})
	ctx := context.Background()
	settle(t, w, 30*time.Second)
	w.PublishAMI("/golden/b", demo.ImageB)
	_, err := w.Agent.Consumer.PollOnce(ctx, 0)
	require.NoError(t, err)
	w.Account.Advance(3 * time.Minute) // b's replacement boots and registers while the agent does not look
	before := w.Rollout(ctx, "b")
	require.NotNil(t, before.Current, "b has a replacement under way")
	changes := len(w.Account.DesiredChanges("b"))

	obs.armed.Store(true)
	pass := make(chan error, 1)
	go func() { pass <- w.Agent.Reconcile(ctx) }()
	select {
	case <-obs.entered: // the pass is inside its look at a; b comes after it
	case <-time.After(realTimeout):
		t.Fatal("the pass never reached group a")
	}
	require.NoError(t, operator.Pause(ctx, w.Store, "", "stop now", "tester", time.Time{}, w.Account.Clock().Now()))
	close(obs.release)
	require.NoError(t, <-pass)

	after := w.Rollout(ctx, "b")
	require.Len(t, w.Account.DesiredChanges("b"), changes, "no termination with decrement after the pause returned")
	require.NotNil(t, after.Current)
	require.Equal(t, before.Current.OldInstanceID, after.Current.OldInstanceID, "the old instance is still the one to replace")
	// The next look holds it too, and says why.
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Len(t, w.Account.DesiredChanges("b"), changes)
	require.Contains(t, w.Rollout(ctx, "b").Reason, "paused")
}

// The read that TestPauseTakenWhileAPassRunsHoldsEveryTargetThePassHasNotReached proves could still be made
// once per pass, lazily, when the first target needs it, and kept for the rest of the pass: that test's first
// read comes after the pause. Here an earlier target of the pass (a) reads the locks for its own destructive
// step before the pause is taken; the later target (b) must read them again and be held.
func TestPauseTakenAfterAnEarlierTargetReadTheLocksStillHoldsTheLaterTargetsOfThePass(t *testing.T) {
	obs := newBlockingObserver("a")
	policy := lifecycle.DefaultPolicy()
	policy.ClusterBudget = 2 // a and b may drain at once: only the pause holds b
	w := build(t, demo.Spec{Observer: obs, Policy: policy, Groups: []demo.GroupSetup{
		{Name: "a", Cluster: "c1", Parameter: "/golden/ab", Min: 1, Max: 3, Desired: 2},
		{Name: "b", Cluster: "c1", Parameter: "/golden/ab", Min: 1, Max: 3, Desired: 2},
	}, Services: map[string]int{"web": 4}})
	ctx := context.Background()
	settle(t, w, 30*time.Second)
	w.PublishAMI("/golden/ab", demo.ImageB) // one parameter: one change starts both rollouts
	_, err := w.Agent.Consumer.PollOnce(ctx, 0)
	require.NoError(t, err)
	w.Account.Advance(3 * time.Minute) // both replacements boot and register while the agent does not look
	beforeA, beforeB := w.Rollout(ctx, "a"), w.Rollout(ctx, "b")
	require.NotNil(t, beforeA.Current, "a has a replacement under way")
	require.NotNil(t, beforeB.Current, "b has a replacement under way")
	changes := len(w.Account.DesiredChanges("b"))

	obs.armed.Store(true)
	pass := make(chan error, 1)
	go func() { pass <- w.Agent.Reconcile(ctx) }()
	select {
	case <-obs.entered: // a has taken its step (its pause read found none); b comes after it
	case <-time.After(realTimeout):
		t.Fatal("the pass never reached group a")
	}
	require.Equal(t, 1, drainingIn(w, "a"), "a drained its old instance in this pass: it read the pause locks before the pause")
	require.NoError(t, operator.Pause(ctx, w.Store, "", "stop now", "tester", time.Time{}, w.Account.Clock().Now()))
	close(obs.release)
	require.NoError(t, <-pass)

	after := w.Rollout(ctx, "b")
	require.NotNil(t, after.Current)
	require.Zero(t, drainingIn(w, "b"), "b's old instance is not DRAINING: b read the locks again and is held")
	require.Len(t, w.Account.DesiredChanges("b"), changes, "no termination with decrement after the pause returned")
	// The next look holds it too, and says why.
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Zero(t, drainingIn(w, "b"))
	require.Contains(t, w.Rollout(ctx, "b").Reason, "paused")
}

// drainingIn counts the InService instances of group whose container instance is DRAINING.
func drainingIn(w *demo.World, group string) int {
	n := 0
	w.Account.Observe(func(v *sim.View) {
		for _, i := range v.Group(group).Instances {
			if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "DRAINING" {
				n++
			}
		}
	})
	return n
}
