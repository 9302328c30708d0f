package sim

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// GetQueueAttributes answers the queue attributes the agent's start-up check and health check read: QueueArn,
// RedrivePolicy (deadLetterTargetArn and maxReceiveCount, only for a queue with a dead-letter queue),
// VisibilityTimeout (seconds), ApproximateNumberOfMessages and ApproximateNumberOfMessagesNotVisible; "All"
// names every one. Other names are left out of the answer. Amazon SQS API Reference, "GetQueueAttributes".
// Errors: QueueDoesNotExist.
func (c *SQSClient) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "sqs:GetQueueAttributes")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &sqs.GetQueueAttributesInput{}
	}
	q, err := s.findQueue(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	visible, inFlight := 0, 0
	now := s.now()
	for _, m := range s.live(q) {
		if m.visibleAt.After(now) {
			inFlight++
		} else {
			visible++
		}
	}
	all := map[string]string{
		string(sqstypes.QueueAttributeNameQueueArn):                              q.arn,
		string(sqstypes.QueueAttributeNameVisibilityTimeout):                     strconv.Itoa(int(q.visibility.Seconds())),
		string(sqstypes.QueueAttributeNameApproximateNumberOfMessages):           strconv.Itoa(visible),
		string(sqstypes.QueueAttributeNameApproximateNumberOfMessagesNotVisible): strconv.Itoa(inFlight),
	}
	if q.dlq != nil {
		policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": q.dlq.arn, "maxReceiveCount": q.maxReceive})
		all[string(sqstypes.QueueAttributeNameRedrivePolicy)] = string(policy)
	}
	out := map[string]string{}
	for _, n := range in.AttributeNames {
		if n == sqstypes.QueueAttributeNameAll {
			return &sqs.GetQueueAttributesOutput{Attributes: all}, nil
		}
		if v, ok := all[string(n)]; ok {
			out[string(n)] = v
		}
	}
	return &sqs.GetQueueAttributesOutput{Attributes: out}, nil
}
