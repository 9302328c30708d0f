package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// The drain of an old node blocked by a PodDisruptionBudget (minAvailable = replicas) whose health check fails:
// either the refresh terminates it through the agent's terminating hook and its health check fails while the
// drain waits, or Auto Scaling's health check replacement terminates it during the refresh, before the refresh
// does. At its drain deadline the agent lets it go: the node waits in Terminating:Wait and is never uncordoned
// there (an instance that fails its health check is never put back in service), the rollout neither halts nor
// undrains on it, and its lifecycle action proceeds.
func TestEKSDrainOfANodeThatStartsTerminatingLetsItGoAndNeverUncordonsIt(t *testing.T) {
	for _, c := range []struct {
		name      string
		byRefresh bool // the refresh terminates the node before its health check fails
	}{{"the refresh's termination, then a failed health check", true}, {"a health check replacement during the refresh", false}} {
		t.Run(c.name, func(t *testing.T) { testEKSDrainOfANodeThatFailsItsHealthCheck(t, c.byRefresh) })
	}
}

func testEKSDrainOfANodeThatFailsItsHealthCheck(t *testing.T, byRefresh bool) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "nodes", Platform: model.PlatformEKS, Cluster: "e1", Parameter: providers.ParameterAuto,
		Min: 3, Max: 6, Desired: 3}
	w := buildWatched(t, testworld.Spec{Groups: []testworld.GroupSetup{g},
		KubeWorkload: kubesim.KubeWorkload{Replicas: 6, MinAvailable: 6, DaemonSet: true}})
	settle(t, w.World, 10*time.Second)
	w.PublishPublicAMI(w.EKSParameter(g.Name), testworld.ImageB)
	oldID := ""
	cordoned := func() bool {
		obs, err := w.Kube.Observe(ctx)
		require.NoError(t, err)
		n, ok := obs[oldID]
		return ok && n.Cordoned
	}
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		if r := w.Rollout(ctx, g.Name); !byRefresh && (r.Refresh == nil || r.Refresh.ID == "") {
			return false
		}
		for _, i := range w.Account.Group(g.Name).Instances {
			if i.ImageID == testworld.ImageA && (byRefresh || i.LifecycleState == "InService") {
				oldID = i.ID
				if !byRefresh || cordoned() {
					return !byRefresh || cordoned()
				}
			}
		}
		return false
	})
	require.NoError(t, err)
	if byRefresh {
		require.True(t, done, "an old node's drain started: %+v", w.Rollout(ctx, g.Name))
		settle(t, w.World, 10*time.Minute)
		require.True(t, w.Account.MarkInstanceUnhealthy(oldID), "the draining node's health check fails")
	}
	var markedAt time.Time
	if !byRefresh {
		require.True(t, done, "the refresh started: %+v", w.Rollout(ctx, g.Name))
		markedAt = w.Account.Clock().Now()
		require.True(t, w.Account.MarkInstanceUnhealthy(oldID), "an old node's health check fails")
		done, err = w.RunUntil(ctx, tick, 10*time.Minute, cordoned)
		require.NoError(t, err)
		require.True(t, done, "the agent drains the node Auto Scaling terminates")
	}
	start := w.Account.Clock().Now()
	uncordonedWhileLeaving := ""
	var uncordonedFor time.Duration
	_, err = w.RunUntil(ctx, tick, 90*time.Minute, func() bool {
		i, ok := w.Account.Instance(oldID)
		if ok && i.LifecycleState == "Terminating:Wait" {
			obs, err := w.Kube.Observe(ctx)
			require.NoError(t, err)
			if n, ok := obs[oldID]; ok && !n.Cordoned {
				if uncordonedWhileLeaving == "" {
					uncordonedWhileLeaving = "+" + w.Account.Clock().Now().Sub(start).String()
				}
				uncordonedFor += tick
			}
		}
		return false
	})
	t.Logf("uncordoned in Terminating:Wait for about %s", uncordonedFor)
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	t.Logf("rollout %s: %s", r.Phase, r.Reason)
	for _, tm := range w.Account.Terminations() {
		t.Logf("termination %s cause %s at +%s proceeded at +%s", tm.InstanceID, tm.Cause, tm.RequestedAt.Sub(start), tm.ProceededAt.Sub(start))
	}
	for _, c := range w.Account.DesiredChanges(g.Name) {
		t.Logf("desired %d -> %d by %s at %s", c.From, c.To, c.By, c.At.Format(time.TimeOnly))
	}
	t.Logf("old node uncordoned while in Terminating:Wait at %q", uncordonedWhileLeaving)
	for _, v := range w.Checker.Finish() {
		t.Logf("violation: %v", v)
	}
	require.Empty(t, uncordonedWhileLeaving, "a node in Terminating:Wait is never put back in service")
	require.NotContains(t, r.Reason, oldID, "the rollout let the leaving node go; it neither halted nor undrained on it")
	proceeded := false
	for _, tm := range w.Account.Terminations() {
		if tm.InstanceID == oldID && !tm.ProceededAt.IsZero() {
			proceeded = true
			require.GreaterOrEqual(t, tm.ProceededAt.Sub(tm.RequestedAt), 30*time.Minute, "drained until its deadline")
			require.LessOrEqual(t, tm.ProceededAt.Sub(tm.RequestedAt), 30*time.Minute+2*tick, "let go at its drain deadline")
		}
	}
	require.True(t, proceeded, "the leaving node's terminating lifecycle action proceeded")
	// A node whose health check fails stops serving at once, by Auto Scaling's decision: the group serves short
	// from then until its replacement serves. Nothing else breaks.
	for _, v := range w.Checker.Finish() {
		require.True(t, !byRefresh && v.Invariant == 1 && v.At.Sub(markedAt) >= 0 && v.At.Sub(markedAt) <= tick,
			"only the failed health check's own shortfall: %s", v)
	}
}
