package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// launchHook is the launching lifecycle hook the C18 groups carry, to the agent's queue.
const launchHook = "patch-agent-launch"

// poolWatch wraps the agent's Auto Scaling client: at every CompleteLifecycleAction it records what the
// instance looked like.
type poolWatch struct {
	awsapi.AutoScaling
	acct **sim.Account

	mu         sync.Mutex
	atComplete map[string]sim.InstanceView // by lifecycle action token
}

func (p *poolWatch) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	v, _ := (*p.acct).Instance(aws.ToString(in.InstanceId))
	out, err := p.AutoScaling.CompleteLifecycleAction(ctx, in, o...)
	// The agent names the action by instance and hook, not by token: the account's record of the call has the
	// token of the action it completed.
	if cs := (*p.acct).LifecycleCompletions(); len(cs) > 0 {
		p.mu.Lock()
		p.atComplete[cs[len(cs)-1].Token] = v
		p.mu.Unlock()
	}
	return out, err
}

func (p *poolWatch) completedAs(token string) (sim.InstanceView, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.atComplete[token]
	return v, ok
}

// buildPool builds one ECS group g (2 tasks per instance) with the agent's terminating hook and a launching
// hook to the agent's queue, then gives it a warm pool, and lets the agent see it once.
func buildPool(t *testing.T, g *testworld.GroupSetup, pool sim.WarmPoolSpec) (*testworld.World, *poolWatch) {
	t.Helper()
	return buildPoolHooks(t, g, pool, true)
}

// buildPoolHooks is buildPool, with the launching hook only when launching.
func buildPoolHooks(t *testing.T, g *testworld.GroupSetup, pool sim.WarmPoolSpec, launching bool) (*testworld.World, *poolWatch) {
	t.Helper()
	var acct *sim.Account
	watch := &poolWatch{acct: &acct, atComplete: map[string]sim.InstanceView{}}
	spec := oneGroup(g)
	spec.Wrap = func(c agent.Clients) agent.Clients {
		watch.AutoScaling = c.AutoScaling
		c.AutoScaling = watch
		return c
	}
	w := build(t, spec)
	acct = w.Account
	if launching {
		require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: launchHook, Transition: sim.TransitionLaunching,
			HeartbeatTimeout: 300 * time.Second, DefaultResult: sim.ResultAbandon, QueueURL: w.QueueURL}))
	}
	require.NoError(t, w.Account.PutWarmPool(g.Name, pool))
	settle(t, w, 10*time.Second)
	return w, watch
}

// completionsOf returns the accepted CompleteLifecycleAction calls (the agent's) for an instance.
func completionsOf(w *testworld.World, instance string) []sim.Completion {
	var out []sim.Completion
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Accepted && c.Caller == sim.CallerAPI && c.InstanceID == instance {
			out = append(out, c)
		}
	}
	return out
}

func requireNoAbandon(t *testing.T, w *testworld.World) {
	t.Helper()
	for _, c := range w.Account.LifecycleCompletions() {
		require.NotEqual(t, sim.ResultAbandon, c.Result, "lifecycle action of %s abandoned", c.InstanceID)
	}
	for token, cs := range acceptedCompletions(w) {
		require.Len(t, cs, 1, "lifecycle action %s completed once", token)
	}
}

func poolOf(w *testworld.World, group string) map[string]sim.InstanceView {
	out := map[string]sim.InstanceView{}
	for _, i := range w.Account.WarmPool(group) {
		out[i.ID] = i
	}
	return out
}

