package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// FailedLaunch is the newest failed scaling activity of a group: what Auto Scaling said when it could not
// launch an instance.
type FailedLaunch struct {
	// StatusMessage and Description as DescribeScalingActivities reports them.
	StatusMessage, Description string
	StartTime                  time.Time
}

// NewestFailedLaunch reads the group's scaling activities (DescribeScalingActivities, newest first, one page of
// 100: Amazon EC2 Auto Scaling API Reference) and returns the newest Failed one that started at or after since,
// or nil when none did. It is the provider of the capacity retry (capacity.go): the decision code never builds
// the SDK input. Errors are Auto Scaling's, wrapped with the group.
func NewestFailedLaunch(ctx context.Context, api awsapi.ScalingActivities, group string, since time.Time) (*FailedLaunch, error) {
	out, err := api.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{
		AutoScalingGroupName: aws.String(group), MaxRecords: aws.Int32(100)})
	if err != nil {
		return nil, fmt.Errorf("reading the scaling activities of %s: %w", group, err)
	}
	for _, a := range out.Activities {
		start := aws.ToTime(a.StartTime)
		if start.Before(since) {
			return nil, nil // newest first: the rest is older
		}
		if a.StatusCode == astypes.ScalingActivityStatusCodeFailed {
			return &FailedLaunch{StatusMessage: aws.ToString(a.StatusMessage), Description: aws.ToString(a.Description), StartTime: start}, nil
		}
	}
	return nil, nil
}
