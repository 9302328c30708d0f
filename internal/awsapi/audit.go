package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// The interfaces of `patch-agent audit` (internal/audit). They hold read calls only — Describe*, List*, Get* —
// so that the audit cannot change the account it reads; its one optional write, the CloudWatch metrics of
// --publish-metrics, is the separate MetricData.

// ReadOnlyAutoScaling is the Amazon EC2 Auto Scaling API the audit reads: every group (100 per call) and the
// launch configurations some of them still use (50 names per call), and an opted-in group's lifecycle hooks
// (whether it can be rolled).
type ReadOnlyAutoScaling interface {
	DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
	DescribeLaunchConfigurations(ctx context.Context, in *autoscaling.DescribeLaunchConfigurationsInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeLaunchConfigurationsOutput, error)
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
}

// ReadOnlyEC2 is the Amazon EC2 API the audit reads: launch template versions (the AMI a group launches),
// instances (the AMI each runs), images (each AMI's creation date) and instance types (their architecture).
type ReadOnlyEC2 interface {
	DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, optFns ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error)
	DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
}

// ReadOnlyECS is the Amazon ECS API the audit reads to tell which cluster a group serves: the clusters and the
// capacity providers associated with each (a capacity provider names its Auto Scaling group's ARN).
type ReadOnlyECS interface {
	ListClusters(ctx context.Context, in *ecs.ListClustersInput, optFns ...func(*ecs.Options)) (*ecs.ListClustersOutput, error)
	DescribeCapacityProviders(ctx context.Context, in *ecs.DescribeCapacityProvidersInput, optFns ...func(*ecs.Options)) (*ecs.DescribeCapacityProvidersOutput, error)
}

// ReadOnlyEKS is the Amazon EKS API the audit reads: the clusters (their Kubernetes version) and their managed
// node groups (the Auto Scaling groups EKS owns, their AMI type and release version).
type ReadOnlyEKS interface {
	ListClusters(ctx context.Context, in *eks.ListClustersInput, optFns ...func(*eks.Options)) (*eks.ListClustersOutput, error)
	DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, optFns ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
	ListNodegroups(ctx context.Context, in *eks.ListNodegroupsInput, optFns ...func(*eks.Options)) (*eks.ListNodegroupsOutput, error)
	DescribeNodegroup(ctx context.Context, in *eks.DescribeNodegroupInput, optFns ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error)
}

// ReadOnlySSM is the Parameter Store API the audit reads: the recommended AMI parameters (10 names per call)
// and their history of versions (50 per call), to count the releases a group is behind.
type ReadOnlySSM interface {
	GetParameters(ctx context.Context, in *ssm.GetParametersInput, optFns ...func(*ssm.Options)) (*ssm.GetParametersOutput, error)
	GetParameterHistory(ctx context.Context, in *ssm.GetParameterHistoryInput, optFns ...func(*ssm.Options)) (*ssm.GetParameterHistoryOutput, error)
}

// MetricData is the CloudWatch call of `patch-agent audit --publish-metrics`, the audit's only write: at most
// 1000 datums per call.
type MetricData interface {
	PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, optFns ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error)
}

var (
	_ ReadOnlyAutoScaling = (*autoscaling.Client)(nil)
	_ ReadOnlyEC2         = (*ec2.Client)(nil)
	_ ReadOnlyECS         = (*ecs.Client)(nil)
	_ ReadOnlyEKS         = (*eks.Client)(nil)
	_ ReadOnlySSM         = (*ssm.Client)(nil)
	_ MetricData          = (*cloudwatch.Client)(nil)
)
