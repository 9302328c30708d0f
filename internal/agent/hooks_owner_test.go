package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// nthHook is the terminating hook of an aws-node-termination-handler-style tool on the same group: it waits for
// that tool, which drains and completes it on its own.
const nthHook = "nth-drain"

// Field cases C3, C17, C19 (../shared/CASES.md): the stack's lifecycle EventBridge rule sends every hook's
// actions to the agent's queue, also those of another tool's hook on an opted-in group. That action is the
// other tool's: the agent rejects it as ForeignHook (info, metric, notification, message deleted), leaves it in
// Terminating:Wait untouched, and still drains and completes its own hook's action of the same instance.
func TestC19ForeignHookOfAnotherToolOnAManagedGroupIsLeftWaitingAndTheAgentsOwnHookStillDrains(t *testing.T) {
	for _, tc := range []struct {
		name string
		// hook is the other tool's hook; tags are extra group tags.
		hook func(w *testworld.World) sim.HookSpec
		tags map[string]string
	}{
		{"NTH-style hook notifying its own queue", func(w *testworld.World) sim.HookSpec {
			return sim.HookSpec{Name: nthHook, Transition: sim.TransitionTerminating, HeartbeatTimeout: time.Hour,
				QueueURL: w.Account.CreateQueue("nth-queue", 5, "")}
		}, nil},
		{"hook without a notification target, the group's tag naming the agent's hook",
			func(*testworld.World) sim.HookSpec {
				return sim.HookSpec{Name: nthHook, Transition: sim.TransitionTerminating, HeartbeatTimeout: time.Hour}
			}, map[string]string{model.TagLifecycleHooks: testworld.HookName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, Tags: tc.tags}
			w := buildWatched(t, oneGroup(&g))
			require.NoError(t, w.Account.PutLifecycleHook(g.Name, tc.hook(w.World)))
			settle(t, w.World, 10*time.Second)
			w.Account.ResetCalls()

			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 2))
			w.Checker.Baseline[g.Name] = 2
			msgs := w.Account.QueueMessages(w.QueueURL)
			require.Len(t, msgs, 1, "the agent's own hook notified the agent's queue")
			own, err := events.Parse([]byte(msgs[0]))
			require.NoError(t, err)
			id := own.Lifecycle.InstanceID
			// What the account-wide EventBridge rule delivers for the other hook's action of the same instance.
			w.Account.SendMessage(w.QueueURL, forged(t, g.Name, nthHook, id, "nth-token"))

			done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return len(acceptedCompletions(w.World)) == 1 })
			require.NoError(t, err)
			require.True(t, done, "the agent's own action is completed")
			settle(t, w.World, 10*time.Minute)

			cs := acceptedCompletions(w.World)[own.Lifecycle.Token]
			require.Len(t, cs, 1)
			require.Equal(t, testworld.HookName, cs[0].Hook)
			require.Equal(t, sim.ResultContinue, cs[0].Result)
			require.True(t, cs[0].Drained, "the agent's own hook still drains before CONTINUE")
			for _, c := range append(w.Account.LifecycleCompletions(), w.Account.Heartbeats()...) {
				require.NotEqual(t, nthHook, c.Hook, "nothing completed or heartbeated on the other tool's hook")
			}
			inst, _ := w.Account.Instance(id)
			require.Equal(t, "Terminating:Wait", inst.LifecycleState, "the other tool's action still waits")
			require.Equal(t, map[string]float64{model.RejectForeignHook: 1}, w.rejected())
			notes := w.rejectedNotifications(t)
			require.Len(t, notes, 1)
			require.Equal(t, model.RejectForeignHook, notes[0].Reason)
			require.Empty(t, w.logs.FilterMessageSnippet("another tool's hook").All(), "routine: info, not a warning")
			visible, inFlight := w.Account.QueueDepth(w.QueueURL)
			require.Zero(t, visible+inFlight, "both messages deleted")

			// The other tool completes its own action: the instance goes, drained.
			_, err = w.Account.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
				AutoScalingGroupName: aws.String(g.Name), LifecycleHookName: aws.String(nthHook), InstanceId: aws.String(id),
				LifecycleActionResult: aws.String(sim.ResultContinue)})
			require.NoError(t, err, "the other tool's action was still active")
			settle(t, w.World, 5*time.Minute)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// TestHookOwnedDecidesOnTheNotificationTargetAndTheTag: the ownership rule of lifecycle hooks, case by case.
