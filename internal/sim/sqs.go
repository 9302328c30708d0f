package sim

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// sqsService is Amazon SQS: queues and their messages.
type sqsService struct {
	*world

	queues      map[string]*queue // by queue URL
	queueByName map[string]*queue
}

const (
	// defaultVisibilityTimeout is a queue's default visibility timeout. Amazon SQS Developer Guide, "Amazon SQS
	// visibility timeout": 30 seconds by default, 0 to 12 hours.
	defaultVisibilityTimeout = 30 * time.Second
	maxVisibilityTimeout     = 12 * time.Hour
	// retention is how long a message stays in a queue. Amazon SQS Developer Guide, "Amazon SQS message
	// lifecycle" (the default retention period is 4 days).
	retention = 4 * 24 * time.Hour
)

type queue struct {
	name, url, arn string
	visibility     time.Duration
	maxReceive     int
	dlq            *queue
	msgs           []*message
	handles        map[string]*message // every receipt handle ever issued
}

type message struct {
	id, body, md5 string
	sentAt        time.Time
	receiveCount  int
	firstReceive  time.Time
	visibleAt     time.Time
	handle        string // the most recent receipt handle
	deleted       bool
}

// CreateQueue creates a standard queue and returns its URL (https://sqs.<region>.amazonaws.com/<account>/<name>).
// With maxReceiveCount > 0 its redrive policy moves a message to the queue named dlqName (created when missing)
// once it has been received maxReceiveCount times. Setup helper: not counted.
func (s *sqsService) CreateQueue(name string, maxReceiveCount int, dlqName string) (queueURL string) {
	defer s.lock()()
	q := s.createQueue(name)
	if maxReceiveCount > 0 && dlqName != "" {
		q.maxReceive = maxReceiveCount
		q.dlq = s.createQueue(dlqName)
	}
	return q.url
}

func (s *sqsService) createQueue(name string) *queue {
	if q := s.queueByName[name]; q != nil {
		return q
	}
	q := &queue{
		name:       name,
		url:        fmt.Sprintf("https://sqs.%s.amazonaws.com/%s/%s", s.opts.Region, s.opts.AccountID, name),
		arn:        fmt.Sprintf("arn:aws:sqs:%s:%s:%s", s.opts.Region, s.opts.AccountID, name),
		visibility: defaultVisibilityTimeout,
		handles:    map[string]*message{},
	}
	s.queues[q.url] = q
	s.queueByName[name] = q
	return q
}

// SendMessage puts a message on a queue and returns its message id. Setup helper: not counted. It panics when
// the queue does not exist.
func (s *sqsService) SendMessage(queueURL, body string) (messageID string) {
	defer s.lock()()
	id := s.enqueue(queueURL, body)
	if id == "" {
		panic("sim: no queue " + queueURL)
	}
	return id
}

// enqueue adds a message to a queue and returns its id ("" when the queue does not exist: the sender's
// delivery fails, as a lifecycle hook's notification to a deleted queue does).
func (s *sqsService) enqueue(queueURL, body string) string {
	if s.queues[queueURL] == nil {
		return ""
	}
	id := s.uuid()
	s.deliver(queueURL, id, body)
	return id
}

// deliver puts a message with the given id on the queue, visible at once; nothing when the queue does not
// exist.
func (s *sqsService) deliver(queueURL, id, body string) {
	q := s.queues[queueURL]
	if q == nil {
		return
	}
	sum := md5.Sum([]byte(body))
	q.msgs = append(q.msgs, &message{id: id, body: body, md5: hex.EncodeToString(sum[:]), sentAt: s.now(), visibleAt: s.now()})
}

// queue returns the queue with the URL, or nil.
func (s *sqsService) queue(url string) *queue { return s.queues[url] }

// OperatorQueue returns the account's SQS client as the operator commands use it (awsapi.OperatorQueue: their
// wake-up's SendMessage).
func (a *Account) OperatorQueue() awsapi.OperatorQueue { return &SQSClient{s: a.sqs} }

