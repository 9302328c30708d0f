package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// A newer AMI published while a refresh replaces instances cancels the refresh; the instances already
// replaced with the superseded AMI stay, and the rollout goes back through every gate — here the manual
// approval, which belongs to one AMI and is not carried over: nothing launches until the newer AMI is approved.
// Once it is, a new refresh puts every instance, those already replaced with the superseded AMI included, on the
// newest (imageC, amigate_test.go). History records the superseded rollout; every invariant holds and the agent
// writes no capacity. TestRefreshSupersededByANewerAMI covers the same without an approval gate.
func TestSupersedeNewerAMIMidRolloutTakesEffectAtTheNextInstanceBoundaryAndIsApprovedAgain(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 2, Max: 8, Desired: 4,
		Tags: map[string]string{model.TagApproval: "manual"}}
	w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{g}, Services: map[string]int{"web": 8}})
	settle(t, w, 10*time.Second)
	approve := func(image string) {
		t.Helper()
		r := w.Rollout(ctx, g.Name)
		require.Equal(t, state.PhaseWaiting, r.Phase)
		require.Equal(t, image, r.TargetImageID)
		require.Contains(t, r.Reason, "approval: waiting for `patch-agent approve g` (AMI "+image+")")
		r.ApprovedImage, r.ApprovedBy = image, "arn:aws:sts::111122223333:assumed-role/OnCall/alice"
		_, err := w.Store.PutRollout(ctx, r)
		require.NoError(t, err)
	}
	onImage := func(image string) int {
		n := 0
		for _, i := range w.Account.Group(g.Name).Instances {
			if i.ImageID == image && i.LifecycleState == "InService" {
				n++
			}
		}
		return n
	}
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseWaiting })
	require.NoError(t, err)
	require.True(t, done)
	approve(testworld.ImageB)
	done, err = w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return midRefresh(w.Rollout(ctx, g.Name)) && onImage(testworld.ImageB) >= 1 })
	require.NoError(t, err)
	require.True(t, done, "the refresh is under way: %+v", w.Rollout(ctx, g.Name))

	w.PublishAMI(g.Parameter, imageC)
	done, err = w.RunUntil(ctx, tick, 2*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.TargetImageID == imageC && r.Phase == state.PhaseWaiting
	})
	require.NoError(t, err)
	require.True(t, done, "superseded: %+v", w.Rollout(ctx, g.Name))
	r := w.Rollout(ctx, g.Name)
	require.NotEqual(t, imageC, r.ApprovedImage, "an approval belongs to one AMI")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"), "the superseded AMI's refresh cancelled")
	settle(t, w, 10*time.Minute) // what the cancel left in flight ends
	onB := onImage(testworld.ImageB)
	require.GreaterOrEqual(t, onB, 1, "instances replaced with the superseded AMI stay until the newer one rolls")
	launched := w.Account.LaunchedInstances(g.Name)
	_, err = w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "nothing rolls until the newer AMI is approved")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))

	approve(imageC)
	done, err = w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "completed: %+v", w.Rollout(ctx, g.Name))
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	settle(t, w, 5*time.Minute)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(4), grp.Desired)
	require.Equal(t, int32(8), grp.Max)
	requireAllOn(t, w, g.Name, imageC, 4)
	history, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	var superseded *state.HistoryEntry
	for _, e := range history {
		if e.Event == "superseded" {
			superseded = &e
		}
	}
	require.NotNil(t, superseded, "history records the superseded rollout: %+v", history)
	require.Equal(t, testworld.ImageB, superseded.PreviousImage)
	require.Equal(t, imageC, superseded.NewImage)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
	t.Logf("%d instance(s) on the superseded AMI at the cancel", onB)
}
