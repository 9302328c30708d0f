package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A newer AMI published while a rollout replaces instances takes effect at the next instance boundary. The
// replacement in flight finishes on the superseded AMI; the rollout then goes back through every gate — here
// the manual approval, which belongs to one AMI and is not carried over — and once the newer AMI is approved
// every instance, those already replaced with the superseded AMI included, ends on the newest (imageC,
// amigate_test.go). History records the superseded rollout; every invariant holds.
func TestSupersedeNewerAMIMidRolloutTakesEffectAtTheNextInstanceBoundaryAndIsApprovedAgain(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 2, Max: 8, Desired: 4,
		Tags: map[string]string{lifecycle.TagApproval: "manual"}}
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 8}})
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
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseWaiting })
	require.NoError(t, err)
	require.True(t, done)
	approve(demo.ImageB)
	done, err = w.RunUntil(ctx, tick, 2*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return len(r.Replaced) == 1 && r.Current != nil && r.Current.Step == state.StepReplacementHealthy
	})
	require.NoError(t, err)
	require.True(t, done, "the second replacement is in flight")
	inFlight := w.Rollout(ctx, g.Name).Current.OldInstanceID

	w.PublishAMI(g.Parameter, imageC)
	done, err = w.RunUntil(ctx, tick, 2*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.TargetImageID == imageC && r.Phase == state.PhaseWaiting
	})
	require.NoError(t, err)
	require.True(t, done, "superseded at the instance boundary: %+v", w.Rollout(ctx, g.Name))
	r := w.Rollout(ctx, g.Name)
	require.Nil(t, r.Current, "no replacement in flight while the newer AMI waits for its gates")
	require.NotEqual(t, imageC, r.ApprovedImage, "an approval belongs to one AMI")
	if old, ok := w.Account.Instance(inFlight); ok {
		require.NotEqual(t, "InService", old.LifecycleState, "the replacement in flight finished: its old instance terminated")
	}
	require.Equal(t, int32(4), w.Account.Group(g.Name).Desired, "and its surge given back")
	onB := 0
	for _, i := range w.Account.Group(g.Name).Instances {
		if i.ImageID == demo.ImageB {
			onB++
		}
	}
	require.Equal(t, 2, onB, "two instances were replaced with the superseded AMI, the in-flight one included")
	launched := w.Account.LaunchedInstances(g.Name)
	_, err = w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "nothing rolls until the newer AMI is approved")

	approve(imageC)
	done, err = w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "completed: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 5*time.Minute)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(4), grp.Desired)
	require.Equal(t, int32(8), grp.Max)
	require.Len(t, grp.Instances, 4)
	for _, i := range grp.Instances {
		require.Equal(t, imageC, i.ImageID, "%s on the newest AMI, those replaced with the superseded one too", i.ID)
	}
	history, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	var superseded *state.HistoryEntry
	for _, e := range history {
		if e.Event == "superseded" {
			superseded = &e
		}
	}
	require.NotNil(t, superseded, "history records the superseded rollout: %+v", history)
	require.Equal(t, demo.ImageB, superseded.PreviousImage)
	require.Equal(t, imageC, superseded.NewImage)
	require.Empty(t, w.Checker.Finish())
}
