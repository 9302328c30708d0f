package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/logging"
)

// Disposition is what a Handler decided for one message.
type Disposition int

const (
	// Done: the message's effect is durable (state written, lifecycle action completed); delete it.
	Done Disposition = iota
	// Ignored: the message is deliberately not acted on (test notification, unmanaged group, unknown kind);
	// delete it and count it as ignored.
	Ignored
	// Hold: the work goes on (a drain); keep the message invisible, extending its visibility, and hand it to
	// the Handler again on the next poll until it returns Done or Ignored.
	Hold
)

// Handler acts on one parsed event. An error with disposition Hold keeps the message held and retries on the
// next poll (work under way survives passing faults); any other error leaves the message on the queue: it
// becomes visible again after its visibility timeout and, after the queue's maxReceiveCount, moves to the
// dead-letter queue.
type Handler interface {
	Handle(ctx context.Context, ev Event) (Disposition, error)
}

// Stats counts messages by outcome. Safe for concurrent use.
type Stats struct {
	Processed atomic.Int64 // deleted after their effect was durable
	Ignored   atomic.Int64 // deleted without effect, deliberately
	Failed    atomic.Int64 // malformed or failed handling; left for redelivery / the DLQ
	Held      atomic.Int64 // currently held (work in progress)
	// Misrouted counts messages of another kind than a wake-up received on the wake-up queue (a rule
	// mis-wired to it): handled as on the main queue, and logged.
	Misrouted atomic.Int64
	// OldestMessageAgeSeconds is the age, in whole seconds, of the oldest message the last receive returned
	// (now minus its SentTimestamp); 0 when that receive returned none.
	OldestMessageAgeSeconds atomic.Int64
}

// SumStats returns the counts of every consumer of stats added up (a fresh Stats, not updated afterwards):
// the agent's main queue and its wake-up queue reported as one. OldestMessageAgeSeconds is the largest.
func SumStats(stats ...*Stats) *Stats {
	sum := &Stats{}
	for _, st := range stats {
		sum.Processed.Add(st.Processed.Load())
		sum.Ignored.Add(st.Ignored.Load())
		sum.Failed.Add(st.Failed.Load())
		sum.Held.Add(st.Held.Load())
		sum.Misrouted.Add(st.Misrouted.Load())
		sum.OldestMessageAgeSeconds.Store(max(sum.OldestMessageAgeSeconds.Load(), st.OldestMessageAgeSeconds.Load()))
	}
	return sum
}

// Consumer receives messages from the agent's SQS queue and hands each to the Handler on its own (field case
// C2): a message is deleted only after its own effect is durable; malformed messages are never deleted, so
// the queue's redrive policy moves them to the dead-letter queue.
type Consumer struct {
	SQS      awsapi.SQS
	QueueURL string
	Handler  Handler
	Clock    clock.PassiveClock
	Log      *zap.Logger
	// VisibilityTimeout is requested on receive and re-extended for held messages. Default 2 minutes.
	VisibilityTimeout time.Duration
	// Concurrency bounds how many messages of one batch are handled at once. Default 4.
	Concurrency int
	// WakeUpQueue marks the consumer of the wake-up queue (--wake-up-queue-url), which the stack's wake-up
	// rules target so that no number of wake-ups delays a lifecycle action on the main queue. A message of
	// another kind on it (a lifecycle action or a parameter change a mis-wired rule sends there) is not
	// dropped: it is handled exactly as on the main queue (held, deleted once its effect is durable, or left
	// for the dead-letter queue) and logged as mis-routed (Stats.Misrouted).
	WakeUpQueue bool
	Stats       Stats

	mu   sync.Mutex
	held map[string]*heldMessage // by SQS MessageId
	// deletes are the handled wake-ups whose receipt handles wait for one DeleteMessageBatch, across
	// receives (flushDeletes), oldest first
	deletes []pendingDelete
}

// pendingDelete is a handled wake-up waiting for a DeleteMessageBatch; handled is when it was handled.
type pendingDelete struct {
	id, receipt string
	disp        Disposition
	log         *zap.Logger
	handled     time.Time
}

