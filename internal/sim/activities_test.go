package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"
)

// A launch short of capacity leaves the group below desired and records one Failed scaling activity per try
// (Auto Scaling keeps trying); DescribeScalingActivities lists them newest first, in pages; once capacity is
// back the launch succeeds.
func TestLaunchShortfallRecordsFailedScalingActivitiesUntilCleared(t *testing.T) {
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-v1", "m6i.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1, LaunchTemplateID: lt}))
	a.SetLaunchShortfall("g", Shortfall{})
	require.NoError(t, a.SetDesiredCapacity("g", 2))
	a.Advance(5*time.Minute + time.Second)
	require.Len(t, a.Group("g").Instances, 1, "nothing launched")
	require.Equal(t, 6, a.FailedLaunches("g"), "one try at once, then one a minute")

	api := a.AutoScaling().(*AutoScalingClient)
	ctx := context.Background()
	page, err := api.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: aws.String("g"), MaxRecords: aws.Int32(4)})
	require.NoError(t, err)
	require.Len(t, page.Activities, 4)
	require.NotNil(t, page.NextToken)
	newest := page.Activities[0]
	require.Equal(t, astypes.ScalingActivityStatusCodeFailed, newest.StatusCode)
	require.Contains(t, aws.ToString(newest.StatusMessage), "We currently do not have sufficient m6i.large capacity in the Availability Zone you requested")
	require.True(t, aws.ToTime(newest.StartTime).After(aws.ToTime(page.Activities[3].StartTime)), "newest first")
	rest, err := api.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: aws.String("g"), MaxRecords: aws.Int32(4), NextToken: page.NextToken})
	require.NoError(t, err)
	require.Len(t, rest.Activities, 2)
	require.Nil(t, rest.NextToken)
	_, err = api.DescribeScalingActivities(ctx, &autoscaling.DescribeScalingActivitiesInput{AutoScalingGroupName: aws.String("g"), MaxRecords: aws.Int32(101)})
	require.ErrorContains(t, err, "ValidationError")

	a.ClearLaunchShortfall("g")
	require.Len(t, a.Group("g").Instances, 2, "launched once capacity is back")
	require.Equal(t, 6, a.FailedLaunches("g"))
}