// SendMessage is the API call (an operator command's wake-up): it puts MessageBody on the queue and answers its
// MessageId and MD5OfMessageBody (the MD5 digest of the body, hex). Amazon SQS API Reference, "SendMessage":
// QueueUrl and MessageBody are required (MissingParameter without them), an unknown queue is
// QueueDoesNotExist, and the message is visible at once without DelaySeconds (which the simulation does not
// model: the operator wake-up sets none).
func (c *SQSClient) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sqs:SendMessage")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &sqs.SendMessageInput{}
	}
	q, err := s.findQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if in.MessageBody == nil || *in.MessageBody == "" {
		return nil, apiError("MissingParameter", "The request must contain the parameter MessageBody.")
	}
	id := s.enqueue(q.url, *in.MessageBody)
	sum := md5.Sum([]byte(*in.MessageBody))
	return &sqs.SendMessageOutput{MessageId: ptr(id), MD5OfMessageBody: ptr(hex.EncodeToString(sum[:]))}, nil
}

// QueueDepth returns how many messages of a queue are visible and how many are in flight (received, not yet
// deleted, visibility timeout not yet expired).
func (s *sqsService) QueueDepth(queueURL string) (visible, inFlight int) {
	defer s.lock()()
	q := s.queues[queueURL]
	if q == nil {
		return 0, 0
	}
	now := s.now()
	for _, m := range s.live(q) {
		if m.visibleAt.After(now) {
			inFlight++
		} else {
			visible++
		}
	}
	return visible, inFlight
}

// QueueMessages returns the bodies of every message still on a queue (visible or in flight), oldest first.
func (s *sqsService) QueueMessages(queueURL string) []string {
	defer s.lock()()
	q := s.queues[queueURL]
	if q == nil {
		return nil
	}
	var out []string
	for _, m := range s.live(q) {
		out = append(out, m.body)
	}
	return out
}

// live drops deleted and expired messages and returns the rest.
func (s *sqsService) live(q *queue) []*message {
	kept := q.msgs[:0]
	for _, m := range q.msgs {
		if m.deleted || s.now().Sub(m.sentAt) >= retention {
			continue
		}
		kept = append(kept, m)
	}
	for i := len(kept); i < len(q.msgs); i++ {
		q.msgs[i] = nil
	}
	q.msgs = kept
	return kept
}

// SQSClient is the simulated Amazon SQS API. It implements awsapi.SQS.
type SQSClient struct{ s *sqsService }

var _ awsapi.SQS = (*SQSClient)(nil)

func (s *sqsService) findQueue(url *string) (*queue, error) {
	if url == nil {
		return nil, apiError("MissingParameter", "The request must contain the parameter QueueUrl.")
	}
	q := s.queues[*url]
	if q == nil {
		return nil, &sqstypes.QueueDoesNotExist{Message: ptr("The specified queue does not exist.")}
	}
	return q, nil
}

