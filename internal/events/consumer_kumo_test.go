package events_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// These tests run the consumer against a real SQS implementation (kumo): long polls, visibility timeouts,
// receive counts and the redrive policy are kumo's, not ours.

func TestMain(m *testing.M) { testenv.Main(m) }

type queues struct {
	api      *sqs.Client
	url, dlq string
}

// newQueues creates a queue whose redrive policy moves a message to a dead-letter queue after
// maxReceiveCount receives.
func newQueues(t *testing.T, maxReceiveCount int) queues {
	t.Helper()
	ctx := testenv.Context(t)
	api := sqs.NewFromConfig(testenv.AWSConfig(testenv.Kumo(t)))
	name := testenv.UniqueName(t, "q")
	dlq, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-dlq")})
	require.NoError(t, err)
	attrs, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: dlq.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	redrive := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, attrs.Attributes["QueueArn"], maxReceiveCount)
	q, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"RedrivePolicy": redrive}})
	require.NoError(t, err)
	return queues{api: api, url: aws.ToString(q.QueueUrl), dlq: aws.ToString(dlq.QueueUrl)}
}

func (q queues) send(t *testing.T, body string) {
	t.Helper()
	_, err := q.api.SendMessage(testenv.Context(t), &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(body)})
	require.NoError(t, err)
}

// depth returns the approximate visible and in-flight counts of a queue.
func (q queues) depth(t *testing.T, url string) (visible, inFlight int) {
	t.Helper()
	out, err := q.api.GetQueueAttributes(testenv.Context(t), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameApproximateNumberOfMessages,
			sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	visible, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight
}

// scripted answers each event with the next disposition of its kind's script (the last one repeats).
type scripted struct {
	mu     sync.Mutex
	script []events.Disposition
	err    error
	seen   []events.Event
}

func (s *scripted) Handle(_ context.Context, ev events.Event) (events.Disposition, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, ev)
	if s.err != nil {
		return events.Done, s.err
	}
	d := s.script[min(len(s.seen)-1, len(s.script)-1)]
	return d, nil
}

func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func consumer(q queues, h events.Handler, visibility time.Duration) *events.Consumer {
	return &events.Consumer{SQS: q.api, QueueURL: q.url, Handler: h, Clock: clock.RealClock{}, Log: zap.NewNop(),
		VisibilityTimeout: visibility}
}

func fixtureBody(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return string(b)
}

// pollUntil long-polls (1 s) until cond holds or 75 s pass: longer than the 30 s visibility timeout of the
// batching test, so a message whose receive answer was lost (it stays in flight, unseen) is delivered again
// within the deadline, as SQS does, instead of failing the test on a loaded machine (seen once, with another
// test binary using the same kumo heavily).
func pollUntil(t *testing.T, c *events.Consumer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(75 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not reached in 75 s")
		_, err := c.PollOnce(testenv.Context(t), time.Second)
		require.NoError(t, err)
	}
}

func TestKumoPoisonMessageReachesTheDeadLetterQueueAfterMaxReceiveCount(t *testing.T) {
	q := newQueues(t, 3)
	h := &scripted{script: []events.Disposition{events.Done}}
	c := consumer(q, h, time.Second)
	q.send(t, `{"Records": [ this is not JSON`)
	pollUntil(t, c, func() bool { v, _ := q.depth(t, q.dlq); return v == 1 })

	require.Equal(t, int64(3), c.Stats.Failed.Load(), "one failure counted per receive, never deleted")
	require.Zero(t, h.calls(), "a malformed body never reaches the handler")
	visible, inFlight := q.depth(t, q.url)
	require.Zero(t, visible+inFlight, "gone from the main queue: moved, not looping")
}

func TestKumoMessageIsHeldWhileItsWorkRunsAndDeletedOnlyWhenDone(t *testing.T) {
	q := newQueues(t, 5)
	h := &scripted{script: []events.Disposition{events.Hold, events.Hold, events.Hold, events.Done}}
	c := consumer(q, h, 2*time.Second) // held past its visibility timeout: the consumer must extend it
	q.send(t, fixtureBody(t, "asg-hook-direct-terminating.json"))
	pollUntil(t, c, func() bool { return h.calls() >= 1 })
	for h.calls() < 4 {
		_, inFlight := q.depth(t, q.url)
		require.Equal(t, 1, inFlight, "held, not deleted, while the drain runs")
		time.Sleep(1500 * time.Millisecond) // real SQS visibility: let more than half of it pass
		_, err := c.PollOnce(testenv.Context(t), 0)
		require.NoError(t, err)
	}
	visible, inFlight := q.depth(t, q.url)
	require.Zero(t, visible+inFlight, "deleted once the handler said Done")
	require.Equal(t, int64(1), c.Stats.Processed.Load())
	v, _ := q.depth(t, q.dlq)
	require.Zero(t, v, "extending visibility kept the receive count from reaching the redrive")
}

