package events_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// failOneEntry fails, in the first DeleteMessageBatch it passes on, the entry whose Id is failID: that entry
// is not sent to the queue and comes back Failed, as SQS reports an entry it could not delete (Amazon SQS
// API Reference, DeleteMessageBatch: BatchResultErrorEntry).
type failOneEntry struct {
	awsapi.SQS
	failID  string
	mu      sync.Mutex
	done    bool
	batches int
	entries int
	singles int
}

func (f *failOneEntry) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	f.mu.Lock()
	f.singles++
	f.mu.Unlock()
	return f.SQS.DeleteMessage(ctx, in, o...)
}

func (f *failOneEntry) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	f.mu.Lock()
	f.batches++
	f.entries += len(in.Entries)
	fail := !f.done
	f.done = true
	f.mu.Unlock()
	if !fail {
		return f.SQS.DeleteMessageBatch(ctx, in, o...)
	}
	pass := &sqs.DeleteMessageBatchInput{QueueUrl: in.QueueUrl}
	for _, e := range in.Entries {
		if aws.ToString(e.Id) != f.failID {
			pass.Entries = append(pass.Entries, e)
		}
	}
	out, err := f.SQS.DeleteMessageBatch(ctx, pass, o...)
	if err != nil {
		return nil, err
	}
	out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: aws.String(f.failID), Code: aws.String("InternalError"),
		Message: aws.String("injected"), SenderFault: false})
	return out, nil
}

// wakeRecorder records the instances of the wake-ups it is handed (the agent's wake set) and completes
// everything else at once, recording its kind.
type wakeRecorder struct {
	mu     sync.Mutex
	woken  map[string]int // instance id -> times recorded
	others []events.Kind
	hold   bool // lifecycle actions are held (a drain under way) instead of done
}

func (h *wakeRecorder) Handle(_ context.Context, ev events.Event) (events.Disposition, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Kind == events.KindWakeUp {
		if h.woken == nil {
			h.woken = map[string]int{}
		}
		h.woken[ev.Wake.InstanceID]++
		return events.Done, nil
	}
	h.others = append(h.others, ev.Kind)
	if h.hold && ev.Kind == events.KindLifecycleAction {
		return events.Hold, nil
	}
	return events.Done, nil
}

// TestDeleteMessageBatchWithOneFailedEntryLosesNoWakeUp: ten handled wake-ups are
// deleted with one DeleteMessageBatch and no DeleteMessage; the one entry SQS reports Failed is not counted
// as processed, stays on the queue, comes back after its visibility timeout and is recorded again, so its
// look is not lost; then it is deleted and counted.
func TestDeleteMessageBatchWithOneFailedEntryLosesNoWakeUp(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent-wake-up", 5, "patch-agent-dlq")
	wake, err := os.ReadFile("testdata/instance-launch-successful.json")
	require.NoError(t, err)
	for range 10 {
		acct.SendMessage(url, string(wake))
	}
	api := &failOneEntry{SQS: acct.SQS(), failID: "3"}
	h := &wakeRecorder{}
	c := &events.Consumer{SQS: api, QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop(), WakeUpQueue: true, VisibilityTimeout: time.Minute}

	n, err := c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, 1, api.batches, "one DeleteMessageBatch for ten wake-ups")
	require.Equal(t, 10, api.entries)
	require.Zero(t, api.singles, "no DeleteMessage per wake-up")
	require.Equal(t, int64(9), c.Stats.Processed.Load(), "the failed entry is not counted as deleted")
	visible, inFlight := acct.QueueDepth(url)
	require.Equal(t, [2]int{0, 1}, [2]int{visible, inFlight}, "the failed entry's message is still on the queue")

	clk.Step(time.Minute + time.Second) // its visibility timeout lapses
	n, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the wake-up whose delete failed comes back")
	var recorded int
	for _, k := range h.woken {
		recorded += k
	}
	require.Equal(t, 11, recorded, "and is recorded again: its look is not lost")
	require.Equal(t, int64(9), c.Stats.Processed.Load(), "alone, its delete waits for more wake-ups or its deadline")

	clk.Step(c.DeleteDeadline())
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(10), c.Stats.Processed.Load())
	visible, inFlight = acct.QueueDepth(url)
	require.Equal(t, [2]int{0, 0}, [2]int{visible, inFlight})
	require.Zero(t, c.Stats.Misrouted.Load())
}