// Field case C18 (../shared/CASES.md): a launch into the warm pool (Destination WarmPool) is completed with
// CONTINUE at once: the instance stops in the pool and never joins the cluster, so waiting for its health
// would abandon it at the health deadline and the pool would never fill.
func TestC18LaunchIntoWarmPoolIsCompletedWithoutWaitingForHealth(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 2}
	w, watch := buildPool(t, &g, sim.WarmPoolSpec{MinSize: 1, MaxGroupPreparedCapacity: aws.Int32(2)})
	before := poolOf(w, g.Name)
	require.Len(t, before, 1)
	// A scale out draws the warmed instance into the group; the pool launches a new instance to keep MinSize.
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
	var warming string
	for id := range poolOf(w, g.Name) {
		warming = id
	}
	require.NotEmpty(t, warming)
	require.NotContains(t, before, warming)
	launchedAt, _ := w.Account.Instance(warming)

	done, err := w.RunUntil(context.Background(), tick, 30*time.Minute, func() bool { return len(completionsOf(w, warming)) > 0 })
	require.NoError(t, err)
	require.True(t, done)
	c := completionsOf(w, warming)[0]
	require.Equal(t, sim.ResultContinue, c.Result)
	require.LessOrEqual(t, c.At.Sub(launchedAt.LaunchTime), w.Account.Options().BootDelay+2*tick,
		"completed within a look of Warmed:Pending:Wait, not at the health deadline")
	at, _ := watch.completedAs(c.Token)
	require.Equal(t, "Warmed:Pending:Wait", at.LifecycleState)
	require.Empty(t, at.ContainerInstanceStatus, "it never joined the cluster")

	settle(t, w, 20*time.Minute) // past the health deadline
	require.Equal(t, "Warmed:Stopped", poolOf(w, g.Name)[warming].LifecycleState, "it stays in the pool")
	requireNoAbandon(t, w)
	drawn := before[func() string {
		for id := range before {
			return id
		}
		return ""
	}()].ID
	served, _ := w.Account.Instance(drawn)
	require.Equal(t, "InService", served.LifecycleState, "the instance drawn from the pool waited for health and serves")
	require.Equal(t, "ACTIVE", served.ContainerInstanceStatus)
	require.Len(t, completionsOf(w, drawn), 1)
	h, err := w.Store.GetHook(context.Background(), model.ActionKey(c.Group, c.InstanceID, c.Hook))
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, h.State)
	require.Contains(t, h.Note, "warm pool")
	require.Empty(t, w.Checker.Violations)
}

// scaleInToPool scales the group in by one with ReuseOnScaleIn and runs until the instance that goes back to
// the pool settles there. It returns that instance.
func scaleInToPool(t *testing.T, w *testworld.World, group string, desired int32) string {
	t.Helper()
	back := startScaleInToPool(t, w, group, desired)
	done, err := w.RunUntil(context.Background(), tick, 30*time.Minute, func() bool {
		return poolOf(w, group)[back].LifecycleState == "Warmed:Stopped"
	})
	require.NoError(t, err)
	require.True(t, done, "back in the pool")
	return back
}

// Field case C18: a scale in back to the warm pool (Origin AutoScalingGroup, Destination WarmPool) is
// confirmed in Warmed:Pending:Wait, drained, and only then continued; the instance is kept, stopped, in the
// pool, and the agent keeps its drain mark.
func TestC18ScaleInBackToThePoolIsDrainedThenContinued(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3}
	w, watch := buildPool(t, &g, sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)})
	require.Empty(t, poolOf(w, g.Name))
	back := scaleInToPool(t, w, g.Name, 2)

	cs := completionsOf(w, back)
	require.Len(t, cs, 1)
	require.Equal(t, sim.TransitionTerminating, cs[0].Transition)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.True(t, cs[0].Drained, "drained before CONTINUE")
	at, _ := watch.completedAs(cs[0].Token)
	require.Equal(t, "DRAINING", at.ContainerInstanceStatus)
	require.Zero(t, at.TasksByLastStatus["RUNNING"], "no task left running on it at CONTINUE")
	for _, term := range w.Account.Terminations() {
		require.NotEqual(t, back, term.InstanceID, "returned to the pool, not terminated")
	}
	settle(t, w, 5*time.Minute)
	marks, err := w.Store.ListDrainMarks(context.Background())
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(marks, func(m state.DrainMark) bool { return m.InstanceID == back }),
		"the drain mark stays while the instance is in the pool")
	require.Equal(t, 6, w.Account.ServiceTasks("c1", "web"), "every task still runs, on the serving instances")
	require.Zero(t, w.Agent.Consumer.Stats.Failed.Load())
	requireNoAbandon(t, w)
	require.Empty(t, w.Checker.Violations)
}

