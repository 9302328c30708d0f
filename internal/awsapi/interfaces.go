// Package awsapi declares the narrow AWS service interfaces the agent uses — only the calls it makes, with the
// aws-sdk-go-v2 signatures — so that the real SDK clients, the simulated account (internal/sim) and test fakes
// are interchangeable. It also classifies AWS error codes (errors.go).
package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// AutoScaling is the subset of the Amazon EC2 Auto Scaling API the agent calls.
type AutoScaling interface {
	DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
	CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, optFns ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error)
	RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, optFns ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error)
	// DescribeAutoScalingInstances confirms an instance's group and lifecycle state before a drain: at most 50
	// InstanceIds a call; ids Auto Scaling does not know are left out of the answer, not an error.
	DescribeAutoScalingInstances(ctx context.Context, in *autoscaling.DescribeAutoScalingInstancesInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error)
	// DescribeWarmPool lists a group's warm pool instances (Warmed:* states), which DescribeAutoScalingGroups
	// leaves out, so that status counts them and the launching hook knows an old-AMI instance leaving the pool: at
	// most 50 a page.
	DescribeWarmPool(ctx context.Context, in *autoscaling.DescribeWarmPoolInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error)
	// StartInstanceRefresh starts Auto Scaling's own replacement of a group's instances (one active refresh per
	// group: InstanceRefreshInProgress otherwise).
	StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, optFns ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error)
	// DescribeInstanceRefreshes lists a group's refreshes, newest first, with status, reason and progress.
	DescribeInstanceRefreshes(ctx context.Context, in *autoscaling.DescribeInstanceRefreshesInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error)
	// CancelInstanceRefresh cancels the group's active refresh or rollback (ActiveInstanceRefreshNotFound when
	// there is none); nothing is rolled back.
	CancelInstanceRefresh(ctx context.Context, in *autoscaling.CancelInstanceRefreshInput, optFns ...func(*autoscaling.Options)) (*autoscaling.CancelInstanceRefreshOutput, error)
	// RollbackInstanceRefresh rolls the group's refresh in progress back to the previous configuration
	// (IrreversibleInstanceRefresh when its prerequisites are not met).
	RollbackInstanceRefresh(ctx context.Context, in *autoscaling.RollbackInstanceRefreshInput, optFns ...func(*autoscaling.Options)) (*autoscaling.RollbackInstanceRefreshOutput, error)
}

// EC2 is the subset of the Amazon EC2 API the agent calls: launch template versions, instance state, and the
// images the AMI gate checks before a rollout (providers.AMIGate).
type EC2 interface {
	DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, optFns ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error)
	CreateLaunchTemplateVersion(ctx context.Context, in *ec2.CreateLaunchTemplateVersionInput, optFns ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error)
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
}

// ECS is the subset of the Amazon ECS API the agent calls to find, drain and check container instances.
type ECS interface {
	ListContainerInstances(ctx context.Context, in *ecs.ListContainerInstancesInput, optFns ...func(*ecs.Options)) (*ecs.ListContainerInstancesOutput, error)
	DescribeContainerInstances(ctx context.Context, in *ecs.DescribeContainerInstancesInput, optFns ...func(*ecs.Options)) (*ecs.DescribeContainerInstancesOutput, error)
	UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, optFns ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error)
	ListTasks(ctx context.Context, in *ecs.ListTasksInput, optFns ...func(*ecs.Options)) (*ecs.ListTasksOutput, error)
	DescribeTasks(ctx context.Context, in *ecs.DescribeTasksInput, optFns ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error)
	DescribeServices(ctx context.Context, in *ecs.DescribeServicesInput, optFns ...func(*ecs.Options)) (*ecs.DescribeServicesOutput, error)
}

// SSM is the subset of the AWS Systems Manager Parameter Store API the agent calls to resolve AMI parameters.
type SSM interface {
	GetParameters(ctx context.Context, in *ssm.GetParametersInput, optFns ...func(*ssm.Options)) (*ssm.GetParametersOutput, error)
}

// SQS is the subset of the Amazon SQS API the agent calls to consume its queue.
type SQS interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	// DeleteMessageBatch deletes up to 10 messages (handled wake-ups) in one call; each entry succeeds or
	// fails on its own (Amazon SQS API Reference, DeleteMessageBatch).
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}

// Compile-time checks that the SDK clients satisfy the interfaces.
var (
	_ AutoScaling = (*autoscaling.Client)(nil)
	_ EC2         = (*ec2.Client)(nil)
	_ ECS         = (*ecs.Client)(nil)
	_ SSM         = (*ssm.Client)(nil)
	_ SQS         = (*sqs.Client)(nil)
)

// CloudWatch is the subset of the Amazon CloudWatch API the agent calls: alarm gates and metrics.
type CloudWatch interface {
	DescribeAlarms(ctx context.Context, in *cloudwatch.DescribeAlarmsInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error)
	// PutMetricData publishes the agent's metrics (internal/metrics): at most 1000 datums per call.
	PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

// EventBridge is the subset of the Amazon EventBridge API the agent calls: rollout and lifecycle
// notifications (internal/notify), at most 10 entries per PutEvents call.
type EventBridge interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, optFns ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

var (
	_ CloudWatch  = (*cloudwatch.Client)(nil)
	_ EventBridge = (*eventbridge.Client)(nil)
)

// EKS is the subset of the Amazon EKS API the agent calls: the cluster's Kubernetes version, API endpoint and
// certificate authority (for `auto` AMI sources and the Kubernetes client of internal/eks).
type EKS interface {
	DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, optFns ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
}

// EC2InstanceTypes is the EC2 call that tells an instance type's processor architectures (x86_64, arm64), used
// to pick the AMI architecture of an `auto` EKS source. Kept apart from EC2 so that EC2 fakes stay small.
type EC2InstanceTypes interface {
	DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
}

var (
	_ EKS              = (*eks.Client)(nil)
	_ EC2InstanceTypes = (*ec2.Client)(nil)
)