// TestMisroutedLifecycleActionOnTheWakeUpQueueIsNotLost: a lifecycle action that a
// mis-wired rule sends to the wake-up queue is handed to the Handler like on the main queue — held while
// its drain runs, deleted only when it is Done — and counted as mis-routed, never deleted with the wake-ups
// beside it.
func TestMisroutedLifecycleActionOnTheWakeUpQueueIsNotLost(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent-wake-up", 5, "patch-agent-dlq")
	wake, err := os.ReadFile("testdata/instance-launch-successful.json")
	require.NoError(t, err)
	hook, err := os.ReadFile("testdata/asg-hook-direct-terminating.json")
	require.NoError(t, err)
	for range 3 {
		acct.SendMessage(url, string(wake))
	}
	acct.SendMessage(url, string(hook))
	h := &wakeRecorder{hold: true}
	c := &events.Consumer{SQS: acct.SQS(), QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop(), WakeUpQueue: true}

	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []events.Kind{events.KindLifecycleAction}, h.others, "the lifecycle action is handled")
	require.Equal(t, int64(1), c.Stats.Misrouted.Load())
	require.Equal(t, int64(1), c.Stats.Held.Load(), "held while its drain runs")
	clk.Step(c.DeleteDeadline()) // the wake-ups' batch is due
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Len(t, acct.QueueMessages(url), 1, "the wake-ups are deleted, the lifecycle action is not")
	require.Equal(t, int64(1), c.Stats.Held.Load(), "still held")

	h.mu.Lock()
	h.hold = false // the drain is over: the next look completes it
	h.mu.Unlock()
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []events.Kind{events.KindLifecycleAction, events.KindLifecycleAction, events.KindLifecycleAction}, h.others)
	require.Empty(t, acct.QueueMessages(url), "deleted once Done")
	require.Equal(t, int64(1), c.Stats.Misrouted.Load(), "counted once, not on every look")
	require.Equal(t, int64(4), c.Stats.Processed.Load())
}

// TestSumStatsAddsUpBothQueuesConsumers: the message metrics of an agent with a wake-up queue count both
// consumers (internal/cli/runcmd, run.go): counts are added, the oldest message age is the larger one.
func TestSumStatsAddsUpBothQueuesConsumers(t *testing.T) {
	var a, b events.Stats
	a.Processed.Store(3)
	a.Ignored.Store(1)
	a.OldestMessageAgeSeconds.Store(4)
	b.Processed.Store(10)
	b.Failed.Store(2)
	b.Held.Store(1)
	b.Misrouted.Store(1)
	b.OldestMessageAgeSeconds.Store(9)
	sum := events.SumStats(&a, &b)
	require.Equal(t, []int64{13, 1, 2, 1, 1, 9}, []int64{sum.Processed.Load(), sum.Ignored.Load(), sum.Failed.Load(),
		sum.Held.Load(), sum.Misrouted.Load(), sum.OldestMessageAgeSeconds.Load()})
}

// TestOperatorWakeUpsOnTheWakeUpQueueAreWakeUpsNotMisrouted: the operator commands send
// their wake-ups to the wake-up queue when the stack has one (its policy admits the operator roles), so a
// burst of them never delays a lifecycle action on the main queue. There they are wake-ups: handed to the
// Handler, deleted with the poll's one DeleteMessageBatch, and not logged or counted as mis-routed.
func TestOperatorWakeUpsOnTheWakeUpQueueAreWakeUpsNotMisrouted(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent-wake-up", 5, "patch-agent-dlq")
	op, err := os.ReadFile("testdata/operator-wakeup-approve.json")
	require.NoError(t, err)
	for range 5 {
		acct.SendMessage(url, string(op))
	}
	api := &failOneEntry{SQS: acct.SQS(), done: true} // counts the calls, fails none
	h := &wakeRecorder{}
	c := &events.Consumer{SQS: api, QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop(), WakeUpQueue: true}

	n, err := c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	require.Equal(t, []events.Kind{events.KindOperatorWakeUp, events.KindOperatorWakeUp, events.KindOperatorWakeUp,
		events.KindOperatorWakeUp, events.KindOperatorWakeUp}, h.others, "each is handed to the agent")
	require.Zero(t, c.Stats.Misrouted.Load(), "an operator wake-up belongs on the wake-up queue")
	require.Zero(t, api.batches, "five wake-ups wait for more or for their deadline")
	clk.Step(c.DeleteDeadline())
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, api.batches, "deleted with one DeleteMessageBatch")
	require.Zero(t, api.singles, "no DeleteMessage each")
	require.Equal(t, int64(5), c.Stats.Processed.Load())
	require.Empty(t, acct.QueueMessages(url))
}

// receiveWaits records the WaitTimeSeconds of every ReceiveMessage it passes on.
type receiveWaits struct {
	*failOneEntry
	waits []int32
}

func (r *receiveWaits) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	r.mu.Lock()
	r.waits = append(r.waits, in.WaitTimeSeconds)
	r.mu.Unlock()
	return r.failOneEntry.ReceiveMessage(ctx, in, o...)
}

