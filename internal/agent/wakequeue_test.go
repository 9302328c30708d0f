package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// TestLifecycleActionIsHandledInTheFirstReceiveWhile500WakeUpsWaitOnTheWakeUpQueue: with a wake-up queue of its
// own (--wake-up-queue-url), 500 wake-ups waiting there do not delay a terminating lifecycle action on the main
// queue: the first step receives the action and starts its drain (UpdateContainerInstancesState) while the
// wake-up queue gives one receive of 10; the wake-ups are consumed by their own consumer (none left unread for
// ever), deleted in batches of 10 with DeleteMessageBatch and never with DeleteMessage, and the action is
// completed with CONTINUE once drained.
func TestLifecycleActionIsHandledInTheFirstReceiveWhile500WakeUpsWaitOnTheWakeUpQueue(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.WakeUpQueue = true
	w := build(t, spec)
	require.NotEmpty(t, w.WakeUpQueueURL)
	require.NotEqual(t, w.QueueURL, w.WakeUpQueueURL)
	settle(t, w, 30*time.Second)

	wake := fixture(t, "instance-launch-successful.json", "my-auto-scaling-group", g.Name)
	for range 500 {
		w.Account.SendMessage(w.WakeUpQueueURL, wake)
	}
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Account.Advance(time.Second) // an instance enters Terminating:Wait; its hook notifies the main queue
	visible, _ := w.Account.QueueDepth(w.QueueURL)
	require.Equal(t, 1, visible)
	w.Checker.Baseline[g.Name] = 1

	w.Account.ResetCalls()
	_, err := w.Agent.Step(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), w.Agent.Consumer.Stats.Held.Load(), "the lifecycle action is handled (held while it drains) in the first receive")
	require.Positive(t, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "its drain started in the first step")
	wakeVisible, _ := w.Account.QueueDepth(w.WakeUpQueueURL)
	require.Equal(t, 490, wakeVisible, "the wake-up queue gave one receive of 10 beside it")
	require.Equal(t, int64(10), w.Agent.WakeUpConsumer.Stats.Processed.Load())
	require.Equal(t, 1, w.Account.Calls()["sqs:DeleteMessageBatch"], "ten wake-ups, one DeleteMessageBatch")
	require.Zero(t, w.Account.Calls()["sqs:DeleteMessage"], "no DeleteMessage per wake-up")

	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "the lifecycle action is completed")
	for _, cs := range acceptedCompletions(w) {
		require.Len(t, cs, 1)
		require.Equal(t, sim.ResultContinue, cs[0].Result)
		require.True(t, cs[0].Drained)
	}
	settle(t, w, 10*time.Minute)
	wakeVisible, wakeInFlight := w.Account.QueueDepth(w.WakeUpQueueURL)
	require.Zero(t, wakeVisible+wakeInFlight, "every wake-up was consumed from the wake-up queue")
	require.Equal(t, int64(500), w.Agent.WakeUpConsumer.Stats.Processed.Load())
	require.Zero(t, w.Agent.WakeUpConsumer.Stats.Misrouted.Load())
	require.Empty(t, w.Checker.Finish())
}

// TestMisroutedLifecycleActionOnTheWakeUpQueueIsDrainedAndCompleted: a terminating lifecycle action that a
// mis-wired rule delivers to the wake-up queue instead of the main one is not lost and not half-handled: the
// wake-up queue's consumer hands it to the agent like the main one would, the instance is drained, the action
// completed once with CONTINUE, and only then is the message deleted.
func TestMisroutedLifecycleActionOnTheWakeUpQueueIsDrainedAndCompleted(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.WakeUpQueue = true
	w := build(t, spec)
	settle(t, w, 30*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Account.Advance(time.Second)
	w.Checker.Baseline[g.Name] = 1

	// Move the hook's notification from the main queue to the wake-up queue, as a mis-wired rule would.
	sq := w.Account.SQS()
	out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL), MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)
	_, err = sq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.QueueURL), ReceiptHandle: out.Messages[0].ReceiptHandle})
	require.NoError(t, err)
	w.Account.SendMessage(w.WakeUpQueueURL, aws.ToString(out.Messages[0].Body))

	_, err = w.Agent.Step(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), w.Agent.WakeUpConsumer.Stats.Misrouted.Load())
	require.Equal(t, int64(1), w.Agent.WakeUpConsumer.Stats.Held.Load(), "held while its instance drains")
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "the mis-routed lifecycle action is completed")
	for _, cs := range acceptedCompletions(w) {
		require.Len(t, cs, 1)
		require.Equal(t, sim.ResultContinue, cs[0].Result)
		require.True(t, cs[0].Drained, "completed only once drained")
	}
	settle(t, w, time.Minute)
	visible, inFlight := w.Account.QueueDepth(w.WakeUpQueueURL)
	require.Zero(t, visible+inFlight, "deleted once its effect was durable")
	require.Empty(t, w.Checker.Finish())
}
