package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// capacityProviderGroup is a group of desired 3 (max 6) that is the capacity provider cp of its cluster.
func capacityProviderGroup(cp sim.CapacityProviderSpec) (testworld.GroupSetup, testworld.Spec) {
	g := testworld.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: &cp}
	return g, oneGroup(&g)
}

// Field case C16 (../shared/CASES.md): a capacity provider with managed scaling and managed termination
// protection rolls by instance refresh while managed scaling moves desired capacity under it (up while an old
// instance drains, then down a while later). Every invariant holds, the workloads keep their tasks, MaxSize is
// untouched, no old instance is left behind, and the agent writes no capacity and no scale-in protection
// (requireNoCapacityWrites: no SetInstanceProtection call).
func TestC16CapacityProviderDesiredMovesUnderTheAgentAndEveryInvariantHolds(t *testing.T) {
	g, spec := capacityProviderGroup(sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true})
	w := build(t, spec)
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	w.PublishAMI(g.Parameter, testworld.ImageB)

	movedUp, movedDown := false, false
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		grp := w.Account.Group(g.Name)
		draining := false
		for _, i := range grp.Instances {
			draining = draining || (i.ImageID == testworld.ImageA && i.ContainerInstanceStatus == "DRAINING")
		}
		switch {
		case !movedUp && draining:
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, grp.Desired+1))
			movedUp = true
		case movedUp && !movedDown && r.OnTarget >= 2:
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, max(grp.Desired-1, grp.Min)))
			movedDown = true
		}
		return r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rollout: %+v", w.Rollout(ctx, g.Name))
	require.True(t, movedUp && movedDown)
	settle(t, w, 20*time.Minute)

	r := w.Rollout(ctx, g.Name)
	require.Equal(t, model.StrategyRefresh, r.Strategy, "a group ECS scales rolls by instance refresh too")
	require.Empty(t, w.Checker.Finish(), "workloads kept their tasks running throughout")
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(6), grp.Max, "max untouched")
	for _, i := range grp.Instances {
		if i.LifecycleState == "InService" {
			require.Equal(t, testworld.ImageB, i.ImageID, "no old instance left behind")
		}
	}
	requireNoCapacityWrites(t, w, g.Name)
	require.Equal(t, 6, w.Account.ServiceTasks(g.Cluster, "web"))
}

// Field case C17 (../shared/CASES.md): ECS's managed draining hook is the group's drain. An EventBridge rule
// on lifecycle actions also delivers ECS's own hook, which the agent leaves alone; the agent never sets
// DRAINING and never completes ECS's hook, its own terminating hook is completed only once ECS drained the
// instance, once per replaced instance, and the refresh writes no desired capacity.
func TestC17ECSManagedDrainingIsLeftToECSAndOnlyTheAgentsOwnHookIsCompleted(t *testing.T) {
	g, spec := capacityProviderGroup(sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true,
		ManagedTerminationProtection: true, ManagedDraining: true})
	w := build(t, spec)
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	var olds []string
	for _, i := range w.Account.Group(g.Name).Instances {
		olds = append(olds, i.ID)
	}
	inst := olds[0]
	w.Account.SendMessage(w.QueueURL, fixture(t, "eventbridge-lifecycle-terminate.json", "eks-workers-a", g.Name,
		"patch-agent-drain", model.ECSManagedDrainingHookName, "i-0c5e2a7b9d1f34e86", inst))
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, done, "rollout: %+v", r)
	require.Equal(t, model.StrategyRefresh, r.Strategy)
	settle(t, w, 20*time.Minute)

	require.Zero(t, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "never DRAINING on top of ECS's drain")
	own, ownOf := map[string]int{}, map[string]bool{}
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Caller != sim.CallerAPI {
			continue
		}
		require.NotEqual(t, model.ECSManagedDrainingHookName, c.Hook, "the agent completed ECS's hook")
		if c.Accepted && c.Transition == sim.TransitionTerminating {
			own[c.Token]++
			ownOf[c.InstanceID] = true
			require.True(t, c.Drained, "own hook completed before ECS finished draining %s", c.InstanceID)
		}
	}
	for _, id := range olds {
		require.True(t, ownOf[id], "the agent's own terminating hook completed for the replaced instance %s", id)
	}
	for token, n := range own {
		require.Equal(t, 1, n, "own hook %s completed once", token)
	}
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
	requireAllOn(t, w, g.Name, testworld.ImageB, len(w.Account.Group(g.Name).Instances)-countLeaving(w, g.Name))
}

// A cluster with a capacity provider group and a plain group on one parameter: both roll by instance refresh,
// side by side, with their MaxSize untouched and no capacity written by the agent.
func TestClusterWithCapacityProviderAndPlainGroupsRollsBothByRefresh(t *testing.T) {
	cp := sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true}
	managed := testworld.GroupSetup{Name: "managed", Cluster: "shared", Parameter: "/golden/shared", Min: 1, Max: 6, Desired: 2, CapacityProvider: &cp}
	plain := testworld.GroupSetup{Name: "plain", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 4, Desired: 2}
	w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{managed, plain}, Services: map[string]int{"web": 4}})
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	w.PublishAMI("/golden/shared", testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		return w.Rollout(ctx, "managed").Phase == state.PhaseCompleted && w.Rollout(ctx, "plain").Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, model.StrategyRefresh, w.Rollout(ctx, "managed").Strategy)
	require.Equal(t, model.StrategyRefresh, w.Rollout(ctx, "plain").Strategy)
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "one refresh per group")
	require.Empty(t, w.Checker.Finish())
	require.Equal(t, int32(4), w.Account.Group("plain").Max)
	require.Equal(t, int32(6), w.Account.Group("managed").Max)
	requireNoCapacityWrites(t, w, "managed")
	requireNoCapacityWrites(t, w, "plain")
}