type heldMessage struct {
	event         Event
	receiptHandle string
	visibleAt     time.Time
}

// maxMessagesPerReceive is the SQS limit (Amazon SQS API Reference: ReceiveMessage, MaxNumberOfMessages 1-10).
const maxMessagesPerReceive = 10

func (c *Consumer) visibility() time.Duration {
	if c.VisibilityTimeout <= 0 {
		return 2 * time.Minute
	}
	return c.VisibilityTimeout
}

// DeleteDeadline is how long, at most, a handled wake-up's receipt handle waits for its DeleteMessageBatch:
// a quarter of the visibility timeout (30 s at the default 2 minutes), so the delete lands well before the
// message could become visible again (Amazon SQS Developer Guide, "Amazon SQS visibility timeout": a message
// not deleted within it is delivered again). A receive that has wake-ups pending waits no longer than the
// oldest one's deadline.
func (c *Consumer) DeleteDeadline() time.Duration { return c.visibility() / 4 }

// receiveAttributes are the message system attributes requested on receive: the receive count for the logs,
// the sent timestamp for Stats.OldestMessageAgeSeconds.
var receiveAttributes = []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount,
	sqstypes.MessageSystemAttributeNameSentTimestamp}

// PollOnce receives one batch (waiting up to wait for messages; 0 returns at once, up to 20 s is a long
// poll), handles each message, then looks again at the messages held from earlier polls. It returns the
// number of messages received. Errors of single messages are logged and counted, not returned.
func (c *Consumer) PollOnce(ctx context.Context, wait time.Duration) (int, error) {
	wait = c.waitBeforeDeadline(wait)
	out, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.QueueURL),
		MaxNumberOfMessages:         maxMessagesPerReceive,
		WaitTimeSeconds:             int32(wait / time.Second),
		VisibilityTimeout:           int32(c.visibility() / time.Second),
		MessageSystemAttributeNames: receiveAttributes,
	})
	if err != nil {
		c.flushDeletes(ctx, false) // a failing receive does not keep handled wake-ups past their deadline
		return 0, fmt.Errorf("receiving from %s: %w", c.QueueURL, err)
	}
	c.Stats.OldestMessageAgeSeconds.Store(oldestAgeSeconds(out.Messages, c.Clock.Now()))
	fresh := map[string]bool{}
	for _, m := range out.Messages {
		fresh[aws.ToString(m.MessageId)] = true
	}
	first, rest := prioritise(out.Messages)
	// Lifecycle actions first, then their heartbeats (the held actions), then everything else: a burst of
	// wake-up events never delays a lifecycle action's drain or heartbeat (docs/events.md, "Priority").
	c.handleAll(ctx, first)
	c.revisitHeld(ctx, fresh)
	c.handleAll(ctx, rest)
	c.flushDeletes(ctx, false)
	return len(out.Messages), nil
}

// waitBeforeDeadline shortens a receive's wait so that it returns by the deadline of the oldest pending
// wake-up delete (DeleteDeadline), whose flush follows the receive.
func (c *Consumer) waitBeforeDeadline(wait time.Duration) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.deletes) == 0 {
		return wait
	}
	left := c.deletes[0].handled.Add(c.DeleteDeadline()).Sub(c.Clock.Now())
	return max(0, min(wait, left))
}

// FlushDeletes deletes every handled wake-up still pending (DeleteMessageBatch, up to 10 a call) whatever
// its deadline. Run calls it on shutdown; a driver that stops polling calls it too.
func (c *Consumer) FlushDeletes(ctx context.Context) { c.flushDeletes(ctx, true) }

// maxEntriesPerBatch is the SQS limit of DeleteMessageBatch (Amazon SQS API Reference, DeleteMessageBatch:
// up to 10 entries; TooManyEntriesInBatchRequest beyond).
const maxEntriesPerBatch = 10

