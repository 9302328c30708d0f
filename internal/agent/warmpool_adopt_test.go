package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// buildLosingPool builds one ECS group g with a warm pool, the agent's terminating hook (g.HeartbeatTimeout)
// and a launching hook of 60 s (default result ABANDON), both to the agent's queue, behind a queue client
// that loses the first ReceiveMessage answer carrying a message once armed.
func buildLosingPool(t *testing.T, g *testworld.GroupSetup, pool sim.WarmPoolSpec) (*testworld.World, *losingSQS) {
	t.Helper()
	spec := oneGroup(g)
	losing := &losingSQS{}
	spec.Wrap = func(c agent.Clients) agent.Clients {
		losing.SQS = c.SQS
		c.SQS = losing
		return c
	}
	w := build(t, spec)
	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: launchHook, Transition: sim.TransitionLaunching,
		HeartbeatTimeout: 60 * time.Second, DefaultResult: sim.ResultAbandon, QueueURL: w.QueueURL}))
	require.NoError(t, w.Account.PutWarmPool(g.Name, pool))
	settle(t, w, 10*time.Second)
	return w, losing
}

// Field case C18 with a lost message, which the group's description alone does not show: a launch into the warm
// pool whose message's receive was lost waits in Warmed:Pending:Wait, which DescribeAutoScalingGroups does not
// show; the message comes back after the visibility timeout (2 minutes), after the hook's 60 s timeout, so Auto
// Scaling would abandon the launch (its default result) and the pool would churn. The reconcile loop reads
// DescribeWarmPool for the group (it has a WarmPoolConfiguration), confirms the action with
// DescribeAutoScalingInstances and completes it with CONTINUE by instance id in time.
func TestC18LostMessageOfALaunchIntoTheWarmPoolIsTakenUpFromDescribeWarmPool(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 2, HeartbeatTimeout: 60 * time.Second}
	w, losing := buildLosingPool(t, &g, sim.WarmPoolSpec{MinSize: 1, MaxGroupPreparedCapacity: aws.Int32(2)})
	before := poolOf(w, g.Name)
	require.Len(t, before, 1)
	losing.armed = true
	// A scale out draws the warmed instance into the group; the pool launches a new one to keep MinSize.
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
	var warming string
	for id := range poolOf(w, g.Name) {
		if _, ok := before[id]; !ok {
			warming = id
		}
	}
	require.NotEmpty(t, warming)

	done, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool {
		return poolOf(w, g.Name)[warming].LifecycleState == "Warmed:Stopped"
	})
	require.NoError(t, err)
	require.True(t, done, "the instance settles in the pool")
	require.Equal(t, 1, losing.lost, "a receive was lost")
	cs := completionsOf(w, warming)
	require.Len(t, cs, 1, "completed once, by the agent, not ended by its heartbeat timeout")
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	rec, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, warming, launchHook))
	require.NoError(t, err)
	require.True(t, rec.Adopted, "taken up by the reconcile loop")
	require.True(t, rec.Confirmed)
	require.Equal(t, "Warmed:Pending:Wait", rec.WaitState)
	for _, term := range w.Account.Terminations() {
		require.NotEqual(t, warming, term.InstanceID, "not abandoned out of the pool")
	}
	settle(t, w, 10*time.Minute) // the late message finds the record
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight)
	require.Len(t, completionsOf(w, warming), 1, "the late message completes nothing more")
	require.Empty(t, w.Checker.Finish())
}

// Field case C18 with a lost message: a settled pool instance that is terminated (here by a user's
// TerminateInstanceInAutoScalingGroup) waits in Warmed:Terminating:Wait on the agent's terminating hook, which
// the group's description does not show and whose WarmPoolSize does not change until it is gone. The
// loop's periodic DescribeWarmPool finds it; it is confirmed and completed with CONTINUE in time, after its
// drain (nothing runs on a stopped pool instance). And a steady pool is not read every tick.
func TestC18LostMessageOfATerminationOutOfTheWarmPoolIsTakenUpFromDescribeWarmPool(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 2, HeartbeatTimeout: 60 * time.Second}
	w, losing := buildLosingPool(t, &g, sim.WarmPoolSpec{MinSize: 1, MaxGroupPreparedCapacity: aws.Int32(3)})
	pool := poolOf(w, g.Name)
	require.Len(t, pool, 1)
	var pooled string
	for id := range pool {
		pooled = id
	}
	settle(t, w, 5*time.Minute)
	w.Account.ResetCalls()
	settle(t, w, 5*time.Minute) // a steady pool: 5 minutes of ticks
	reads := w.Account.Calls()["autoscaling:DescribeWarmPool"]
	require.Positive(t, reads, "a steady pool is still looked at")
	// Once per adoptAfter of its shortest hook (a third of 60 s), not on each of the 60 ticks.
	require.LessOrEqual(t, reads, int(5*time.Minute/(20*time.Second))+1, "a steady pool is not read every tick")

	losing.armed = true
	_, err := w.Account.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(pooled), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	require.NoError(t, err)
	require.Equal(t, "Warmed:Terminating:Wait", poolOf(w, g.Name)[pooled].LifecycleState)

	done, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return len(completionsOf(w, pooled)) > 0 })
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, 1, losing.lost, "a receive was lost")
	cs := completionsOf(w, pooled)
	require.Len(t, cs, 1)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.Equal(t, sim.TransitionTerminating, cs[0].Transition)
	rec, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, pooled, testworld.HookName))
	require.NoError(t, err)
	require.True(t, rec.Adopted, "taken up by the reconcile loop")
	require.Equal(t, "Warmed:Terminating:Wait", rec.WaitState)
	settle(t, w, 10*time.Minute)
	require.Len(t, completionsOf(w, pooled), 1)
	require.Empty(t, w.Checker.Finish())
}
