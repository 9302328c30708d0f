package agent_test

import (
	"context"
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

// Lifecycle actions that end without the agent, and hooks that change hands.

// adoptRootVolumeReplacement starts a root volume replacement of instance, loses its message, and runs until
// the reconcile loop has taken the action up (its record Adopted).
func adoptRootVolumeReplacement(t *testing.T, w *testworld.World, group, instance string) {
	t.Helper()
	ctx := context.Background()
	_, err := w.Account.StartRootVolumeReplacement(instance)
	require.NoError(t, err)
	loseTheMessage(t, w)
	done, err := w.RunEvents(ctx, 5*time.Minute, func() bool {
		rec, err := w.Store.GetHook(ctx, model.ActionKey(group, instance, testworld.HookName))
		return err == nil && rec.Adopted
	})
	require.NoError(t, err)
	require.True(t, done, "taken up without its message")
}

// Field cases C4 and C14: an action the reconcile loop took up ends without the agent — an operator completes
// it by hand (aws autoscaling complete-lifecycle-action), or it times out while the agent is away. 45 minutes
// later the instance gets a second root volume replacement, on the same hook; its message is lost, or it is
// delivered. The old record is closed as ended (no heartbeat within the HeartbeatTimeout) and the second action
// is drained before CONTINUE. Driving the open record for the second action, with its drain deadline long past,
// would continue it 20 s after it began with 4 tasks running (invariant 2).
func TestC4AdoptedActionThatEndedWithoutTheAgentDoesNotDriveTheNextActionUndrained(t *testing.T) {
	for _, tc := range []struct {
		name              string
		byHand, delivered bool
	}{
		{name: "completed by hand, next message lost", byHand: true},
		{name: "completed by hand, next message delivered", byHand: true, delivered: true},
		{name: "timed out while the agent was away, next message lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			hb := 60 * time.Second
			w, g := eventDrivenWorld(t, hb, nil)
			instance := w.Account.Group(g.Name).Instances[0].ID
			key := model.ActionKey(g.Name, instance, testworld.HookName)
			adoptRootVolumeReplacement(t, w, g.Name, instance)
			if tc.byHand {
				_, err := w.Account.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
					AutoScalingGroupName: aws.String(g.Name), LifecycleHookName: aws.String(testworld.HookName),
					InstanceId: aws.String(instance), LifecycleActionResult: aws.String("CONTINUE")})
				require.NoError(t, err)
			} else {
				w.Account.Advance(10 * hb) // the agent is away: the action times out, its default result applies
			}
			_, err := w.RunEvents(ctx, 45*time.Minute, func() bool { return false })
			require.NoError(t, err)
			w.Account.SetServiceDesiredCount("c1", "web", 12) // tasks back on the instance
			_, err = w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
			require.NoError(t, err)
			n := len(completionsOf(w, instance))

			_, err = w.Account.StartRootVolumeReplacement(instance)
			require.NoError(t, err)
			if !tc.delivered {
				loseTheMessage(t, w)
			}
			_, err = w.RunEvents(ctx, 20*time.Minute, func() bool { return false })
			require.NoError(t, err)
			cs := completionsOf(w, instance)
			require.Len(t, cs, n+1, "the second action completed by the agent")
			require.True(t, cs[n].Drained, "the second replacement drained before CONTINUE")
			rec, err := w.Store.GetHook(ctx, key)
			require.NoError(t, err)
			require.Equal(t, state.HookCompleted, rec.State)
			require.Equal(t, sim.ResultContinue, rec.Result)
			require.Empty(t, w.Checker.Check())
		})
	}
}

// Field case C4: the message of an action the reconcile loop took up comes back (its receive was lost: visible
// again after 10 minutes) after the action timed out while the agent was away. It is deleted as done, not held
// by the open record: its visibility extended for over an hour, never deleted, never dead-lettered.
func TestC4MessageOfAnAdoptedActionThatEndedWhileTheAgentWasAwayIsDeletedNotHeldForever(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	w, g := eventDrivenWorld(t, hb, nil)
	instance := w.Account.Group(g.Name).Instances[0].ID
	_, err := w.Account.StartRootVolumeReplacement(instance)
	require.NoError(t, err)
	out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
		MaxNumberOfMessages: 10, VisibilityTimeout: 600})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	done, err := w.RunEvents(ctx, 5*time.Minute, func() bool {
		rec, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, instance, testworld.HookName))
		return err == nil && rec.Adopted
	})
	require.NoError(t, err)
	require.True(t, done, "taken up without its message")
	w.Account.Advance(10 * hb)
	_, err = w.RunEvents(ctx, 60*time.Minute, func() bool { return false })
	require.NoError(t, err)
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "the late message is deleted")
	require.Zero(t, w.Agent.Consumer.Stats.Held.Load(), "and not held")
}