// flushDeletes deletes handled wake-ups with DeleteMessageBatch, up to 10 per call, instead of one
// DeleteMessage each, batching across receives: it sends a call for every full 10 pending and, once the
// oldest pending one has waited DeleteDeadline (or all is set: shutdown), for every one pending. A wake-up's
// effect is only "look at this target soon", recorded in memory before it is queued here; one whose delete
// is lost with the process (a crash before the flush) comes back after its visibility timeout and costs one
// look. Lifecycle actions, parameter changes and every other kind are never queued here: each is deleted on
// its own once its effect is durable (dispatch). Only the entries
// the answer lists as Successful are counted (Stats.Processed, Stats.Ignored); a Failed entry, or every
// entry of a call that failed, is not deleted: the message becomes visible again after its visibility
// timeout and is handled again (the record is idempotent), so no wake-up is lost and none is counted as
// deleted that was not. Amazon SQS API Reference, "DeleteMessageBatch" (each entry's result is reported
// individually; check Failed even when the call returns HTTP 200).
func (c *Consumer) flushDeletes(ctx context.Context, all bool) {
	c.mu.Lock()
	pending := c.deletes
	if !all && len(pending) > 0 && c.Clock.Now().Before(pending[0].handled.Add(c.DeleteDeadline())) {
		pending = pending[:len(pending)/maxEntriesPerBatch*maxEntriesPerBatch] // only full batches before the deadline
	}
	c.deletes = slices.Clone(c.deletes[len(pending):])
	c.mu.Unlock()
	for chunk := range slices.Chunk(pending, maxEntriesPerBatch) {
		entries := make([]sqstypes.DeleteMessageBatchRequestEntry, len(chunk))
		for i, p := range chunk {
			entries[i] = sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(p.receipt)}
		}
		out, err := c.SQS.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.QueueURL), Entries: entries})
		if err != nil {
			for _, p := range chunk {
				p.log.Warn("deleting handled wake-up failed; it comes back after its visibility timeout and is recorded again", zap.Error(err))
			}
			continue
		}
		for _, ok := range out.Successful {
			i, err := strconv.Atoi(aws.ToString(ok.Id))
			if err != nil || i < 0 || i >= len(chunk) {
				continue // not an id this call sent: nothing to count
			}
			if chunk[i].disp == Ignored {
				c.Stats.Ignored.Add(1)
			} else {
				c.Stats.Processed.Add(1)
			}
		}
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(chunk) {
				c.Log.Warn("deleting handled wake-ups: a failed entry names no entry of the call", zap.String(logging.Reason, aws.ToString(f.Id)))
				continue
			}
			chunk[i].log.Warn("deleting handled wake-up failed; it comes back after its visibility timeout and is recorded again",
				zap.String(logging.Reason, aws.ToString(f.Code)+": "+aws.ToString(f.Message)))
		}
	}
}

// received is one message of a receive with its parse result.
type received struct {
	msg sqstypes.Message
	ev  Event
	err error // from Parse: the message is malformed
}

// prioritise parses a batch and splits it into the lifecycle actions and the rest, each in arrival order.
// A malformed message goes with the rest.
func prioritise(msgs []sqstypes.Message) (first, rest []received) {
	for _, m := range msgs {
		ev, err := Parse([]byte(aws.ToString(m.Body)))
		r := received{msg: m, ev: ev, err: err}
		if err == nil && ev.Kind == KindLifecycleAction {
			if r.ev.Lifecycle != nil {
				r.ev.Lifecycle.SentAt = sentAt(m)
			}
			first = append(first, r)
			continue
		}
		rest = append(rest, r)
	}
	return first, rest
}

// handleAll handles msgs, up to Concurrency (default 4) at once, and returns when all are handled.
func (c *Consumer) handleAll(ctx context.Context, msgs []received) {
	n := c.Concurrency
	if n <= 0 {
		n = 4
	}
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for _, r := range msgs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.handleReceived(ctx, r)
		}()
	}
	wg.Wait()
}

