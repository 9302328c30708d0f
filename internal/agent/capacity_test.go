package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// protectionWatch records, for every SetInstanceProtection call the agent makes, whether each instance was
// drained at that moment.
type protectionWatch struct {
	awsapi.AutoScaling
	account *sim.Account
	mu      sync.Mutex
	calls   []protectionCall
}

type protectionCall struct {
	instance  string
	protected bool
	drained   bool
}

func (p *protectionWatch) SetInstanceProtection(ctx context.Context, in *autoscaling.SetInstanceProtectionInput, o ...func(*autoscaling.Options)) (*autoscaling.SetInstanceProtectionOutput, error) {
	p.mu.Lock()
	for _, id := range in.InstanceIds {
		i, _ := p.account.Instance(id)
		stopped := i.TasksByLastStatus["STOPPED"]
		total := 0
		for _, n := range i.TasksByLastStatus {
			total += n
		}
		p.calls = append(p.calls, protectionCall{instance: id, protected: *in.ProtectedFromScaleIn,
			drained: i.ContainerInstanceStatus == "DRAINING" && total == stopped})
	}
	p.mu.Unlock()
	return p.AutoScaling.SetInstanceProtection(ctx, in, o...)
}

func capacityProviderGroup(cp sim.CapacityProviderSpec) (demo.GroupSetup, demo.Spec, *protectionWatch) {
	g := demo.GroupSetup{Name: "cp-asg", Min: 1, Max: 6, Desired: 3, CapacityProvider: &cp}
	spec := oneGroup(&g)
	watch := &protectionWatch{}
	spec.Wrap = func(c agent.Clients) agent.Clients {
		watch.AutoScaling = c.AutoScaling
		c.AutoScaling = watch
		return c
	}
	return g, spec, watch
}

// Field case C16 (../shared/CASES.md).
func TestC16CapacityProviderDesiredMovesUnderTheAgentAndEveryInvariantHolds(t *testing.T) {
	g, spec, watch := capacityProviderGroup(sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true})
	w := build(t, spec)
	watch.account = w.Account
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	w.PublishAMI(g.Parameter, demo.ImageB)

	// Managed scaling moves desired capacity mid-rollout: up while the first old instance drains, then
	// back down a while later.
	movedUp, movedDown := false, false
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		grp := w.Account.Group(g.Name)
		switch {
		case !movedUp && r.Current != nil && r.Current.Step == state.StepDraining:
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, grp.Desired+1))
			movedUp = true
		case movedUp && !movedDown && len(r.Replaced) == 2:
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
	require.Equal(t, lifecycle.StrategyCapacityProvider, r.Strategy, "chosen automatically for a group ECS scales")
	require.Empty(t, w.Checker.Finish(), "workloads kept their tasks running throughout")
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(6), grp.Max, "max untouched")
	for _, i := range grp.Instances {
		if i.LifecycleState == "InService" {
			require.Equal(t, demo.ImageB, i.ImageID, "no old instance left behind")
		}
	}
	calls := w.Account.Calls()
	// Drain-first writes no desired capacity and would end this layout with one instance; the capacity-provider
	// strategy surges once per replacement (and the checker holds the group's size and spread). ECS may scale
	// an empty replacement in while the test's own desired capacity changes hold the drain: the rollout then
	// surges again (never counting the lost replacement as capacity it may take away).
	require.GreaterOrEqual(t, calls["autoscaling:SetDesiredCapacity"], 3, "a surge per replacement\n%s", trace(w, g.Name))
	require.Zero(t, calls["autoscaling:UpdateAutoScalingGroup"]-1, "only the launch template reference changed")
	require.NotEmpty(t, watch.calls)
	for _, c := range watch.calls {
		require.False(t, c.protected, "the agent only removes protection")
		require.True(t, c.drained, "protection removed from %s before it was drained", c.instance)
	}
	require.Equal(t, 6, w.Account.ServiceTasks(g.Cluster, "web"))
}