func TestHookOwnedDecidesOnTheNotificationTargetAndTheTag(t *testing.T) {
	const queue = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent"
	const queueARN = "arn:aws:sqs:eu-west-1:111122223333:patch-agent"
	for _, tc := range []struct {
		name   string
		hook   model.GroupHook
		listed []string
		owned  bool
	}{
		{"target is the agent's queue", model.GroupHook{Name: "drain", NotificationTargetARN: queueARN}, nil, true},
		{"no target (EventBridge), no tag", model.GroupHook{Name: "drain"}, nil, true},
		{"another queue", model.GroupHook{Name: "nth", NotificationTargetARN: "arn:aws:sqs:eu-west-1:111122223333:nth-queue"}, nil, false},
		{"same queue name in another account", model.GroupHook{Name: "drain", NotificationTargetARN: "arn:aws:sqs:eu-west-1:444455556666:patch-agent"}, nil, false},
		{"same queue name in another region", model.GroupHook{Name: "drain", NotificationTargetARN: "arn:aws:sqs:us-east-1:111122223333:patch-agent"}, nil, false},
		{"an SNS topic", model.GroupHook{Name: "backup", NotificationTargetARN: "arn:aws:sns:eu-west-1:111122223333:patch-agent"}, nil, false},
		{"no target, listed in the tag", model.GroupHook{Name: "drain"}, []string{"drain", "launch"}, true},
		{"no target, not listed in the tag", model.GroupHook{Name: "bootstrap"}, []string{"drain"}, false},
		{"the agent's queue, not listed in the tag", model.GroupHook{Name: "old", NotificationTargetARN: queueARN}, []string{"drain"}, false},
		{"empty tag: no hook is the agent's", model.GroupHook{Name: "drain"}, []string{}, false},
		{"ECS managed draining, even listed", model.GroupHook{Name: model.ECSManagedDrainingHookName}, []string{model.ECSManagedDrainingHookName}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owned, why := model.HookOwned(tc.hook, model.HookOwnership{QueueURL: queue, Listed: tc.listed})
			require.Equal(t, tc.owned, owned)
			require.Equal(t, tc.owned, why == "", "a foreign hook says why: %q", why)
		})
	}
	require.Equal(t, []string{"a", "b"}, model.ParseLifecycleHooksTag(map[string]string{model.TagLifecycleHooks: " a, ,b "}))
	require.Nil(t, model.ParseLifecycleHooksTag(map[string]string{}))
}

// Field case C19: a lifecycle message whose instance id is not an EC2 instance id (Auto Scaling refuses it
// with ValidationError on every look) is malformed: it reaches the dead-letter queue after its receives, with
// nothing drained, instead of being held forever.
func TestC19LifecycleMessageWithAMalformedInstanceIDIsDeadLetteredNotHeld(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	w := buildWatched(t, oneGroup(&g))
	settle(t, w.World, 10*time.Second)
	w.Account.ResetCalls()
	w.Account.SendMessage(w.QueueURL, forged(t, g.Name, testworld.HookName, "i-0123456789abcdef0123", "malformed-token"))
	settle(t, w.World, time.Hour)

	requireNothingDrained(t, w, g.Name)
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "not held on the queue")
	dlq, _ := w.Account.QueueDepth(strings.Replace(w.QueueURL, testworld.QueueName, testworld.QueueName+"-dlq", 1))
	require.Equal(t, 1, dlq, "dead-lettered")
	require.Zero(t, w.Account.Calls()["autoscaling:DescribeAutoScalingInstances"], "never asked about")
	require.Positive(t, w.Agent.Consumer.Stats.Failed.Load())
}

// losingSQS loses the answer of the first ReceiveMessage call that returned a message: SQS made the message
// invisible for the visibility timeout, the agent never saw it.
type losingSQS struct {
	awsapi.SQS
	armed bool
	lost  int
}

func (l *losingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := l.SQS.ReceiveMessage(ctx, in, o...)
	if err == nil && len(out.Messages) > 0 && l.armed && l.lost == 0 {
		l.lost++
		return &sqs.ReceiveMessageOutput{}, nil // the answer never reached the agent: it saw an empty long poll
	}
	return out, err
}