// sentAt returns when SQS accepted m by its SentTimestamp attribute (epoch milliseconds); zero when it has
// no readable one.
func sentAt(m sqstypes.Message) time.Time {
	ms, err := strconv.ParseInt(m.Attributes[string(sqstypes.MessageSystemAttributeNameSentTimestamp)], 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// oldestAgeSeconds returns how old, in seconds, the oldest of msgs is at now by its SentTimestamp attribute
// (epoch milliseconds); messages without a readable one are left out.
func oldestAgeSeconds(msgs []sqstypes.Message, now time.Time) int64 {
	var oldest int64
	for _, m := range msgs {
		ms, err := strconv.ParseInt(m.Attributes[string(sqstypes.MessageSystemAttributeNameSentTimestamp)], 10, 64)
		if err != nil {
			continue
		}
		oldest = max(oldest, int64(now.Sub(time.UnixMilli(ms))/time.Second))
	}
	return oldest
}

// handleReceived handles one newly received message, parsed by prioritise.
func (c *Consumer) handleReceived(ctx context.Context, r received) {
	m, ev, err := r.msg, r.ev, r.err
	id := aws.ToString(m.MessageId)
	log := c.Log.With(zap.String(logging.MessageID, id), zap.String(logging.ReceiveCount, m.Attributes[string(sqstypes.MessageSystemAttributeNameApproximateReceiveCount)]))
	if err != nil {
		// Not deleted: after maxReceiveCount receives the redrive policy moves it to the dead-letter queue.
		c.Stats.Failed.Add(1)
		log.Error("malformed message left for the dead-letter queue", zap.Error(err))
		return
	}
	c.dispatch(ctx, log, id, aws.ToString(m.ReceiptHandle), ev)
}

// dispatch hands an event to the Handler and deletes, holds or leaves the message by the answer.
func (c *Consumer) dispatch(ctx context.Context, log *zap.Logger, id, receipt string, ev Event) {
	log = log.With(zap.String(logging.MessageKind, string(ev.Kind)))
	if c.WakeUpQueue && !ev.Kind.IsWakeUp() {
		c.misrouted(log, id, ev)
	}
	disp, err := c.Handler.Handle(ctx, ev)
	if err != nil && disp == Hold {
		// Work under way (a drain) hit an error, most likely a passing AWS fault: keep the message held and
		// try again on the next poll, so transient errors never walk a lifecycle action to the DLQ.
		c.Stats.Failed.Add(1)
		log.Warn("work on a held message failed; retrying on the next poll", zap.Error(err), zap.String("event", ev.Describe()))
		c.hold(ctx, log, id, receipt, ev)
		return
	}
	if err != nil {
		c.Stats.Failed.Add(1)
		c.unhold(id)
		log.Error("handling message failed; it will be redelivered", zap.Error(err), zap.String("event", ev.Describe()))
		return
	}
	if disp != Hold && ev.Kind.IsWakeUp() {
		// Its effect (the target recorded for a look) is in memory already: delete it with a later batch.
		c.unhold(id)
		c.mu.Lock()
		c.deletes = append(c.deletes, pendingDelete{id: id, receipt: receipt, disp: disp, log: log, handled: c.Clock.Now()})
		c.mu.Unlock()
		return
	}
	switch disp {
	case Hold:
		c.hold(ctx, log, id, receipt, ev)
		return
	case Ignored:
		c.Stats.Ignored.Add(1)
		if ev.Kind == KindTestNotification {
			log.Debug("message ignored", zap.String("event", ev.Describe())) // sent once per hook: not news
		} else {
			log.Info("message ignored", zap.String("event", ev.Describe()))
		}
	default:
		c.Stats.Processed.Add(1)
		log.Debug("message processed", zap.String("event", ev.Describe()))
	}
	c.unhold(id)
	if _, err := c.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(c.QueueURL), ReceiptHandle: aws.String(receipt)}); err != nil {
		// The effect is durable and idempotent: a redelivery finds it done and deletes again.
		log.Warn("deleting processed message failed; a redelivery will be recognised as done", zap.Error(err))
	}
}

