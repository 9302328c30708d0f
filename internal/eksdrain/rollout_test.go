package eksdrain_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// The rollout tests run the real agent (orchestrator, platform, drainer) against the simulated account for
// Auto Scaling and EC2, and a real kube-apiserver for the nodes: kubesim.KubeSim registers a node for every
// running instance, recreates Deployment pods, finishes pods being deleted and writes the
// PodDisruptionBudget's status, as kubelet and controllers would. The API server itself answers the
// evictions.

const (
	group     = "eks-nodes"
	goldenAMI = "/golden-ami/eks/nodes"
	tick      = 5 * time.Second
)

// rolloutWorld builds a world with one EKS group of desired nodes on the shared API server, running
// workload in the test's namespace.
func rolloutWorld(t *testing.T, desired int32, workload kubesim.KubeWorkload) (*testworld.World, *kube) {
	t.Helper()
	return observedRolloutWorld(t, desired, workload, nil)
}

// observedRolloutWorld is rolloutWorld whose agent reports to observer (nil: none).
func observedRolloutWorld(t *testing.T, desired int32, workload kubesim.KubeWorkload, observer model.Observer) (*testworld.World, *kube) {
	t.Helper()
	k := newKube(t, nil)
	workload.Namespace = k.ns
	policy := model.Policy{HealthTimeout: 10 * time.Minute, DrainTimeout: 10 * time.Minute, RollbackOnFailure: true}
	w, err := testworld.Build(testworld.Spec{
		Sim:    sim.Options{Seed: rand.Uint64()}, // instance ids (and so node names) unique on the shared API server
		Policy: policy,
		Groups: []testworld.GroupSetup{{Name: group, Platform: model.PlatformEKS, Cluster: "c9", Parameter: goldenAMI,
			InstanceType: "m5.large", Min: desired, Max: desired + 1, Desired: desired}},
		Kube:         k.cs,
		KubeWorkload: workload,
		Observer:     observer,
	})
	require.NoError(t, err)
	k.evict.now = w.Account.Clock().Now
	return w, k
}

// Field case C9 (../shared/CASES.md).
func TestC9PodDisruptionBudgetMinAvailableEqualsReplicasHaltsAtTheDrainDeadlineAndTheOldNodeKeepsServing(t *testing.T) {
	// C9: the node's only pods belong to a Deployment whose PodDisruptionBudget has minAvailable == replicas.
	// Evictions get 429 and are retried with backoff; at the drain deadline the drain is held: the rollout halts
	// without a rollback, the old node is uncordoned and keeps serving (its instance stays in Terminating:Wait,
	// heartbeated, never completed), a DrainDeadline alert is raised, and nothing loops.
	reg := metrics.NewRegistry(nil)
	w, k := observedRolloutWorld(t, 1, kubesim.KubeWorkload{Replicas: 2, MinAvailable: 2, DaemonSet: true}, reg)
	reg.Clock = w.Account.Clock()
	ctx := context.Background()
	oldID := w.Account.Group(group).Instances[0].ID
	nodes, err := w.Kube.Observe(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, nodes[oldID].Evictable, "both Deployment pods on the only node")

	w.PublishAMI(goldenAMI, testworld.ImageB)
	var drainStarted time.Time
	halted, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		if inst, ok := w.Account.Instance(oldID); ok && drainStarted.IsZero() && inst.LifecycleState == "Terminating:Wait" {
			drainStarted = w.Account.Clock().Now()
		}
		return w.Rollout(ctx, group).Phase == state.PhaseHalted
	})
	require.NoError(t, err)
	require.True(t, halted, "rollout: %+v", w.Rollout(ctx, group))
	r := w.Rollout(ctx, group)
	require.Contains(t, r.Reason, "failed: drain of "+oldID)
	require.Contains(t, r.Reason, "drain did not finish within 10m0s")
	require.Contains(t, r.Reason, "refused by a PodDisruptionBudget (429")
	require.Contains(t, r.Reason, oldID+" is back in service but stays in Terminating:Wait")
	require.Contains(t, r.Reason, "global timeout")
	require.Contains(t, r.Reason, "`patch-agent retry "+group+"`")
	require.Contains(t, r.Reason, "`patch-agent rollback "+group+"`")
	require.WithinDuration(t, drainStarted.Add(10*time.Minute), w.Account.Clock().Now(), 4*tick, "halted at the drain deadline")
	require.Equal(t, 1.0, alerts(reg, model.AlertDrainDeadline), "the held drain is an alert")

	// Retried with backoff (5 s, 10 s, 20 s ... 2 min per pod), not on every tick.
	evictions := k.evict.Count()
	ticksDraining := int(10 * time.Minute / tick)
	require.GreaterOrEqual(t, evictions, 2*5, "each pod retried several times")
	require.LessOrEqual(t, evictions, 2*12, "backoff, not one eviction per pod per tick (%d ticks)", ticksDraining)
	times := k.evict.Times()
	require.Greater(t, times[len(times)-1].Sub(times[len(times)-3]), times[3].Sub(times[1]), "the gaps grow")

	// The old node serves again with its pods; nothing was terminated, nothing rolled back.
	requireOldNodeServing(t, w, oldID)
	require.Zero(t, w.Account.Calls()["autoscaling:TerminateInstanceInAutoScalingGroup"])
	require.Zero(t, w.Account.Calls()["autoscaling:RollbackInstanceRefresh"], "a held drain halts without a rollback")

	// Never an endless loop: halted stays halted, no more evictions, the node stays schedulable, the action
	// stays waiting (heartbeated, not completed) and the alert is not repeated.
	for range 180 { // 15 more minutes
		require.NoError(t, w.Step(ctx, tick))
	}
	require.Equal(t, state.PhaseHalted, w.Rollout(ctx, group).Phase)
	require.Equal(t, evictions, k.evict.Count(), "no eviction after the halt")
	requireOldNodeServing(t, w, oldID)
	require.Equal(t, 1.0, alerts(reg, model.AlertDrainDeadline))
	require.Empty(t, w.Checker.Finish())
	require.GreaterOrEqual(t, w.Checker.MinServing[group], 1)
}

