package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

// UpdateAutoScalingGroup sets the group's DefaultInstanceWarmup (-1 removes it) and HealthCheckGracePeriod, as
// DescribeAutoScalingGroups then reports them.
func TestUpdateAutoScalingGroupSetsTheWarmupAndTheGracePeriod(t *testing.T) {
	a := New(testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), Options{})
	lt := a.CreateLaunchTemplate("web", "ami-1", "m5.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "web", Min: 1, Max: 2, Desired: 1, LaunchTemplateID: lt, LaunchTemplateVersion: "$Default"}))
	ctx, api := context.Background(), asClient(a)
	describe := func() (*int32, *int32) {
		out, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{"web"}})
		require.NoError(t, err)
		return out.AutoScalingGroups[0].DefaultInstanceWarmup, out.AutoScalingGroups[0].HealthCheckGracePeriod
	}
	_, err := api.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("web"),
		DefaultInstanceWarmup: aws.Int32(15), HealthCheckGracePeriod: aws.Int32(30)})
	require.NoError(t, err)
	warmup, grace := describe()
	require.Equal(t, int32(15), aws.ToInt32(warmup))
	require.Equal(t, int32(30), aws.ToInt32(grace))
	_, err = api.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("web"),
		DefaultInstanceWarmup: aws.Int32(-1)})
	require.NoError(t, err)
	warmup, grace = describe()
	require.Nil(t, warmup)
	require.Equal(t, int32(30), aws.ToInt32(grace))
}