// misrouted logs, once per message, a message of another kind than a wake-up received on the wake-up queue;
// dispatch then handles it as on the main queue. A held one is logged on its first handling only.
func (c *Consumer) misrouted(log *zap.Logger, id string, ev Event) {
	c.mu.Lock()
	_, held := c.held[id]
	c.mu.Unlock()
	if held {
		return
	}
	c.Stats.Misrouted.Add(1)
	log.Error("a message that is not a wake-up arrived on the wake-up queue; handling it as on the main queue (check the EventBridge rules and hooks that target the wake-up queue)",
		zap.String("event", ev.Describe()))
}

// hold keeps the message invisible while its work goes on, extending its visibility timeout before it lapses.
func (c *Consumer) hold(ctx context.Context, log *zap.Logger, id, receipt string, ev Event) {
	now := c.Clock.Now()
	c.mu.Lock()
	if c.held == nil {
		c.held = map[string]*heldMessage{}
	}
	h, ok := c.held[id]
	if !ok || h.receiptHandle != receipt {
		h = &heldMessage{event: ev, receiptHandle: receipt, visibleAt: now.Add(c.visibility())}
		c.held[id] = h
	}
	c.Stats.Held.Store(int64(len(c.held)))
	extend := h.visibleAt.Sub(now) < c.visibility()/2
	c.mu.Unlock()
	if !extend {
		return
	}
	_, err := c.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(c.QueueURL),
		ReceiptHandle: aws.String(receipt), VisibilityTimeout: int32(c.visibility() / time.Second)})
	if err != nil {
		log.Warn("extending message visibility failed; it may be redelivered (handling is idempotent)", zap.Error(err))
		return
	}
	c.mu.Lock()
	h.visibleAt = now.Add(c.visibility())
	c.mu.Unlock()
}

func (c *Consumer) unhold(id string) {
	c.mu.Lock()
	delete(c.held, id)
	c.Stats.Held.Store(int64(len(c.held)))
	c.mu.Unlock()
}

// revisitHeld hands every held message not received again in this poll back to the Handler.
func (c *Consumer) revisitHeld(ctx context.Context, skip map[string]bool) {
	c.mu.Lock()
	type item struct {
		id string
		h  heldMessage
	}
	var items []item
	for id, h := range c.held {
		if !skip[id] {
			items = append(items, item{id, *h})
		}
	}
	c.mu.Unlock()
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.id, b.id) }) // the same order every run
	for _, it := range items {
		c.dispatch(ctx, c.Log.With(zap.String(logging.MessageID, it.id)), it.id, it.h.receiptHandle, it.h.event)
	}
}

// Release makes every held message visible again at once (ChangeMessageVisibility 0), so that another
// replica, or this agent after a restart, picks the work up without waiting out the visibility timeout.
// Called on shutdown.
func (c *Consumer) Release(ctx context.Context) error {
	c.mu.Lock()
	held := c.held
	c.held = nil
	c.Stats.Held.Store(0)
	c.mu.Unlock()
	var errs []error
	for id, h := range held {
		if _, err := c.SQS.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(c.QueueURL),
			ReceiptHandle: aws.String(h.receiptHandle), VisibilityTimeout: 0}); err != nil {
			errs = append(errs, fmt.Errorf("releasing message %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// Run long-polls (20 s; shorter while handled wake-ups wait for their delete, DeleteDeadline) until ctx is
// cancelled, then deletes the handled wake-ups still pending and releases held messages. Receive errors are logged and
// retried after backoff, never fatal.
func (c *Consumer) Run(ctx context.Context, backoff func(attempt int) time.Duration) error {
	attempt := 0
	for ctx.Err() == nil {
		if _, err := c.PollOnce(ctx, 20*time.Second); err != nil && ctx.Err() == nil {
			attempt++
			c.Log.Warn("receiving messages failed; retrying", zap.Error(err), zap.String("attempt", strconv.Itoa(attempt)))
			select {
			case <-ctx.Done():
			case <-time.After(backoff(attempt)):
			}
			continue
		}
		attempt = 0
	}
	release, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.FlushDeletes(release)
	return c.Release(release)
}