// ReceiveMessage returns up to MaxNumberOfMessages (1-10, default 1) visible messages and hides each for the
// queue's visibility timeout or the request's VisibilityTimeout. WaitTimeSeconds (0-20) is accepted but the call
// never blocks. Every receive issues a new receipt handle and counts toward the message's receive count; a
// message already received maxReceiveCount times moves to the dead-letter queue instead of being returned.
// Attributes carry ApproximateReceiveCount, SentTimestamp and ApproximateFirstReceiveTimestamp (epoch
// milliseconds) when requested by MessageSystemAttributeNames or AttributeNames ("All" for every one).
// Amazon SQS Developer Guide, "Amazon SQS visibility timeout", "Using dead-letter queues in Amazon SQS";
// Amazon SQS API Reference, "ReceiveMessage". Errors: QueueDoesNotExist, InvalidParameterValue.
func (c *SQSClient) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sqs:ReceiveMessage")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &sqs.ReceiveMessageInput{}
	}
	q, err := s.findQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	max := int(in.MaxNumberOfMessages)
	if max == 0 {
		max = 1
	}
	if max < 1 || max > 10 {
		return nil, apiError("InvalidParameterValue", "Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", in.MaxNumberOfMessages)
	}
	if in.WaitTimeSeconds < 0 || in.WaitTimeSeconds > 20 {
		return nil, apiError("InvalidParameterValue", "Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", in.WaitTimeSeconds)
	}
	visibility := q.visibility
	if in.VisibilityTimeout != 0 {
		visibility = time.Duration(in.VisibilityTimeout) * time.Second
		if visibility < 0 || visibility > maxVisibilityTimeout {
			return nil, apiError("InvalidParameterValue", "Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.", in.VisibilityTimeout)
		}
	}
	want := map[string]bool{}
	for _, n := range in.MessageSystemAttributeNames {
		want[string(n)] = true
	}
	for _, n := range in.AttributeNames {
		want[string(n)] = true
	}
	now := s.now()
	out := &sqs.ReceiveMessageOutput{Messages: []sqstypes.Message{}}
	for _, m := range s.live(q) {
		if len(out.Messages) == max {
			break
		}
		if m.visibleAt.After(now) {
			continue
		}
		// Amazon SQS Developer Guide, "Using dead-letter queues in Amazon SQS": when the receive count of a
		// message exceeds the source queue's maxReceiveCount, SQS moves it to the dead-letter queue.
		if q.dlq != nil && q.maxReceive > 0 && m.receiveCount >= q.maxReceive {
			m.deleted = true
			moved := *m
			moved.deleted = false
			moved.handle = ""
			moved.visibleAt = now
			q.dlq.msgs = append(q.dlq.msgs, &moved)
			continue
		}
		m.receiveCount++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.visibleAt = now.Add(visibility)
		// Amazon SQS Developer Guide, "Amazon SQS queue and message identifiers": every receive returns a new
		// receipt handle.
		m.handle = s.uuid() + "#" + m.id
		q.handles[m.handle] = m
		msg := sqstypes.Message{MessageId: ptr(m.id), ReceiptHandle: ptr(m.handle), Body: ptr(m.body), MD5OfBody: ptr(m.md5)}
		attrs := map[string]string{}
		if want["All"] || want["ApproximateReceiveCount"] {
			attrs["ApproximateReceiveCount"] = strconv.Itoa(m.receiveCount)
		}
		if want["All"] || want["SentTimestamp"] {
			attrs["SentTimestamp"] = strconv.FormatInt(m.sentAt.UnixMilli(), 10)
		}
		if want["All"] || want["ApproximateFirstReceiveTimestamp"] {
			attrs["ApproximateFirstReceiveTimestamp"] = strconv.FormatInt(m.firstReceive.UnixMilli(), 10)
		}
		if len(attrs) > 0 {
			msg.Attributes = attrs
		}
		out.Messages = append(out.Messages, msg)
	}
	return out, nil
}

// DeleteMessage deletes the message a receipt handle belongs to. Only the most recent receipt handle of a
// message deletes it; an older handle of the same message succeeds without deleting it, as does a handle of a
// message already deleted.
// Amazon SQS Developer Guide, "Amazon SQS queue and message identifiers" (receipt handles); API Reference,
// "DeleteMessage". Errors: QueueDoesNotExist, ReceiptHandleIsInvalid (a handle this queue never issued).
func (c *SQSClient) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sqs:DeleteMessage")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &sqs.DeleteMessageInput{}
	}
	q, err := s.findQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	m := q.handles[deref(in.ReceiptHandle)]
	if m == nil {
		return nil, &sqstypes.ReceiptHandleIsInvalid{Message: ptr(fmt.Sprintf("The input receipt handle \"%s\" is not a valid receipt handle.", deref(in.ReceiptHandle)))}
	}
	if m.handle == *in.ReceiptHandle {
		m.deleted = true
	}
	return &sqs.DeleteMessageOutput{}, nil
}

