package agent_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// RV-A: the real message is held invisible (a dead receive); a message with the right group/instance/hook but
// a token AWS does not know arrives. Expect: the action is still drained, heartbeated and completed CONTINUE.
func TestC19MadeUpTokenForAWaitingInstanceWhileItsMessageIsLostStillDrainsAndCompletesTheAction(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	w, g := eventDrivenWorld(t, hb, nil)
	instance, start := scaleInOne(t, w, g)
	out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
		MaxNumberOfMessages: 10, VisibilityTimeout: 43200})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	w.Account.SendMessage(w.QueueURL, forged(t, g.Name, demo.HookName, instance, "00000000-0000-0000-0000-000000000000"))
	_, err = w.RunEvents(ctx, 20*time.Minute, func() bool { return false })
	require.NoError(t, err)
	h, err := w.Store.GetHook(ctx, lifecycle.ActionKey(g.Name, instance, demo.HookName))
	t.Logf("record: %+v err=%v", h, err)
	for _, c := range w.Account.LifecycleCompletions() {
		if c.InstanceID == instance {
			t.Logf("completion/heartbeat: %+v (+%s)", c, c.At.Sub(start))
		}
	}
	for _, c := range w.Account.Heartbeats() {
		if c.InstanceID == instance {
			t.Logf("heartbeat: accepted=%v +%s", c.Accepted, c.At.Sub(start))
		}
	}
	for _, term := range w.Account.Terminations() {
		if term.InstanceID == instance {
			t.Logf("termination: %+v (+%s)", term, term.RequestedAt.Sub(start))
		}
	}
	requireKeptAlive(t, w, instance, start, hb, true)
}

// RV-B: an instance refresh replaces an instance's root volume (ReplacingRootVolume:Wait on the terminating
// hook); its message is held by a dead receive. Expect the sweep to take the action up (drain, heartbeat,
// CONTINUE) as for Terminating:Wait.
func TestC4LostMessageOfARootVolumeReplacementIsTakenUpByTheSweep(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	w, g := eventDrivenWorld(t, hb, nil)
	instance := w.Account.Group(g.Name).Instances[0].ID
	_, err := w.Account.StartRootVolumeReplacement(instance)
	require.NoError(t, err)
	start := w.Account.Clock().Now()
	out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
		MaxNumberOfMessages: 10, VisibilityTimeout: 43200})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	_, err = w.RunEvents(ctx, 20*time.Minute, func() bool { return false })
	require.NoError(t, err)
	h, err := w.Store.GetHook(ctx, lifecycle.ActionKey(g.Name, instance, demo.HookName))
	t.Logf("record: %+v err=%v", h, err)
	for _, c := range w.Account.LifecycleCompletions() {
		if c.InstanceID == instance {
			t.Logf("completion: %+v (+%s)", c, c.At.Sub(start))
		}
	}
	requireKeptAlive(t, w, instance, start, hb, true)
}

// RV-C: 100 managed groups, the agent restarts (a deploy) and dies... no: the agent restarts, then the last
// group (by name) scales in and its message is held by a dead receive. The fresh agent's hook check reaches
// 25 groups a pass (passes 2 min apart): does the sweep cover the last group in time?
func TestC4SweepAfterARestartCoversGroupsTheHookCheckHasNotReachedYet(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	spec := demo.Spec{WakeUpEvents: true, WakeUpQueue: true}
	for i := range 100 {
		spec.Groups = append(spec.Groups, demo.GroupSetup{Name: fmt.Sprintf("g%03d", i), Cluster: "c", Parameter: "/golden/fleet",
			Min: 1, Max: 3, Desired: 2, HeartbeatTimeout: hb})
	}
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 15*time.Minute, func() bool { return false })
	require.NoError(t, err)
	w.Restart(nil)
	g := spec.Groups[rvIndex]
	instance, start := scaleInOne(t, w, g)
	out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
		MaxNumberOfMessages: 10, VisibilityTimeout: 43200})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	for _, c := range w.Account.LifecycleCompletions() {
		if c.InstanceID == instance {
			t.Logf("completion: %+v (+%s)", c, c.At.Sub(start))
		}
	}
	for _, term := range w.Account.Terminations() {
		if term.InstanceID == instance {
			t.Logf("termination: proceeded +%s", term.ProceededAt.Sub(start))
		}
	}
	requireKeptAlive(t, w, instance, start, hb, true)
}

var rvIndex = func() int {
	if os.Getenv("RV_INDEX") == "0" {
		return 0
	}
	return 99
}()