func TestKumoHandlerErrorLeavesTheMessageForRedelivery(t *testing.T) {
	q := newQueues(t, 5)
	h := &scripted{err: fmt.Errorf("DescribeInstances: throttled")}
	c := consumer(q, h, time.Second)
	q.send(t, fixtureBody(t, "ssm-parameter-change-update-golden-ami.json"))
	pollUntil(t, c, func() bool { return h.calls() >= 2 })
	require.GreaterOrEqual(t, c.Stats.Failed.Load(), int64(2))
	h.mu.Lock()
	h.err = nil
	h.script = []events.Disposition{events.Done}
	h.mu.Unlock()
	pollUntil(t, c, func() bool { return c.Stats.Processed.Load() == 1 })
	visible, inFlight := q.depth(t, q.url)
	require.Zero(t, visible+inFlight)
}

func TestKumoShutdownHandsHeldMessagesBackAtOnce(t *testing.T) {
	q := newQueues(t, 5)
	h := &scripted{script: []events.Disposition{events.Hold}}
	c := consumer(q, h, time.Minute)
	q.send(t, fixtureBody(t, "asg-hook-direct-terminating.json"))
	ctx, cancel := context.WithCancel(context.Background())
	var returned atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(int) time.Duration { return 10 * time.Millisecond })
		returned.Store(true)
	}()
	require.Eventually(t, func() bool { return h.calls() >= 1 }, 30*time.Second, 50*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context was cancelled")
	}
	// The held message is visible again now, not after its one-minute visibility timeout.
	out, err := q.api.ReceiveMessage(testenv.Context(t), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.url), WaitTimeSeconds: 1})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1, "released for another replica or the next start")
}

func TestKumoTwoMessagesInOneReceiveAreDeletedEachOnItsOwn(t *testing.T) {
	q := newQueues(t, 5)
	first := fixtureBody(t, "asg-hook-direct-terminating.json")
	second := fixtureBody(t, "eventbridge-lifecycle-terminate.json")
	h := &byInstance{done: map[string]bool{}}
	c := consumer(q, h, 30*time.Second)
	q.send(t, first)
	q.send(t, second)
	pollUntil(t, c, func() bool { return h.count() >= 2 })
	h.finish("i-0a1b2c3d4e5f60718")
	_, err := c.PollOnce(testenv.Context(t), 0)
	require.NoError(t, err)
	visible, inFlight := q.depth(t, q.url)
	require.Equal(t, 1, visible+inFlight, "deleting one never deletes the other")
	h.finish("i-0c5e2a7b9d1f34e86")
	_, err = c.PollOnce(testenv.Context(t), 0)
	require.NoError(t, err)
	visible, inFlight = q.depth(t, q.url)
	require.Zero(t, visible+inFlight)
}

// byInstance holds each lifecycle action until the test finishes its instance.
type byInstance struct {
	mu    sync.Mutex
	done  map[string]bool
	calls int
}

func (b *byInstance) Handle(_ context.Context, ev events.Event) (events.Disposition, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls++
	if b.done[ev.Lifecycle.InstanceID] {
		return events.Done, nil
	}
	return events.Hold, nil
}

func (b *byInstance) finish(id string) { b.mu.Lock(); b.done[id] = true; b.mu.Unlock() }
func (b *byInstance) count() int       { b.mu.Lock(); defer b.mu.Unlock(); return b.calls }

// batchCounter counts the SQS deletes the consumer sends to kumo.
type batchCounter struct {
	*sqs.Client
	mu               sync.Mutex
	batches, singles int
}

func (b *batchCounter) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	b.mu.Lock()
	b.singles++
	b.mu.Unlock()
	return b.Client.DeleteMessage(ctx, in, o...)
}

func (b *batchCounter) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	b.mu.Lock()
	b.batches++
	b.mu.Unlock()
	return b.Client.DeleteMessageBatch(ctx, in, o...)
}

// TestKumoWakeUpsAreDeletedWithDeleteMessageBatch: on a real SQS implementation, the
// wake-ups are deleted with DeleteMessageBatch across receives (10 a call), none with DeleteMessage, and
// every one is gone from the queue and counted once; the lifecycle action beside them keeps its own delete.
func TestKumoWakeUpsAreDeletedWithDeleteMessageBatch(t *testing.T) {
	q := newQueues(t, 5)
	api := &batchCounter{Client: q.api}
	h := &scripted{script: []events.Disposition{events.Done}}
	c := &events.Consumer{SQS: api, QueueURL: q.url, Handler: h, Clock: clock.RealClock{}, Log: zap.NewNop(), VisibilityTimeout: 30 * time.Second}
	for range 12 {
		q.send(t, fixtureBody(t, "instance-launch-successful.json"))
	}
	q.send(t, fixtureBody(t, "asg-hook-direct-terminating.json"))
	pollUntil(t, c, func() bool { return h.calls() >= 13 })
	c.FlushDeletes(context.Background()) // what Run does on shutdown: the two wake-ups short of a batch
	visible, inFlight := q.depth(t, q.url)
	require.Zero(t, visible+inFlight, "every message deleted")
	require.Equal(t, int64(13), c.Stats.Processed.Load(), "each counted once")
	api.mu.Lock()
	defer api.mu.Unlock()
	require.Equal(t, 1, api.singles, "the lifecycle action's own DeleteMessage, none per wake-up")
	require.Equal(t, 2, api.batches, "12 wake-ups, batched across receives: one batch of 10 and the flush of the last 2")
}
