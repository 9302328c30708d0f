package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
)

// The drain of an old node that the refresh terminates through the agent's terminating hook, blocked by a
// PodDisruptionBudget (minAvailable = replicas), while the node's health check fails as well. The node waits
// in Terminating:Wait and is never uncordoned there (a node leaving the group is never put back in service),
// the rollout neither halts nor undrains on it, and its lifecycle action proceeds.
func TestEKSDrainOfANodeThatStartsTerminatingLetsItGoAndNeverUncordonsIt(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "nodes", Platform: lifecycle.PlatformEKS, Cluster: "e1", Parameter: lifecycle.ParameterAuto,
		Min: 3, Max: 6, Desired: 3}
	w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g},
		KubeWorkload: demo.KubeWorkload{Replicas: 6, MinAvailable: 6, DaemonSet: true}})
	settle(t, w.World, 10*time.Second)
	w.PublishPublicAMI(w.EKSParameter(g.Name), demo.ImageB)
	oldID := ""
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		obs, err := w.Kube.Observe(ctx)
		require.NoError(t, err)
		for _, i := range w.Account.Group(g.Name).Instances {
			if n, ok := obs[i.ID]; ok && n.Cordoned && i.ImageID == demo.ImageA {
				oldID = i.ID
			}
		}
		return oldID != ""
	})
	require.NoError(t, err)
	require.True(t, done, "an old node's drain started: %+v", w.Rollout(ctx, g.Name))
	settle(t, w.World, 10*time.Minute)
	require.True(t, w.Account.MarkInstanceUnhealthy(oldID), "the draining node's health check fails")
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
		proceeded = proceeded || tm.InstanceID == oldID && !tm.ProceededAt.IsZero()
	}
	require.True(t, proceeded, "the leaving node's terminating lifecycle action proceeded")
	require.Empty(t, w.Checker.Finish())
}