// RV-D: the hook's HeartbeatTimeout is lowered (600 s -> 60 s, a CloudFormation update) after the agent cached
// the group's hooks; the next scale-in's message is held by a dead receive. Expect the sweep to keep the
// action alive within the new 60 s timeout.
func TestC4HeartbeatTimeoutLoweredAfterTheHooksWereCachedIsHeldForALostMessage(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 3, HeartbeatTimeout: 600 * time.Second}
	spec := oneGroup(&g)
	spec.WakeUpEvents, spec.WakeUpQueue = true, true
	spec.Sim.TaskStopStageDelay = 20 * time.Second
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	if os.Getenv("RV_CONTROL") == "" {
		first, _ := scaleInOne(t, w, g) // handled through its message: the agent caches the hooks (600 s)
		done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, first)) > 0 })
		require.NoError(t, err)
		require.True(t, done)
		g.Desired--
	}
	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: demo.HookName, Transition: sim.TransitionTerminating,
		HeartbeatTimeout: 60 * time.Second, QueueURL: w.QueueURL}))
	_, err = w.RunEvents(ctx, time.Minute, func() bool { return false })
	require.NoError(t, err)
	instance, start := scaleInOne(t, w, g)
	out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
		MaxNumberOfMessages: 10, VisibilityTimeout: 43200})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	for _, c := range w.Account.LifecycleCompletions() {
		if c.InstanceID == instance {
			t.Logf("completion: accepted=%v %s (+%s)", c.Accepted, c.Result, c.At.Sub(start))
		}
	}
	for _, h := range w.Account.Heartbeats() {
		if h.InstanceID == instance {
			t.Logf("heartbeat: accepted=%v +%s", h.Accepted, h.At.Sub(start))
		}
	}
	for _, term := range w.Account.Terminations() {
		if term.InstanceID == instance {
			t.Logf("termination: proceeded +%s drainedAtProceed=%v", term.ProceededAt.Sub(start), term.DrainedAtProceed)
		}
	}
	requireKeptAlive(t, w, instance, start, 60*time.Second, true)
}

// RV-E: a warm pool with ReuseOnScaleIn. A scale-in sends an instance back to the pool through the agent's
// terminating hook (action 1, its message handled: the record under ActionKey is Completed). Later the pool
// instance is terminated (Warmed:Terminating:Wait on the same hook: action 2, same ActionKey) and that
// message's receive is lost. Expect the reconcile loop / sweep to take action 2 up in time.
func TestC18SecondActionOnTheSameInstanceAndHookIsTakenUpWhenItsMessageIsLost(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3, HeartbeatTimeout: 60 * time.Second}
	w, losing := buildLosingPool(t, &g, sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)})
	back := scaleInToPool(t, w, g.Name, 2)
	settle(t, w, 5*time.Minute)
	rec, err := w.Store.GetHook(ctx, lifecycle.ActionKey(g.Name, back, demo.HookName))
	require.NoError(t, err)
	t.Logf("action 1 record: state=%s adopted=%v note=%q", rec.State, rec.Adopted, rec.Note)
	losing.armed = true
	_, err = w.Account.AutoScaling().TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(back), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	require.NoError(t, err)
	require.Equal(t, "Warmed:Terminating:Wait", poolOf(w, g.Name)[back].LifecycleState)
	start := w.Account.Clock().Now()
	before := len(completionsOf(w, back))
	_, err = w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, 1, losing.lost)
	for _, c := range w.Account.LifecycleCompletions() {
		if c.InstanceID == back {
			t.Logf("completion: accepted=%v %s %s (+%s)", c.Accepted, c.Transition, c.Result, c.At.Sub(start))
		}
	}
	for _, term := range w.Account.Terminations() {
		if term.InstanceID == back {
			t.Logf("termination: cause=%s proceeded +%s", term.Cause, term.ProceededAt.Sub(start))
		}
	}
	rec, _ = w.Store.GetHook(ctx, lifecycle.ActionKey(g.Name, back, demo.HookName))
	t.Logf("end record: %+v", rec)
	t.Logf("pool state: %+v; instance: %+v", poolOf(w, g.Name)[back].LifecycleState, func() any { i, _ := w.Account.Instance(back); return i.LifecycleState }())
	for _, h := range w.Account.Heartbeats() {
		if h.InstanceID == back {
			t.Logf("heartbeat: accepted=%v +%s", h.Accepted, h.At.Sub(start))
		}
	}
	require.Len(t, completionsOf(w, back), before+1, "action 2 completed by the agent, not timed out")
}