// Field case C18: an instance the agent drained that comes back from the warm pool (Origin WarmPool,
// Destination AutoScalingGroup) reconnects with its DRAINING container instance: it is put back ACTIVE before
// its launch action is completed, and the action is completed once it is healthy.
func TestC18InstanceReturningFromThePoolIsBackInServiceBeforeItsLaunchCompletes(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3}
	w, watch := buildPool(t, &g, sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)})
	back := scaleInToPool(t, w, g.Name, 2)
	v, _ := w.Account.Instance(back)
	require.Equal(t, "DRAINING", v.ContainerInstanceStatus, "it went to the pool drained")

	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3)) // drawn back from the pool
	require.NotContains(t, poolOf(w, g.Name), back)
	done, err := w.RunUntil(context.Background(), tick, 30*time.Minute, func() bool { return len(completionsOf(w, back)) == 2 })
	require.NoError(t, err)
	require.True(t, done)
	launch := completionsOf(w, back)[1]
	require.Equal(t, sim.TransitionLaunching, launch.Transition)
	require.Equal(t, sim.ResultContinue, launch.Result)
	at, _ := watch.completedAs(launch.Token)
	require.Equal(t, "Pending:Wait", at.LifecycleState)
	require.Equal(t, "ACTIVE", at.ContainerInstanceStatus, "back in service before the launch action completed")
	require.True(t, at.AgentConnected, "and healthy")
	require.Equal(t, v.ContainerInstanceARN, at.ContainerInstanceARN, "the same container instance")

	w.Checker.Baseline[g.Name] = 3
	settle(t, w, 5*time.Minute)
	after, _ := w.Account.Instance(back)
	require.Equal(t, "InService", after.LifecycleState)
	require.Equal(t, "ACTIVE", after.ContainerInstanceStatus)
	marks, err := w.Store.ListDrainMarks(context.Background())
	require.NoError(t, err)
	require.Empty(t, marks, "the drain mark is gone once the instance serves again")
	requireNoAbandon(t, w)
	require.Equal(t, 6, w.Account.ServiceTasks("c1", "web"))
	require.Empty(t, w.Checker.Violations)
}

// Field case C18: a rollout of a group with a warm pool (ReuseOnScaleIn) completes only when neither the group
// nor the pool holds an old-AMI instance: the instance refresh replaces the pool's instances too, and the agent
// terminates none itself (no TerminateInstanceInAutoScalingGroup call). Serving capacity never drops below
// desired (the Checker, every step).
func TestC18RolloutLeavesNoOldAMIInstanceInTheGroupOrThePool(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 2, Max: 4, Desired: 2}
	w, _ := buildPool(t, &g, sim.WarmPoolSpec{MinSize: 1, ReuseOnScaleIn: true})
	oldPool := poolOf(w, g.Name)
	require.Len(t, oldPool, 2, "max 4 - desired 2")

	r := rollTo(t, w, g, testworld.ImageB)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	requireAllOn(t, w, g.Name, testworld.ImageB, 2)
	settle(t, w, 10*time.Minute) // the pool refills
	pool := poolOf(w, g.Name)
	require.Len(t, pool, 2)
	for id, i := range pool {
		require.Equal(t, testworld.ImageB, i.ImageID, "pool instance %s", id)
		require.Equal(t, "Warmed:Stopped", i.LifecycleState)
		require.NotContains(t, oldPool, id)
	}
	for id := range oldPool {
		v, _ := w.Account.Instance(id)
		require.Equal(t, "Warmed:Terminated", v.LifecycleState, "old pool instance %s", id)
	}
	require.GreaterOrEqual(t, w.Checker.MinServing[g.Name], 2, "serving capacity never below desired")
	require.Zero(t, w.Account.Calls()["autoscaling:TerminateInstanceInAutoScalingGroup"], "the agent terminates nothing itself")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	requireNoCapacityWrites(t, w, g.Name)
	requireNoAbandon(t, w)
	require.Empty(t, w.Checker.Violations)
}

