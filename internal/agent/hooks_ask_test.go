package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Lifecycle actions that Auto Scaling's own answer (a heartbeat by instance and hook, accepted only while an
// action waits on that hook) decides, not the agent's own records or the group's configuration.

// Field cases C14 and C6, a later action in the same wait state after a "no active" answer: the first root
// volume replacement of an instance is completed through its message, but the answer to CompleteLifecycleAction
// is lost and the retry is told "No active Lifecycle Action found" (the completion went through), so its record
// is closed without an accepted result in ReplacingRootVolume:Wait. A second replacement of the same instance
// waits in that same state, on the same hook, and its message is lost. Auto Scaling accepts a heartbeat by
// instance and hook, so the action is taken up, drained and continued: a closed record is not final for its
// wait state, or the action would time out undrained.
func TestC14SecondRootVolumeReplacementAfterANoActiveAnswerIsTakenUpWhenItsMessageIsLost(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
	spec := oneGroup(&g)
	spec.WakeUpEvents, spec.WakeUpQueue = true, true
	spec.Sim.TaskStopStageDelay = 20 * time.Second
	// The first completion goes through and its answer is lost: the agent is told the action is not active.
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "autoscaling:CompleteLifecycleAction", Every: 1, Max: 1, ResponseLost: true,
		Codes: []string{"ValidationError"}, Message: "No active Lifecycle Action found with instance ID"})
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	instance := w.Account.Group(g.Name).Instances[0].ID
	key := model.ActionKey(g.Name, instance, testworld.HookName)

	_, err = w.Account.StartRootVolumeReplacement(instance) // action 1, its message delivered
	require.NoError(t, err)
	done, err := w.RunEvents(ctx, 20*time.Minute, func() bool {
		v, _ := w.Account.Instance(instance)
		rec, err := w.Store.GetHook(ctx, key)
		return err == nil && rec.State == state.HookCompleted && v.LifecycleState == "InService" && v.ContainerInstanceStatus == "ACTIVE"
	})
	require.NoError(t, err)
	require.True(t, done, "action 1 completed and the instance back in service")
	rec, err := w.Store.GetHook(ctx, key)
	require.NoError(t, err)
	require.Empty(t, rec.Result, "action 1's record is closed without an accepted result")
	require.Equal(t, "ReplacingRootVolume:Wait", rec.WaitState)
	require.Contains(t, rec.Note, "no active lifecycle action")
	require.Len(t, completionsOf(w, instance), 1, "action 1 went through in Auto Scaling")

	_, err = w.Account.StartRootVolumeReplacement(instance) // action 2: same instance, hook and wait state
	require.NoError(t, err)
	start := w.Account.Clock().Now()
	loseTheMessage(t, w)
	_, err = w.RunEvents(ctx, 20*time.Minute, func() bool { return false })
	require.NoError(t, err)
	cs := completionsOf(w, instance)
	require.Len(t, cs, 2, "action 2 completed by the agent, not timed out")
	require.Equal(t, sim.ResultContinue, cs[1].Result)
	require.True(t, cs[1].Drained, "drained before its root volume was swapped")
	require.True(t, cs[1].At.After(start))
}

// Field cases C18 and C19: a scale in back to a pool that reuses instances waits in Warmed:Pending:Wait on the
// terminating hook, and the group's instance reuse policy is removed before the agent looks at the message.
// Auto Scaling still has the action waiting on the terminating hook (a heartbeat by instance and hook is
// accepted), so the message is confirmed and the instance drained before CONTINUE. A confirmation that read the
// group's reuse policy would reject the real action, and the instance would go to the pool undrained when the
// action timed out.
func TestC18ScaleInToThePoolIsDrainedWhenTheReusePolicyIsRemovedWhileItWaits(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3}
	pool := sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)}
	w, _ := buildPool(t, &g, pool)
	back := startScaleInToPool(t, w, g.Name, 2)
	pool.ReuseOnScaleIn = false
	require.NoError(t, w.Account.PutWarmPool(g.Name, pool))
	require.Equal(t, "Warmed:Pending:Wait", poolOf(w, g.Name)[back].LifecycleState, "the action still waits")
	rejected := w.Agent.Consumer.Stats.Ignored.Load()

	done, err := w.RunUntil(context.Background(), tick, 30*time.Minute, func() bool { return len(completionsOf(w, back)) > 0 })
	require.NoError(t, err)
	require.True(t, done, "completed by the agent, not timed out")
	cs := completionsOf(w, back)
	require.Equal(t, sim.TransitionTerminating, cs[0].Transition)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.True(t, cs[0].Drained, "drained before CONTINUE")
	require.Equal(t, rejected, w.Agent.Consumer.Stats.Ignored.Load(), "the message was not rejected")
	require.Empty(t, w.Checker.Violations)
}

// startScaleInToPool lowers group's desired capacity to desired in a pool that reuses instances and returns the
// scale-in victim, waiting in Warmed:Pending:Wait on the terminating hook (the agent has not looked yet).
func startScaleInToPool(t *testing.T, w *testworld.World, group string, desired int32) string {
	t.Helper()
	require.NoError(t, w.Account.SetDesiredCapacity(group, desired))
	w.Checker.Baseline[group] = desired
	var back string
	for id, i := range poolOf(w, group) {
		if i.LifecycleState == "Warmed:Pending:Wait" {
			back = id
		}
	}
	require.NotEmpty(t, back, "the scale-in victim waits on the terminating hook")
	return back
}
