package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"
)

func TestDescribeAutoScalingInstancesNamesGroupAndLifecycleStateAndLeavesUnknownIdsOut(t *testing.T) {
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-1", "m6i.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 2, LaunchTemplateID: lt,
		Hooks: []HookSpec{{Name: "drain", Transition: TransitionTerminating}}}))
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "other", Min: 1, Max: 1, Desired: 1, LaunchTemplateID: lt}))
	g, other := a.Group("g").Instances, a.Group("other").Instances[0]
	require.NoError(t, a.SetDesiredCapacity("g", 1)) // one of g's instances enters Terminating:Wait
	api := a.AutoScaling()
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		ids  []string
		want map[string]string // id -> group/state
	}{
		{"one id of each group, and one unknown", []string{g[0].ID, other.ID, "i-00000000000000000"}, nil},
		{"only unknown ids: an empty answer, no error", []string{"i-00000000000000000"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := api.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: tc.ids})
			require.NoError(t, err)
			got := map[string]string{}
			for _, d := range out.AutoScalingInstances {
				got[aws.ToString(d.InstanceId)] = aws.ToString(d.AutoScalingGroupName) + "/" + aws.ToString(d.LifecycleState)
			}
			want := tc.want
			if want == nil {
				want = map[string]string{}
				for _, v := range append(a.Group("g").Instances, other) {
					if v.ID == tc.ids[0] || v.ID == tc.ids[1] {
						want[v.ID] = v.Group + "/" + v.LifecycleState
					}
				}
				require.Len(t, want, 2)
			}
			require.Equal(t, want, got)
		})
	}
	states := map[string]bool{}
	for _, v := range a.Group("g").Instances {
		states[v.LifecycleState] = true
	}
	require.True(t, states["Terminating:Wait"], "the scale-in victim is described in its wait state")
}

func TestDescribeAutoScalingInstancesTakesAtMost50IdsAndPagesBy50(t *testing.T) {
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-1", "m6i.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "g", Min: 60, Max: 60, Desired: 60, LaunchTemplateID: lt}))
	api := a.AutoScaling()
	ctx := context.Background()
	ids := make([]string, 51)
	for i := range ids {
		ids[i] = fmt.Sprintf("i-%017d", i)
	}
	_, err := api.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: ids})
	requireAPIError(t, err, "ValidationError", "less than or equal to 50")
	_, err = api.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{MaxRecords: aws.Int32(51)})
	requireAPIError(t, err, "ValidationError", "between 1 and 50")

	seen := map[string]bool{}
	var token *string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 3)
		out, err := api.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{NextToken: token})
		require.NoError(t, err)
		require.LessOrEqual(t, len(out.AutoScalingInstances), 50)
		for _, d := range out.AutoScalingInstances {
			seen[aws.ToString(d.InstanceId)] = true
		}
		if token = out.NextToken; token == nil {
			break
		}
	}
	require.Len(t, seen, 60, "every instance once, over two pages")
}