// Field cases C18 and C4: a scale in back to a pool that reuses instances waits in Warmed:Pending:Wait, its
// message is lost, and the group's reuse policy is removed while it waits. The reconcile loop looks at the
// terminating hooks of a Warmed:Pending:Wait instance whatever the policy says now, Auto Scaling accepts the
// heartbeat by instance and hook, and the instance is drained before CONTINUE. Looking only at a pool that
// reuses instances would let the action time out undrained.
func TestC18ScaleInToThePoolWithTheReusePolicyRemovedAndItsMessageLostIsStillDrained(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 3, Desired: 3}
	pool := sim.WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)}
	w, _ := buildPool(t, &g, pool)
	back := startScaleInToPool(t, w, g.Name, 2)
	loseTheMessage(t, w)
	pool.ReuseOnScaleIn = false
	require.NoError(t, w.Account.PutWarmPool(g.Name, pool))
	require.Equal(t, "Warmed:Pending:Wait", poolOf(w, g.Name)[back].LifecycleState)
	done, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return len(completionsOf(w, back)) > 0 })
	require.NoError(t, err)
	require.True(t, done, "completed by the agent, not timed out")
	cs := completionsOf(w, back)
	require.Equal(t, sim.TransitionTerminating, cs[0].Transition)
	require.True(t, cs[0].Drained, "drained before CONTINUE")
}

// Field case C18, the cost of asking: a launch into a pool that reuses instances, held for 30 minutes by
// another tool's launching hook, waits in Warmed:Pending:Wait (and so does the launch from the pool into the
// group that the scale out asks for). The reconcile loop asks Auto Scaling whether such an instance waits on
// one of the agent's hooks (launching, terminating) once per AdoptAfter (a minute at the demo's 300 s
// HeartbeatTimeout) per hook, not on every tick (330 refused heartbeats and as many
// DescribeAutoScalingInstances per hook in those 30 minutes).
func TestC18LaunchIntoThePoolHeldByAnotherToolIsAskedAboutOncePerWait(t *testing.T) {
	g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 2}
	w, _ := buildPoolHooks(t, &g, sim.WarmPoolSpec{MinSize: 1, ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(2)}, false)
	other := w.Account.CreateQueue("other-tool", 0, "")
	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: "other-launch", Transition: sim.TransitionLaunching,
		HeartbeatTimeout: 2 * time.Hour, QueueURL: other}))
	settle(t, w, 10*time.Second)
	w.Account.ResetCalls()
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
	w.Checker.Baseline[g.Name] = 3
	settle(t, w, 30*time.Minute)
	waiting := 0
	for _, i := range poolOf(w, g.Name) {
		if i.LifecycleState == "Warmed:Pending:Wait" {
			waiting++
		}
	}
	require.Equal(t, 1, waiting, "the launch into the pool still waits for the other tool")
	calls := w.Account.Calls()
	asked := map[string]int{} // heartbeats per instance and hook
	for _, h := range w.Account.Heartbeats() {
		asked[h.InstanceID+" "+h.Hook]++
	}
	require.NotEmpty(t, asked, "it is asked")
	require.LessOrEqual(t, len(asked), 3, "the agent's two hooks on the launch into the pool, its launching hook on the launch from it: %v", asked)
	for key, n := range asked {
		require.LessOrEqual(t, n, 31, "%s: about one a minute", key)
	}
	require.LessOrEqual(t, calls["autoscaling:DescribeAutoScalingInstances"], 31*len(asked))
}

// Field case C19: the agent's hook becomes another tool's (its notification target moved to that tool's queue)
// after an action of it was completed; a later action on the same instance and hook waits for the other tool,
// and a copy of a message for it reaches the agent's queue. The agent sends no heartbeat: that would restart
// the other tool's action's timeout. It looks at whose hook it is before asking Auto Scaling (a heartbeat).
func TestC19MessageForAHookThatIsNowAnotherToolsSendsNoHeartbeat(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	w, g := eventDrivenWorld(t, hb, nil)
	instance := w.Account.Group(g.Name).Instances[0].ID
	_, err := w.Account.StartRootVolumeReplacement(instance)
	require.NoError(t, err)
	done, err := w.RunEvents(ctx, 20*time.Minute, func() bool {
		v, _ := w.Account.Instance(instance)
		return len(completionsOf(w, instance)) == 1 && v.LifecycleState == "InService" && v.ContainerInstanceStatus == "ACTIVE"
	})
	require.NoError(t, err)
	require.True(t, done, "the first action completed through its message")
	other := w.Account.CreateQueue("other-tool", 0, "")
	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: testworld.HookName, Transition: sim.TransitionTerminating,
		HeartbeatTimeout: hb, QueueURL: other}))
	_, err = w.RunEvents(ctx, time.Minute, func() bool { return false })
	require.NoError(t, err)
	before := len(w.Account.Heartbeats())
	_, err = w.Account.StartRootVolumeReplacement(instance) // the other tool's action now
	require.NoError(t, err)
	w.Account.SendMessage(w.QueueURL, forged(t, g.Name, testworld.HookName, instance, "11111111-0000-0000-0000-000000000000"))
	_, err = w.RunEvents(ctx, 30*time.Second, func() bool { return false })
	require.NoError(t, err)
	require.Empty(t, w.Account.Heartbeats()[before:], "no heartbeat on another tool's hook")
	require.Len(t, completionsOf(w, instance), 1, "nothing completed on it")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "the message is deleted")
}
