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
	// OldestMessageAgeSeconds is the age, in whole seconds, of the oldest message the last receive returned
	// (now minus its SentTimestamp); 0 when that receive returned none.
	OldestMessageAgeSeconds atomic.Int64
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
	Stats       Stats

	mu   sync.Mutex
	held map[string]*heldMessage // by SQS MessageId
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

// receiveAttributes are the message system attributes requested on receive: the receive count for the logs,
// the sent timestamp for Stats.OldestMessageAgeSeconds.
var receiveAttributes = []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameApproximateReceiveCount,
	sqstypes.MessageSystemAttributeNameSentTimestamp}

// PollOnce receives one batch (waiting up to wait for messages; 0 returns at once, up to 20 s is a long
// poll), handles each message, then looks again at the messages held from earlier polls. It returns the
// number of messages received. Errors of single messages are logged and counted, not returned.
func (c *Consumer) PollOnce(ctx context.Context, wait time.Duration) (int, error) {
	out, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.QueueURL),
		MaxNumberOfMessages:         maxMessagesPerReceive,
		WaitTimeSeconds:             int32(wait / time.Second),
		VisibilityTimeout:           int32(c.visibility() / time.Second),
		MessageSystemAttributeNames: receiveAttributes,
	})
	if err != nil {
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
	return len(out.Messages), nil
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

// Run long-polls (20 s) until ctx is cancelled, then releases held messages. Receive errors are logged and
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
	return c.Release(release)
}
