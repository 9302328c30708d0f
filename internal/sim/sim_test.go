package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

var start = time.Date(2024, 3, 4, 9, 0, 0, 0, time.UTC)

func newAccount(t *testing.T) *Account {
	t.Helper()
	return New(testingclock.NewFakeClock(start), Options{})
}

// asClient is a's Auto Scaling client with the calls the agent's interface leaves out (SetDesiredCapacity,
// SetInstanceProtection), which the account serves for other writers.
func asClient(a *Account) *AutoScalingClient { return a.AutoScaling().(*AutoScalingClient) }

// newGroup creates a template with AMI ami-old and a group of desired instances on it.
func newGroup(t *testing.T, a *Account, spec GroupSpec) (templateID string) {
	t.Helper()
	templateID = a.CreateLaunchTemplate(spec.Name+"-lt", "ami-old", "m6i.large")
	spec.LaunchTemplateID = templateID
	require.NoError(t, a.CreateGroup(spec))
	return templateID
}

func describeGroup(t *testing.T, a *Account, name string) astypes.AutoScalingGroup {
	t.Helper()
	out, err := a.AutoScaling().DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	require.NoError(t, err)
	require.Len(t, out.AutoScalingGroups, 1)
	return out.AutoScalingGroups[0]
}

func states(g GroupView) map[string]int {
	out := map[string]int{}
	for _, i := range g.Instances {
		out[i.LifecycleState]++
	}
	return out
}

func TestAdvanceRunsEventsAtTheirDueTime(t *testing.T) {
	a := newAccount(t)
	var seen []time.Duration
	a.mu.Lock()
	a.after(2500*time.Millisecond, func() { seen = append(seen, a.now().Sub(start)) })
	a.after(500*time.Millisecond, func() {
		seen = append(seen, a.now().Sub(start))
		a.after(time.Second, func() { seen = append(seen, a.now().Sub(start)) })
	})
	a.mu.Unlock()

	a.Advance(3 * time.Second)

	require.Equal(t, []time.Duration{500 * time.Millisecond, 1500 * time.Millisecond, 2500 * time.Millisecond}, seen)
	require.Equal(t, start.Add(3*time.Second), a.Clock().Now())
}

func TestAdvanceStepsTheClockForOtherTimers(t *testing.T) {
	a := newAccount(t)
	ch := a.Clock().After(1500 * time.Millisecond)

	a.Advance(2 * time.Second)

	select {
	case at := <-ch:
		require.Equal(t, start.Add(2*time.Second), at, "a waiter fires at the first step that passes it")
	default:
		t.Fatal("timer on the shared clock did not fire")
	}
}

func TestCallsCountsAPICallsOnly(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1})
	_ = describeGroup(t, a, "g")
	_ = describeGroup(t, a, "g")
	_ = a.Group("g")

	require.Equal(t, map[string]int{"autoscaling:DescribeAutoScalingGroups": 2}, a.Calls())
	a.ResetCalls()
	require.Empty(t, a.Calls())
}

func TestCancelledContextFailsTheCall(t *testing.T) {
	a := newAccount(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := a.AutoScaling().DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	require.ErrorIs(t, err, context.Canceled)
}

func TestConcurrentCallersAreSafe(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 5, Desired: 2, ECSCluster: "c"})
	done := make(chan struct{})
	for i := 0; i < 4; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := 0; j < 50; j++ {
				_, _ = a.AutoScaling().DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{})
				_ = a.Group("g")
			}
		}()
	}
	for j := 0; j < 20; j++ {
		_, _ = asClient(a).SetDesiredCapacity(context.Background(), &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(int32(2 + j%3))})
		a.Advance(10 * time.Second)
	}
	for i := 0; i < 4; i++ {
		<-done
	}
}
