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

// The old node of a rollout drain that a PodDisruptionBudget blocks leaves on its own while the drain waits
// (its health check fails: Auto Scaling terminates it through the terminating hook, which the agent drains as
// well). Past the rollout's drain deadline the rollout waits for it to go (keeping its drain's slot), never
// uncordons a node in Terminating:Wait, and once it is gone carries the surge over to the next outdated node
// (retireLeft); its lifecycle action proceeds. Uncordoning it at the rollout's deadline would halt the rollout
// on it. The next node's drain meets the same budget and halts at its own deadline, which is the budget doing
// its job.
func TestEKSDrainOfANodeThatStartsTerminatingLetsItGoAndNeverUncordonsIt(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "nodes", Platform: lifecycle.PlatformEKS, Cluster: "e1", Parameter: lifecycle.ParameterAuto,
		Min: 3, Max: 6, Desired: 3}
	w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g},
		KubeWorkload: demo.KubeWorkload{Replicas: 6, MinAvailable: 6, DaemonSet: true}})
	settle(t, w.World, 10*time.Second)
	w.PublishPublicAMI(w.EKSParameter(g.Name), demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		c := w.Rollout(ctx, g.Name).Current
		return c != nil && c.Step == state.StepDraining && !c.DrainStartedAt.IsZero()
	})
	require.NoError(t, err)
	require.True(t, done)
	oldID := w.Rollout(ctx, g.Name).Current.OldInstanceID
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