// DeleteMessageBatch deletes up to 10 messages by receipt handle, each entry as DeleteMessage would, and
// reports each entry in Successful or Failed by its Id: a handle this queue never issued fails its entry
// with ReceiptHandleIsInvalid (SenderFault true) and leaves the others deleted. The call itself fails with
// EmptyBatchRequest (no entry), TooManyEntriesInBatchRequest (more than 10), BatchEntryIdsNotDistinct (an
// Id twice), InvalidBatchEntryId (an Id that is empty, longer than 80 characters or not of letters, digits,
// hyphens and underscores) or QueueDoesNotExist. Amazon SQS API Reference, "DeleteMessageBatch";
// Amazon SQS Developer Guide, "Amazon SQS batch actions".
func (c *SQSClient) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sqs:DeleteMessageBatch")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &sqs.DeleteMessageBatchInput{}
	}
	q, err := s.findQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if len(in.Entries) == 0 {
		return nil, &sqstypes.EmptyBatchRequest{Message: ptr("There should be at least one DeleteMessageBatchRequestEntry in the request.")}
	}
	if len(in.Entries) > 10 {
		return nil, &sqstypes.TooManyEntriesInBatchRequest{Message: ptr(fmt.Sprintf("Maximum number of entries per request are 10. You have sent %d.", len(in.Entries)))}
	}
	ids := map[string]bool{}
	for _, e := range in.Entries {
		id := deref(e.Id)
		if !validBatchID(id) {
			return nil, &sqstypes.InvalidBatchEntryId{Message: ptr(fmt.Sprintf("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long. Invalid id: %q", id))}
		}
		if ids[id] {
			return nil, &sqstypes.BatchEntryIdsNotDistinct{Message: ptr(fmt.Sprintf("Id %s repeated.", id))}
		}
		ids[id] = true
	}
	out := &sqs.DeleteMessageBatchOutput{Successful: []sqstypes.DeleteMessageBatchResultEntry{}, Failed: []sqstypes.BatchResultErrorEntry{}}
	for _, e := range in.Entries {
		m := q.handles[deref(e.ReceiptHandle)]
		if m == nil {
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: e.Id, Code: ptr("ReceiptHandleIsInvalid"), SenderFault: true,
				Message: ptr(fmt.Sprintf("The input receipt handle \"%s\" is not a valid receipt handle.", deref(e.ReceiptHandle)))})
			continue
		}
		if m.handle == deref(e.ReceiptHandle) {
			m.deleted = true
		}
		out.Successful = append(out.Successful, sqstypes.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// validBatchID reports whether id is a valid batch entry Id: 1-80 letters, digits, hyphens and underscores.
func validBatchID(id string) bool {
	if id == "" || len(id) > 80 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// ChangeMessageVisibility sets the remaining visibility timeout (0-43200 seconds, counted from now) of a message
// in flight; 0 makes it visible at once.
// Amazon SQS Developer Guide, "Amazon SQS visibility timeout"; API Reference, "ChangeMessageVisibility".
// Errors: QueueDoesNotExist, ReceiptHandleIsInvalid, MessageNotInflight (deleted, moved, visible again, or a
// handle from an earlier receive), InvalidParameterValue.
func (c *SQSClient) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sqs:ChangeMessageVisibility")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &sqs.ChangeMessageVisibilityInput{}
	}
	q, err := s.findQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	d := time.Duration(in.VisibilityTimeout) * time.Second
	if d < 0 || d > maxVisibilityTimeout {
		return nil, apiError("InvalidParameterValue", "Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.", in.VisibilityTimeout)
	}
	m := q.handles[deref(in.ReceiptHandle)]
	if m == nil {
		return nil, &sqstypes.ReceiptHandleIsInvalid{Message: ptr(fmt.Sprintf("The input receipt handle \"%s\" is not a valid receipt handle.", deref(in.ReceiptHandle)))}
	}
	if m.deleted || m.handle != *in.ReceiptHandle || !m.visibleAt.After(s.now()) {
		return nil, &sqstypes.MessageNotInflight{Message: ptr("Message does not exist or is not available for visibility timeout change.")}
	}
	m.visibleAt = s.now().Add(d)
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}
