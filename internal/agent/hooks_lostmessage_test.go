package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Lifecycle actions whose message is lost, in the less common cases the lifecycle sweep (hooksweep.go) must
// still cover: a missed one would time out and its instance would go on undrained.

// loseTheMessage receives the one lifecycle message on the queue and never deletes it: invisible for SQS's
// 12-hour maximum visibility timeout, as a receive whose answer was lost, or an agent that died holding it.
func loseTheMessage(t *testing.T, w *testworld.World) {
	t.Helper()
	out, err := w.Account.SQS().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
		MaxNumberOfMessages: 10, VisibilityTimeout: 43200})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
}

// Field case C19 (a message is a claim): the real message of a scale-in is lost and a message with the right
// group, instance and hook but a token Auto Scaling never issued comes. The action is Auto Scaling's, named by
// instance and hook (the agent never sends the message's token back): drained, heartbeated inside every timeout
// window and completed once. Driven by the made-up token, its heartbeat would be refused, the record closed as
// "no longer active" and the real action would time out with 2 tasks running.
func TestC19MadeUpTokenForAWaitingInstanceWhileItsMessageIsLostStillDrainsAndCompletesTheAction(t *testing.T) {
	hb := 60 * time.Second
	w, g := eventDrivenWorld(t, hb, nil)
	instance, start := scaleInOne(t, w, g)
	loseTheMessage(t, w)
	w.Account.SendMessage(w.QueueURL, forged(t, g.Name, testworld.HookName, instance, "00000000-0000-0000-0000-000000000000"))
	_, err := w.RunEvents(context.Background(), 20*time.Minute, func() bool { return false })
	require.NoError(t, err)
	requireKeptAlive(t, w, instance, start, hb, true)
	// The made-up token never reaches Auto Scaling: no heartbeat or completion of the instance is refused, and
	// the record is never closed as "no longer active" (the reconcile loop would take the action up again, a
	// sweep or more later, with less of its timeout left).
	for _, h := range w.Account.Heartbeats() {
		require.False(t, h.InstanceID == instance && !h.Accepted, "a refused heartbeat at +%s", h.At.Sub(start))
	}
	for _, c := range w.Account.LifecycleCompletions() {
		require.False(t, c.InstanceID == instance && !c.Accepted, "a refused completion at +%s", c.At.Sub(start))
	}
	rec, err := w.Store.GetHook(context.Background(), model.ActionKey(g.Name, instance, testworld.HookName))
	require.NoError(t, err)
	require.Equal(t, sim.ResultContinue, rec.Result)
}

// Field case C4, root volume replacement (C14): an instance refresh with the ReplaceRootVolume strategy holds
// the instance in ReplacingRootVolume:Wait on the terminating hook, and its message is lost. The sweep takes
// the action up as for Terminating:Wait: that state is a candidate too.
func TestC4LostMessageOfARootVolumeReplacementIsTakenUpByTheSweep(t *testing.T) {
	hb := 60 * time.Second
	w, g := eventDrivenWorld(t, hb, nil)
	instance := w.Account.Group(g.Name).Instances[0].ID
	_, err := w.Account.StartRootVolumeReplacement(instance)
	require.NoError(t, err)
	start := w.Account.Clock().Now()
	loseTheMessage(t, w)
	_, err = w.RunEvents(context.Background(), 20*time.Minute, func() bool { return false })
	require.NoError(t, err)
	requireKeptAlive(t, w, instance, start, hb, true)
}

// Field case C4 after a restart: 100 groups, the agent restarts, and the group the bounded hook check (25
// groups a pass, passes 2 minutes apart) reaches last scales in with its message lost. The sweep looks at the
// groups not checked yet too; otherwise that group would have no sweep for about 6 minutes and the action would
// time out (the first group's would not: it is checked in the first pass).
func TestC4SweepAfterARestartCoversGroupsTheHookCheckHasNotReachedYet(t *testing.T) {
	hb := 60 * time.Second
	spec := testworld.Spec{WakeUpEvents: true, WakeUpQueue: true}
	for i := range 100 {
		spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: fmt.Sprintf("g%03d", i), Cluster: "c", Parameter: "/golden/fleet",
			Min: 1, Max: 3, Desired: 2, HeartbeatTimeout: hb})
	}
	w := build(t, spec)
	_, err := w.RunEvents(context.Background(), 15*time.Minute, func() bool { return false })
	require.NoError(t, err)
	w.Restart(nil)
	instance, start := scaleInOne(t, w, spec.Groups[99])
	loseTheMessage(t, w)
	_, err = w.RunEvents(context.Background(), 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	requireKeptAlive(t, w, instance, start, hb, true)
}

