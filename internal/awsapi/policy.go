package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// ScalingActivities is the Auto Scaling call that tells why a group's launch failed: a replacement that does not
// appear is looked up in the group's scaling activities (StatusCode Failed, StatusMessage), so that a launch
// short of EC2 capacity is not taken for a bad AMI. At most 100 activities a page, newest first.
type ScalingActivities interface {
	DescribeScalingActivities(ctx context.Context, in *autoscaling.DescribeScalingActivitiesInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeScalingActivitiesOutput, error)
}

// STS is the AWS Security Token Service call the operator commands make to name who approved, paused or
// skipped a gate: the caller's ARN, never a local user name. GetCallerIdentity needs no IAM permission (AWS
// STS API Reference, "GetCallerIdentity": no permissions are required to perform this operation).
type STS interface {
	GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, optFns ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error)
}

var (
	_ ScalingActivities = (*autoscaling.Client)(nil)
	_ STS               = (*sts.Client)(nil)
)