// alerts returns the Alerts counter of the group and kind (0 when never counted).
func alerts(reg *metrics.Registry, kind string) float64 {
	for _, s := range reg.Collect() {
		if s.Name == metrics.Alerts && s.Group == group && s.Reason == kind {
			return s.Value
		}
	}
	return 0
}

// requireOldNodeServing checks that the old node is Ready, uncordoned and runs its pods, and that its
// instance waits in Terminating:Wait (held: it cannot return to InService).
func requireOldNodeServing(t *testing.T, w *testworld.World, oldID string) {
	t.Helper()
	ctx := context.Background()
	nodes, err := w.Kube.Observe(ctx)
	require.NoError(t, err)
	old := nodes[oldID]
	require.True(t, old.Ready)
	require.False(t, old.Cordoned, "uncordoned at the deadline")
	require.Equal(t, 2, old.Evictable, "its pods stay")
	ready, err := w.Kube.ReadyPods(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, ready)
	inst, ok := w.Account.Instance(oldID)
	require.True(t, ok)
	require.Equal(t, "Terminating:Wait", inst.LifecycleState, "held on the terminating hook, not terminated")
}

func TestReplacementWhoseNodeNeverBecomesReadyIsNotHealthyAndTheRolloutRollsBack(t *testing.T) {
	w, k := rolloutWorld(t, 2, kubesim.KubeWorkload{Replicas: 2, MinAvailable: 1, DaemonSet: true})
	ctx := context.Background()
	w.Account.MarkImageUnhealthy(testworld.ImageB) // its kubelet registers the node, which never turns Ready
	w.PublishAMI(goldenAMI, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, group).Phase == state.PhaseRolledBack })
	require.NoError(t, err)
	r := w.Rollout(ctx, group)
	require.True(t, done, "rollout: %+v", r)
	require.Regexp(t, `launch of i-[0-9a-f]+ ABANDONed by lifecycle hook patch-agent-launch \(not healthy in cluster after 10m0s\)`, r.Reason)
	require.Zero(t, k.evict.Count(), "no old node was drained")
	nodes, err := w.Kube.Observe(ctx)
	require.NoError(t, err)
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState != "InService" {
			continue
		}
		require.Equal(t, testworld.ImageA, i.ImageID)
		require.True(t, nodes[i.ID].Ready && !nodes[i.ID].Cordoned, "old node %s serving", i.ID)
	}
	require.Empty(t, w.Checker.Finish())
}

func TestEKSRolloutCompletesAgainstARealAPIServer(t *testing.T) {
	w, k := rolloutWorld(t, 2, kubesim.KubeWorkload{Replicas: 4, MinAvailable: 3, DaemonSet: true})
	ctx := context.Background()
	w.PublishAMI(goldenAMI, testworld.ImageB)
	minReady := 4
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		n, err := w.Kube.ReadyPods(ctx)
		require.NoError(t, err)
		minReady = min(minReady, n)
		return w.Rollout(ctx, group).Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rollout: %+v", w.Rollout(ctx, group))
	require.GreaterOrEqual(t, minReady, 3, "PodDisruptionBudget minAvailable 3 held by the API server")
	require.GreaterOrEqual(t, k.evict.Count(), 4, "every Deployment pod of the two old nodes evicted")
	require.Empty(t, w.Checker.Finish())
	require.GreaterOrEqual(t, w.Checker.MinServing[group], 2)
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState == "InService" {
			require.Equal(t, testworld.ImageB, i.ImageID)
		}
	}
}