// Field case C17 (../shared/CASES.md).
func TestC17ECSManagedDrainingIsLeftToECSAndOnlyTheAgentsOwnHookIsCompleted(t *testing.T) {
	g, spec, _ := capacityProviderGroup(sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true,
		ManagedTerminationProtection: true, ManagedDraining: true})
	w := build(t, spec)
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	// An EventBridge rule on lifecycle actions also delivers ECS's own hook: the agent must leave it alone.
	inst := w.Account.Group(g.Name).Instances[0].ID
	w.Account.SendMessage(w.QueueURL, fixture(t, "eventbridge-lifecycle-terminate.json", "eks-workers-a", g.Name,
		"patch-agent-drain", lifecycle.ECSManagedDrainingHookName, "i-0c5e2a7b9d1f34e86", inst))
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "rollout: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 10*time.Minute)

	require.True(t, w.Rollout(ctx, g.Name).ECSManagedDraining)
	require.Zero(t, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "never DRAINING on top of ECS's drain")
	own := map[string]int{}
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Caller != sim.CallerAPI {
			continue
		}
		require.NotEqual(t, lifecycle.ECSManagedDrainingHookName, c.Hook, "the agent completed ECS's hook")
		if c.Accepted {
			own[c.Token]++
			require.True(t, c.Drained, "own hook completed before ECS finished draining %s", c.InstanceID)
		}
	}
	require.Len(t, own, 3, "the agent's own hook completed for each retired instance")
	for token, n := range own {
		require.Equal(t, 1, n, "own hook %s completed once", token)
	}
	require.Empty(t, w.Checker.Finish())
	requireAllOn(t, w, g.Name, demo.ImageB, len(w.Account.Group(g.Name).Instances)-countLeaving(w, g.Name))
}

func countLeaving(w *demo.World, group string) int {
	n := 0
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState != "InService" {
			n++
		}
	}
	return n
}

func TestClusterWithCapacityProviderAndPlainGroupsRollsEachItsWay(t *testing.T) {
	cp := sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true}
	managed := demo.GroupSetup{Name: "managed", Cluster: "shared", Parameter: "/golden/shared", Min: 1, Max: 6, Desired: 2, CapacityProvider: &cp}
	plain := demo.GroupSetup{Name: "plain", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 4, Desired: 2}
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{managed, plain}, Services: map[string]int{"web": 4}})
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	w.PublishAMI("/golden/shared", demo.ImageB)
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		return w.Rollout(ctx, "managed").Phase == state.PhaseCompleted && w.Rollout(ctx, "plain").Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, lifecycle.StrategyCapacityProvider, w.Rollout(ctx, "managed").Strategy)
	require.Equal(t, lifecycle.StrategySurge, w.Rollout(ctx, "plain").Strategy)
	require.Empty(t, w.Checker.Finish())
	require.Equal(t, int32(4), w.Account.Group("plain").Max)
	require.Equal(t, int32(6), w.Account.Group("managed").Max)
}

// Field case C17 on a group tagged patch-agent/strategy=refresh: ECS's managed draining hook is the group's
// drain (the refresh needs no terminating hook of the agent's beside it), the agent never sets DRAINING and
// never completes ECS's hook, its own terminating hook is completed only once ECS drained the instance, and the
// refresh writes no desired capacity.
func TestC17ECSManagedDrainingUnderAnInstanceRefreshIsLeftToECS(t *testing.T) {
	g, spec, _ := capacityProviderGroup(sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true,
		ManagedTerminationProtection: true, ManagedDraining: true})
	spec.Groups[0].Tags = map[string]string{lifecycle.TagStrategy: lifecycle.StrategyRefresh}
	w := build(t, spec)
	ctx := context.Background()
	settle(t, w, 2*time.Minute)
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, done, "rollout: %+v", r)
	require.Equal(t, lifecycle.StrategyRefresh, r.Strategy)
	settle(t, w, 20*time.Minute)
	require.Zero(t, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "never DRAINING on top of ECS's drain")
	own := 0
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Caller != sim.CallerAPI {
			continue
		}
		require.NotEqual(t, lifecycle.ECSManagedDrainingHookName, c.Hook, "the agent completed ECS's hook")
		if c.Accepted && c.Transition == sim.TransitionTerminating {
			own++
			require.True(t, c.Drained, "own hook completed before ECS finished draining %s", c.InstanceID)
		}
	}
	require.GreaterOrEqual(t, own, 3, "the agent's own terminating hook completed for each replaced instance")
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
	requireAllOn(t, w, g.Name, demo.ImageB, len(w.Account.Group(g.Name).Instances)-countLeaving(w, g.Name))
}
