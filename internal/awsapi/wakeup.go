package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// OperatorQueue is the one SQS call of the operator commands (approve, rollback, pause, resume): the operator
// wake-up they send to the agent's queue once their DynamoDB write is durable. The agent itself sends no
// message. A failed send is never the command's failure: the table write is its effect (docs/operations.md,
// "Waking the agent"). Amazon SQS API Reference, "SendMessage": sqs:SendMessage on the queue, and
// kms:GenerateDataKey on a queue encrypted with a customer managed key.
type OperatorQueue interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ OperatorQueue = (*sqs.Client)(nil)
