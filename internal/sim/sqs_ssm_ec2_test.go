package sim

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

func receiveOne(t *testing.T, a *Account, url string, visibility int32) *sqstypes.Message {
	t.Helper()
	out, err := a.SQS().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), VisibilityTimeout: visibility,
		WaitTimeSeconds: 20, MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{"ApproximateReceiveCount", "SentTimestamp"}})
	require.NoError(t, err)
	if len(out.Messages) == 0 {
		return nil
	}
	require.Len(t, out.Messages, 1)
	return &out.Messages[0]
}

func TestSQSVisibilityTimeout(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	url := a.CreateQueue("agent", 0, "")
	require.Equal(t, "https://sqs.us-east-1.amazonaws.com/111122223333/agent", url)
	id := a.SendMessage(url, "hello")

	m := receiveOne(t, a, url, 0)
	require.Equal(t, id, aws.ToString(m.MessageId))
	require.Equal(t, "1", m.Attributes["ApproximateReceiveCount"])
	require.Equal(t, strconv.FormatInt(start.UnixMilli(), 10), m.Attributes["SentTimestamp"])
	visible, inFlight := a.QueueDepth(url)
	require.Equal(t, [2]int{0, 1}, [2]int{visible, inFlight})

	a.Advance(29 * time.Second)
	require.Nil(t, receiveOne(t, a, url, 0), "hidden for the default 30s")
	a.Advance(time.Second)
	again := receiveOne(t, a, url, 60)
	require.Equal(t, "2", again.Attributes["ApproximateReceiveCount"])
	require.NotEqual(t, aws.ToString(m.ReceiptHandle), aws.ToString(again.ReceiptHandle), "every receive gets a new receipt handle")

	_, err := a.SQS().ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url), ReceiptHandle: again.ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err)
	third := receiveOne(t, a, url, 0)
	require.NotNil(t, third, "visibility 0 makes it visible at once")

	_, err = a.SQS().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
	require.NoError(t, err, "an older receipt handle is accepted ...")
	visible, inFlight = a.QueueDepth(url)
	require.Equal(t, 1, visible+inFlight, "... but does not delete the message")

	_, err = a.SQS().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: third.ReceiptHandle})
	require.NoError(t, err)
	visible, inFlight = a.QueueDepth(url)
	require.Zero(t, visible+inFlight)

	_, err = a.SQS().DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("bogus")})
	requireAPIError(t, err, "ReceiptHandleIsInvalid", "bogus")

	_, err = a.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
	requireAPIError(t, err, "InvalidParameterValue", "MaxNumberOfMessages")
	_, err = a.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url + "x")})
	requireAPIError(t, err, "QueueDoesNotExist", "does not exist")
}

func TestSQSRedriveToDeadLetterQueue(t *testing.T) {
	a := newAccount(t)
	url := a.CreateQueue("agent", 3, "agent-dlq")
	dlq := "https://sqs.us-east-1.amazonaws.com/111122223333/agent-dlq"
	a.SendMessage(url, "poison")

	for i := 1; i <= 3; i++ {
		m := receiveOne(t, a, url, 0)
		require.NotNil(t, m)
		require.Equal(t, strconv.Itoa(i), m.Attributes["ApproximateReceiveCount"])
		a.Advance(30 * time.Second)
	}
	require.Nil(t, receiveOne(t, a, url, 0), "the fourth receive moves it to the DLQ instead")
	visible, inFlight := a.QueueDepth(url)
	require.Zero(t, visible+inFlight)
	visible, _ = a.QueueDepth(dlq)
	require.Equal(t, 1, visible)
	require.Equal(t, []string{"poison"}, a.QueueMessages(dlq))
}

func TestSSMGetParameters(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	name := "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
	a.PutParameter(name, "ami-1")
	a.Advance(time.Hour)
	a.PutParameter(name, "ami-2")

	out, err := a.SSM().GetParameters(ctx, &ssm.GetParametersInput{Names: []string{name, "/missing", name + ":1"}})
	require.NoError(t, err)
	require.Equal(t, []string{"/missing"}, out.InvalidParameters)
	require.Len(t, out.Parameters, 2)
	p := out.Parameters[0]
	require.Equal(t, "ami-2", aws.ToString(p.Value))
	require.Equal(t, int64(2), p.Version)
	require.Equal(t, start.Add(time.Hour), aws.ToTime(p.LastModifiedDate))
	require.Equal(t, "String", string(p.Type))
	require.Equal(t, "text", aws.ToString(p.DataType))
	require.Equal(t, "arn:aws:ssm:us-east-1::parameter"+name, aws.ToString(p.ARN))
	require.Equal(t, "ami-1", aws.ToString(out.Parameters[1].Value))

	names := make([]string, 11)
	for i := range names {
		names[i] = name
	}
	_, err = a.SSM().GetParameters(ctx, &ssm.GetParametersInput{Names: names})
	requireAPIError(t, err, "ValidationException", "less than or equal to 10")
}

func TestDescribeInstances(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1, Tags: map[string]string{"patch-agent/enabled": "true"}})
	id := a.Group("g").Instances[0].ID

	out, err := a.EC2().DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	require.NoError(t, err)
	inst := out.Reservations[0].Instances[0]
	require.Equal(t, "ami-old", aws.ToString(inst.ImageId))
	require.Equal(t, ec2types.InstanceStateNameRunning, inst.State.Name)
	require.Equal(t, int32(16), aws.ToInt32(inst.State.Code))
	require.Equal(t, "us-east-1a", aws.ToString(inst.Placement.AvailabilityZone))
	require.Equal(t, start, aws.ToTime(inst.LaunchTime))

	_, err = a.EC2().DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id, "i-0aaaaaaaaaaaaaaaa"}})
	requireAPIError(t, err, "InvalidInstanceID.NotFound", "i-0aaaaaaaaaaaaaaaa")
	require.True(t, awsapi.IsInstanceNotFound(err))

	filtered, err := a.EC2().DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:aws:autoscaling:groupName"), Values: []string{"g"}},
		{Name: aws.String("instance-state-name"), Values: []string{"running"}}}})
	require.NoError(t, err)
	require.Len(t, filtered.Reservations, 1)
}