// Field case C18, without a launching hook: the drained instance comes back from the pool InService, and the
// agent's per-tick recovery (its drain mark) puts it back ACTIVE.
func TestC18InstanceBackFromThePoolWithoutALaunchingHookIsPutBackActiveByRecovery(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3}
	w, _ := buildPoolHooks(t, &g, sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)}, false)
	back := scaleInToPool(t, w, g.Name, 2)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
	done, err := w.RunUntil(context.Background(), tick, 30*time.Minute, func() bool {
		v, _ := w.Account.Instance(back)
		return v.LifecycleState == "InService" && v.ContainerInstanceStatus == "ACTIVE" && v.AgentConnected
	})
	require.NoError(t, err)
	require.True(t, done, "back in service")
	marks, err := w.Store.ListDrainMarks(context.Background())
	require.NoError(t, err)
	require.Empty(t, marks)
	requireNoAbandon(t, w)
	require.Empty(t, w.Checker.Violations)
}

// Field case C18 under an instance refresh, where a scale out during the refresh draws old-AMI instances from
// the warm pool (sim.Options.RefreshDrawsOutdatedPoolInstances: the documentation does not say a refresh keeps
// them in the pool): each such instance is abandoned on the agent's launching hook, Auto Scaling launches
// another, and no instance on the old AMI enters service once the rollout started. The rollout completes with
// the group and its pool on the new AMI, writing no desired capacity.
func TestC18RefreshAbandonsOldAMIInstancesLeavingThePool(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 2, Max: 5, Desired: 2,
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
	spec := oneGroup(&g)
	spec.Sim.RefreshDrawsOutdatedPoolInstances = true
	w := build(t, spec)
	require.NoError(t, w.Account.PutWarmPool(g.Name, sim.WarmPoolSpec{MinSize: 2}))
	settle(t, w, 10*time.Minute)
	require.Len(t, poolOf(w, g.Name), 3, "max 5 - desired 2")
	serving := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		serving[i.ID] = true
	}
	entered := map[string]string{} // old-AMI instances that entered service after the rollout started
	started := false
	w.Account.OnChange(func(v *sim.View) {
		if !started {
			return
		}
		for _, i := range v.Group(g.Name).Instances {
			if i.LifecycleState == "InService" && i.ImageID != testworld.ImageB && !serving[i.ID] {
				entered[i.ID] = i.ImageID
			}
		}
	})
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Refresh != nil && r.Refresh.Status == providers.RefreshInProgress
	})
	require.NoError(t, err)
	require.True(t, done, "the refresh is under way: %+v", w.Rollout(ctx, g.Name))
	started = true
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 4), "another writer scales out: the pool is drawn on")
	done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, g.Name))
	settle(t, w, 15*time.Minute)
	require.Empty(t, entered, "old-AMI instances entered service from the pool")
	abandoned := 0
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Accepted && c.Caller == sim.CallerAPI && c.Result == sim.ResultAbandon {
			abandoned++
		}
	}
	require.Positive(t, abandoned, "the scale out drew old pool instances, and the agent abandoned them")
	requireAllOn(t, w, g.Name, testworld.ImageB, 4)
	for id, i := range poolOf(w, g.Name) {
		require.Equal(t, testworld.ImageB, i.ImageID, "pool instance %s", id)
	}
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase, "the abandons did not halt the refresh")
	require.Empty(t, w.Checker.Finish())
}
