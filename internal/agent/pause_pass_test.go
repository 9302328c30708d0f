package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/operator"
)

// Review finding: a pass read the pause locks once, at its start, and every target it reached afterwards acted
// on that list. A pause taken while a long pass ran (seconds to minutes for a fleet under the rate limits)
// did not hold the rest of that pass: group b's old instance was drained and terminated after `pause` had
// returned. Now the locks are read right before each target's first new destructive step.
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
