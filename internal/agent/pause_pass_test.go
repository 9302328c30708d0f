package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// newAMIFoundByThePass names image on parameter without a message (the pass's parameter poll finds it) and moves
// the clock past the poll's 10 minutes, so that the next pass starts the rollouts: no reaction starts them first.
func newAMIFoundByThePass(w *testworld.World, parameter, image string) {
	w.RegisterAMI(image)
	w.Account.PutParameter(parameter, image)
	w.Account.Advance(11 * time.Minute)
}

// A pause taken while a long pass runs (seconds to minutes for a fleet under the rate limits) holds the rest of
// that pass: the locks are checked right before each target's first new destructive step, not once at the
// pass's start, so group b neither prepares its launch template version nor starts its instance refresh after
// `pause` has returned.
func TestPauseTakenWhileAPassRunsHoldsEveryTargetThePassHasNotReached(t *testing.T) {
	obs := newBlockingObserver("a")
	w := build(t, testworld.Spec{Observer: obs, Groups: []testworld.GroupSetup{
		{Name: "a", Cluster: "c1", Parameter: "/golden/a", Min: 1, Max: 2, Desired: 1},
		{Name: "b", Cluster: "c1", Parameter: "/golden/b", Min: 1, Max: 3, Desired: 2},
	}, Services: map[string]int{"web": 2}})
	ctx := context.Background()
	settle(t, w, 30*time.Second)
	newAMIFoundByThePass(w, "/golden/b", testworld.ImageB)

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
	require.Equal(t, testworld.ImageB, after.TargetImageID, "the pass looked at b")
	require.Empty(t, after.NewTemplateVersion, "no launch template version prepared after the pause returned")
	require.Zero(t, refreshCalls(w, "ec2:CreateLaunchTemplateVersion"))
	require.Zero(t, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "no refresh started after the pause returned")
	// The next look holds it too, and says why.
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Zero(t, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	require.Contains(t, w.Rollout(ctx, "b").Reason, "paused")
}

// The check that TestPauseTakenWhileAPassRunsHoldsEveryTargetThePassHasNotReached proves could still be made
// once per pass, lazily, when the first target needs it, and kept for the rest of the pass: that test's first
// check comes after the pause. Here an earlier target of the pass (a) checks the locks for its own destructive
// steps (its launch template version, its refresh) before the pause is taken; the later target (b) must check
// them again and be held.
func TestPauseTakenAfterAnEarlierTargetReadTheLocksStillHoldsTheLaterTargetsOfThePass(t *testing.T) {
	obs := newBlockingObserver("a")
	w := build(t, testworld.Spec{Observer: obs, Groups: []testworld.GroupSetup{
		{Name: "a", Cluster: "c1", Parameter: "/golden/ab", Min: 1, Max: 3, Desired: 2},
		{Name: "b", Cluster: "c1", Parameter: "/golden/ab", Min: 1, Max: 3, Desired: 2},
	}, Services: map[string]int{"web": 4}})
	ctx := context.Background()
	settle(t, w, 30*time.Second)
	newAMIFoundByThePass(w, "/golden/ab", testworld.ImageB) // one parameter: one change starts both rollouts

	obs.armed.Store(true)
	pass := make(chan error, 1)
	go func() { pass <- w.Agent.Reconcile(ctx) }()
	select {
	case <-obs.entered: // a has taken its steps (its pause checks found none); b comes after it
	case <-time.After(realTimeout):
		t.Fatal("the pass never reached group a")
	}
	requireRefreshOnNewVersion(t, w, "a") // a checked the pause locks before the pause
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	require.NoError(t, operator.Pause(ctx, w.Store, "", "stop now", "tester", time.Time{}, w.Account.Clock().Now()))
	close(obs.release)
	require.NoError(t, <-pass)

	after := w.Rollout(ctx, "b")
	require.Equal(t, testworld.ImageB, after.TargetImageID, "the pass looked at b")
	require.Empty(t, after.NewTemplateVersion, "b checked the locks again and is held: no launch template version")
	require.Equal(t, 1, refreshCalls(w, "ec2:CreateLaunchTemplateVersion"), "a's version only")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "a's refresh only")
	// The next look holds it too, and says why.
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	require.Contains(t, w.Rollout(ctx, "b").Reason, "paused")
}