// A lost ReceiveMessage answer hides the lifecycle message for the visibility timeout (2 minutes), longer than
// the hook's HeartbeatTimeout (60 s). The reconcile loop finds the instance in Terminating:Wait on the agent's
// hook in its DescribeAutoScalingGroups answer, confirms it, drains it with heartbeats and completes it by
// instance id before the timeout; the message, late, finds the record and is deleted without a second drain.
func TestLostLifecycleMessageTheActionStillCompletesAfterDrainingAndTheLateMessageDrainsNothingMore(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: 60 * time.Second}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 20 * time.Second // a drain that outlasts the first heartbeat window
	losing := &losingSQS{}
	spec.Wrap = func(c agent.Clients) agent.Clients {
		losing.SQS = c.SQS
		c.SQS = losing
		return c
	}
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	w.Account.ResetCalls()
	losing.armed = true
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 2))
	w.Checker.Baseline[g.Name] = 2
	msgs := w.Account.QueueMessages(w.QueueURL)
	require.Len(t, msgs, 1)
	ev, err := events.Parse([]byte(msgs[0]))
	require.NoError(t, err)

	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "the action is completed, not timed out")
	require.Equal(t, 1, losing.lost, "the message's first receive was lost")
	cs := acceptedCompletions(w)[ev.Lifecycle.Token]
	require.Len(t, cs, 1)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.True(t, cs[0].Drained, "drained before CONTINUE")
	require.NotEmpty(t, w.Account.Heartbeats(), "heartbeats kept the action alive while draining")
	rec, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, ev.Lifecycle.InstanceID, testworld.HookName))
	require.NoError(t, err)
	require.True(t, rec.Adopted)
	require.True(t, rec.Confirmed)

	settle(t, w, 10*time.Minute) // the message comes back after its visibility timeout
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "the late message is deleted")
	require.Equal(t, 1, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "one drain, not two")
	require.Len(t, w.Account.LifecycleCompletions(), 1, "one CompleteLifecycleAction in all")
	require.Empty(t, w.Checker.Finish())
}

// The missing-hook warning counts only the group's own terminating hooks (HookOwned). A group whose only
// terminating hook is another tool's, or whose tag patch-agent/lifecycle-hooks names a hook the group does not
// have (a typo), drains nothing on scale-in — every action is rejected as ForeignHook at info level — so it is
// warned about like a group without any hook: the agent's hook problem and the group's status warning say why.
// A tag naming the agent's real hook, beside another tool's, is no problem.
func TestMissingHookWarningCountsOnlyTheAgentsOwnHooks(t *testing.T) {
	for _, tc := range []struct {
		name string
		// agentHook: the group has the agent's usual hook (testworld.HookName); foreign adds another tool's.
		agentHook, foreign bool
		tags               map[string]string
		want               []string // in the warning; none: no warning
	}{
		{name: "only terminating hook is another tool's (notifies its own queue)", foreign: true,
			want: []string{"no terminating lifecycle hook of the agent's", `hook "nth-drain" notifies`, "ForeignHook"}},
		{name: "tag names a hook the group does not have (typo)", agentHook: true,
			tags: map[string]string{model.TagLifecycleHooks: "patch-agent-drian"},
			want: []string{`names lifecycle hook "patch-agent-drian", which the group does not have`,
				"no terminating lifecycle hook of the agent's", `hook "patch-agent-drain" is not listed`}},
		{name: "tag names the agent's hook, another tool's beside it", agentHook: true, foreign: true,
			tags: map[string]string{model.TagLifecycleHooks: testworld.HookName}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := testworld.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 3, Desired: 2, Tags: tc.tags}
			if !tc.agentHook {
				g.HeartbeatTimeout = -1 // no hook of the agent's
			}
			w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{g}})
			if tc.foreign {
				require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: nthHook, Transition: sim.TransitionTerminating,
					HeartbeatTimeout: time.Hour, QueueURL: w.Account.CreateQueue("nth-queue", 5, "")}))
			}
			require.NoError(t, w.Agent.RunOnce(ctx))
			problem, warning := w.Agent.HookProblem(g.Name), withoutDeprecationNote(w.Rollout(ctx, g.Name).Warning)
			if len(tc.want) == 0 {
				require.Empty(t, problem)
				require.Empty(t, warning)
				return
			}
			for _, s := range tc.want {
				require.Contains(t, problem, s)
				require.Contains(t, warning, s, "status shows it")
			}
		})
	}
}