// Field case C4, a HeartbeatTimeout lowered by a stack update (600 s to 60 s) after the agent cached the
// group's hooks (one scale-in handled through its message); the next scale-in's message is lost. A first
// sighting without its message reads the hooks again when they are over a minute old, so the action is
// heartbeated within the new 60 s, not on the cached 600 s (no heartbeat, timed out).
func TestC4HeartbeatTimeoutLoweredAfterTheHooksWereCachedIsHeldForALostMessage(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 3, HeartbeatTimeout: 600 * time.Second}
	spec := oneGroup(&g)
	spec.WakeUpEvents, spec.WakeUpQueue = true, true
	spec.Sim.TaskStopStageDelay = 20 * time.Second
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	first, _ := scaleInOne(t, w, g) // through its message: the agent caches the hooks (600 s)
	done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, first)) > 0 })
	require.NoError(t, err)
	require.True(t, done)
	g.Desired--
	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: testworld.HookName, Transition: sim.TransitionTerminating,
		HeartbeatTimeout: 60 * time.Second, QueueURL: w.QueueURL}))
	_, err = w.RunEvents(ctx, time.Minute, func() bool { return false })
	require.NoError(t, err)
	instance, start := scaleInOne(t, w, g)
	loseTheMessage(t, w)
	_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	requireKeptAlive(t, w, instance, start, 60*time.Second, true)
}

// Field case C18, a second action on the same instance and hook: a warm pool that reuses instances on scale in;
// a scale in sends an instance back to the pool through the agent's terminating hook (action 1, completed
// through its message), then the pool instance is terminated (Warmed:Terminating:Wait on the same hook: action
// 2, the same record key) and that message is lost. Action 2 is taken up and completed by the agent: the
// completed record of action 1 does not hide it.
func TestC18SecondActionOnTheSameInstanceAndHookIsTakenUpWhenItsMessageIsLost(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3, HeartbeatTimeout: 60 * time.Second}
	w, losing := buildLosingPool(t, &g, sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)})
	back := scaleInToPool(t, w, g.Name, 2)
	settle(t, w, 5*time.Minute)
	rec, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, back, testworld.HookName))
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, rec.State, "action 1 is completed")
	losing.armed = true
	_, err = w.Account.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(back), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	require.NoError(t, err)
	require.Equal(t, "Warmed:Terminating:Wait", poolOf(w, g.Name)[back].LifecycleState)
	before := len(completionsOf(w, back))
	_, err = w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, 1, losing.lost, "action 2's message was lost")
	cs := completionsOf(w, back)
	require.Len(t, cs, before+1, "action 2 completed by the agent, not timed out")
	require.Equal(t, sim.TransitionTerminating, cs[len(cs)-1].Transition)
	require.Equal(t, sim.ResultContinue, cs[len(cs)-1].Result)
}

// Field cases C18 and C19: Warmed:Pending:Wait waits on the terminating hooks only for a scale in back to a
// pool that reuses instances; otherwise it is a launch into the pool. A forged terminating message for an
// instance launching into a pool without a reuse policy is rejected (one DescribeAutoScalingGroups tells),
// recorded as nothing and drains nothing: it is not confirmed, and no drain starts on the instance.
func TestC19ForgedTerminatingMessageForAnInstanceLaunchingIntoAPoolThatReusesNothingIsRejected(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 2}
	w, _ := buildPool(t, &g, sim.WarmPoolSpec{MinSize: 1, MaxGroupPreparedCapacity: aws.Int32(2)})
	before := poolOf(w, g.Name)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3)) // draws the warmed instance; the pool launches one
	var warming string
	for id := range poolOf(w, g.Name) {
		if _, ok := before[id]; !ok {
			warming = id
		}
	}
	require.NotEmpty(t, warming)
	for range 600 { // the account alone, the agent not running: the instance boots, then waits
		if poolOf(w, g.Name)[warming].LifecycleState == "Warmed:Pending:Wait" {
			break
		}
		w.Account.Advance(time.Second)
	}
	require.Equal(t, "Warmed:Pending:Wait", poolOf(w, g.Name)[warming].LifecycleState, "launching into the pool, on the launching hook")
	for { // the launch messages are held back, so the forged one is looked at while the instance waits
		out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
			MaxNumberOfMessages: 10, VisibilityTimeout: 43200})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			break
		}
	}
	ignored := w.Agent.Consumer.Stats.Ignored.Load()
	w.Account.SendMessage(w.QueueURL, forged(t, g.Name, testworld.HookName, warming, "forged-token"))
	settle(t, w, 30*time.Second)
	require.Equal(t, ignored+1, w.Agent.Consumer.Stats.Ignored.Load(), "rejected: deleted as ignored")
	_, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, warming, testworld.HookName))
	require.ErrorIs(t, err, state.ErrNotFound, "no terminating action recorded for it")
	for _, c := range w.Account.LifecycleCompletions() {
		require.False(t, c.InstanceID == warming && c.Hook == testworld.HookName, "nothing completed on its terminating hook")
	}
}