// TestWakeUpDeletesAreBatchedAcrossReceives: handled wake-ups arriving a few per receive are deleted together —
// one DeleteMessageBatch once 10 are pending, the rest when the oldest has waited DeleteDeadline (a quarter of
// the visibility timeout) — and a long poll with wake-ups pending waits no longer than that deadline, so no
// handled wake-up outlives its visibility timeout.
func TestWakeUpDeletesAreBatchedAcrossReceives(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent-wake-up", 5, "patch-agent-dlq")
	wake, err := os.ReadFile("testdata/instance-launch-successful.json")
	require.NoError(t, err)
	api := &receiveWaits{failOneEntry: &failOneEntry{SQS: acct.SQS(), done: true}}
	c := &events.Consumer{SQS: api, QueueURL: url, Handler: &wakeRecorder{}, Clock: clk, Log: zap.NewNop(), WakeUpQueue: true,
		VisibilityTimeout: 2 * time.Minute}
	require.Equal(t, 30*time.Second, c.DeleteDeadline())

	for i := range 3 { // 4 wake-ups a receive, 5 s apart: 12 handled in 10 s
		for range 4 {
			acct.SendMessage(url, string(wake))
		}
		n, err := c.PollOnce(ctx, 20*time.Second)
		require.NoError(t, err)
		require.Equal(t, 4, n)
		if i < 2 {
			require.Zero(t, api.batches, "fewer than 10 pending and none due: no delete yet")
			clk.Step(5 * time.Second)
		}
	}
	require.Equal(t, 1, api.batches, "the tenth pending wake-up sends one batch")
	require.Equal(t, 10, api.entries)
	require.Equal(t, int64(10), c.Stats.Processed.Load())
	require.Equal(t, []int32{20, 20, 20}, api.waits[:3])

	clk.Step(25 * time.Second) // the two left were handled at +10 s: their deadline is +40 s, 5 s from now
	_, err = c.PollOnce(ctx, 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, int32(5), api.waits[3], "the receive returns by the oldest pending wake-up's deadline")
	require.Equal(t, 1, api.batches)
	clk.Step(5 * time.Second)
	_, err = c.PollOnce(ctx, 20*time.Second)
	require.NoError(t, err)
	require.Equal(t, int32(0), api.waits[4], "the deadline has come: no wait")
	require.Equal(t, 2, api.batches, "due: the last two are deleted")
	require.Equal(t, 12, api.entries)
	require.Zero(t, api.singles, "never a DeleteMessage per wake-up")
	require.Equal(t, int64(12), c.Stats.Processed.Load())
	visible, inFlight := acct.QueueDepth(url)
	require.Equal(t, [2]int{0, 0}, [2]int{visible, inFlight})
}

// TestLifecycleActionIsNeverDeletedWithTheWakeUpBatch (invariant 8 with batched wake-up deletes): on the
// main queue, a lifecycle action held while its drain runs stays on the queue through the wake-ups' batch
// deletes beside it; a parameter change is deleted on its own with DeleteMessage once handled, never kept for
// a batch; the lifecycle action is deleted with DeleteMessage only once its handler says Done.
func TestLifecycleActionIsNeverDeletedWithTheWakeUpBatch(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent", 5, "patch-agent-dlq")
	read := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		require.NoError(t, err)
		return string(b)
	}
	acct.SendMessage(url, read("asg-hook-direct-terminating.json"))
	acct.SendMessage(url, read("ssm-parameter-change-update-golden-ami.json"))
	for range 10 {
		acct.SendMessage(url, read("instance-launch-successful.json"))
	}
	api := &failOneEntry{SQS: acct.SQS(), done: true}
	h := &wakeRecorder{hold: true}
	c := &events.Consumer{SQS: api, QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop()}

	for range 2 { // 12 messages: two receives of up to 10
		_, err := c.PollOnce(ctx, 0)
		require.NoError(t, err)
	}
	require.Equal(t, 1, api.singles, "the parameter change: its own DeleteMessage once handled")
	require.Equal(t, 1, api.batches, "the ten wake-ups: one batch")
	require.Equal(t, 10, api.entries, "the batch holds wake-ups only")
	require.Equal(t, int64(1), c.Stats.Held.Load())
	clk.Step(c.DeleteDeadline())
	_, err := c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Len(t, acct.QueueMessages(url), 1, "the held lifecycle action is still on the queue")
	require.Contains(t, acct.QueueMessages(url)[0], "LifecycleActionToken")

	h.mu.Lock()
	h.hold = false
	h.mu.Unlock()
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, acct.QueueMessages(url), "deleted once Done")
	require.Equal(t, 2, api.singles, "with its own DeleteMessage")
	require.Equal(t, 10, api.entries)
}

// TestRunDeletesPendingWakeUpsOnShutdown: the handled wake-ups still waiting for their batch are deleted
// when Run returns, so a clean shutdown costs no second look.
func TestRunDeletesPendingWakeUpsOnShutdown(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent-wake-up", 5, "patch-agent-dlq")
	wake, err := os.ReadFile("testdata/instance-launch-successful.json")
	require.NoError(t, err)
	for range 3 {
		acct.SendMessage(url, string(wake))
	}
	api := &failOneEntry{SQS: acct.SQS(), done: true}
	c := &events.Consumer{SQS: api, QueueURL: url, Handler: &wakeRecorder{}, Clock: clk, Log: zap.NewNop(), WakeUpQueue: true}
	_, err = c.PollOnce(context.Background(), 0)
	require.NoError(t, err)
	require.Zero(t, api.batches)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, c.Run(ctx, func(int) time.Duration { return 0 }))
	require.Equal(t, 1, api.batches)
	require.Empty(t, acct.QueueMessages(url), "deleted on shutdown")
	require.Equal(t, int64(3), c.Stats.Processed.Load())
}
