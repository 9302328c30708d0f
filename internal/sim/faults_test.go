package sim

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

func describeGroups(ctx context.Context, api awsapi.AutoScaling) error {
	_, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	return err
}

func TestFaultsEveryNthIsCountedPerOperation(t *testing.T) {
	a := newAccount(t)
	a.CreateECSCluster("c")
	f := NewFaults(1, nil, FaultRule{Op: "*", Every: 3, Codes: []string{FaultThrottling}})
	asg, e := f.AutoScaling(a.AutoScaling()), f.ECS(a.ECS())
	ctx := context.Background()
	var got []bool
	for range 6 {
		got = append(got, describeGroups(ctx, asg) != nil)
		_, err := e.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("c")})
		got = append(got, err != nil)
	}
	// Calls 3 and 6 of each operation fail, whatever the other operation did in between.
	require.Equal(t, []bool{false, false, false, false, true, true, false, false, false, false, true, true}, got)
	s := f.Stats()
	require.Equal(t, map[string]int{"autoscaling:DescribeAutoScalingGroups": 6, "ecs:ListContainerInstances": 6}, s.Calls)
	require.Equal(t, map[string]int{"autoscaling:DescribeAutoScalingGroups": 4, "ecs:ListContainerInstances": 4}, s.Successes)
	require.Equal(t, 4, Total(s.Injected))
	require.Equal(t, 4, a.Calls()["autoscaling:DescribeAutoScalingGroups"], "the failed calls never reached the account")
}

func TestFaultsProbabilityIsSeededAndReproducible(t *testing.T) {
	run := func(seed uint64) []bool {
		a := newAccount(t)
		f := NewFaults(seed, nil, FaultRule{Op: "autoscaling:*", Probability: 0.2, Codes: TransientFaults})
		asg := f.AutoScaling(a.AutoScaling())
		out := make([]bool, 1000)
		for i := range out {
			out[i] = describeGroups(context.Background(), asg) != nil
		}
		return out
	}
	first, again, other := run(7), run(7), run(8)
	require.Equal(t, first, again, "same seed, same faults")
	require.NotEqual(t, first, other, "another seed, other faults")
	failed := 0
	for _, f := range first {
		if f {
			failed++
		}
	}
	require.InDelta(t, 200, failed, 50, "about 20 %% of 1000 calls fail")
}

func TestFaultsOnlyMatchingOperationsFail(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1})
	f := NewFaults(1, nil, FaultRule{Op: "autoscaling:StartInstanceRefresh", Every: 1, Codes: []string{"AccessDenied"},
		Message: "User is not authorized to perform: autoscaling:StartInstanceRefresh"})
	asg := f.AutoScaling(a.AutoScaling())
	ctx := context.Background()
	require.NoError(t, describeGroups(ctx, asg))
	_, err := asg.StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g")})
	requireAPIError(t, err, "AccessDenied", "not authorized")
	require.False(t, awsapi.IsTransient(err), "AccessDenied is not a passing fault")
	out, err := a.AutoScaling().DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String("g")})
	require.NoError(t, err)
	require.Empty(t, out.InstanceRefreshes, "the failed call had no effect")
}

func TestFaultsResponseLostAppliesTheEffectOfMutatingCallsOnly(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1})
	f := NewFaults(1, nil, FaultRule{Op: "autoscaling:*", Every: 1, Codes: []string{FaultTimeout}, ResponseLost: true})
	asg := f.AutoScaling(a.AutoScaling())
	ctx := context.Background()

	_, err := asg.StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g")})
	require.True(t, awsapi.IsTimeout(err), "the caller saw a timeout: %v", err)
	out, err := a.AutoScaling().DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String("g")})
	require.NoError(t, err)
	require.Len(t, out.InstanceRefreshes, 1, "the effect was applied")

	require.Error(t, describeGroups(ctx, asg))
	require.Equal(t, 1, a.Calls()["autoscaling:StartInstanceRefresh"])
	require.Zero(t, a.Calls()["autoscaling:DescribeAutoScalingGroups"], "a read-only call fails before it is made")
	s := f.Stats()
	require.Equal(t, map[string]int{"autoscaling:StartInstanceRefresh": 1}, s.Lost)
	require.Zero(t, Total(s.Successes))
}

func TestFaultsLatencyMovesTheFakeClock(t *testing.T) {
	a := newAccount(t)
	before := a.Clock().Now()
	f := NewFaults(1, a, FaultRule{Op: "*", Every: 2, Latency: 30 * time.Second})
	asg := f.AutoScaling(a.AutoScaling())
	for range 4 {
		require.NoError(t, describeGroups(context.Background(), asg), "latency alone injects no error")
	}
	require.Equal(t, time.Minute, a.Clock().Since(before), "two of four calls took 30 s each")
}

func TestFaultsMaxAndPause(t *testing.T) {
	a := newAccount(t)
	f := NewFaults(1, nil, FaultRule{Op: "*", Every: 1, Codes: []string{FaultInternalFailure}, Max: 2})
	asg := f.AutoScaling(a.AutoScaling())
	ctx := context.Background()
	require.Error(t, describeGroups(ctx, asg))
	f.Pause(true)
	require.NoError(t, describeGroups(ctx, asg), "paused: no fault")
	f.Pause(false)
	require.Error(t, describeGroups(ctx, asg))
	require.NoError(t, describeGroups(ctx, asg), "the rule fired its 2 times")
	require.Equal(t, 4, f.Stats().Calls["autoscaling:DescribeAutoScalingGroups"])
}

func TestFaultCodesAreClassifiedByAWSAPI(t *testing.T) {
	tests := []struct {
		code                       string
		throttled, server, timeout bool
		wantFault                  smithy.ErrorFault
	}{
		{code: FaultThrottling, throttled: true, wantFault: smithy.FaultClient},
		{code: FaultThrottlingException, throttled: true, wantFault: smithy.FaultClient},
		{code: FaultRequestLimit, throttled: true, wantFault: smithy.FaultClient},
		{code: FaultInternalFailure, server: true, wantFault: smithy.FaultServer},
		{code: FaultServiceUnavailable, server: true, wantFault: smithy.FaultServer},
		{code: FaultTimeout, timeout: true},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			a := newAccount(t)
			f := NewFaults(1, nil, FaultRule{Op: "*", Every: 1, Codes: []string{tt.code}})
			err := describeGroups(context.Background(), f.AutoScaling(a.AutoScaling()))
			require.Error(t, err)
			require.Equal(t, tt.throttled, awsapi.IsThrottled(err))
			require.Equal(t, tt.server, awsapi.IsServerFault(err))
			require.Equal(t, tt.timeout, awsapi.IsTimeout(err))
			require.True(t, awsapi.IsTransient(err))
			var apiErr smithy.APIError
			if tt.timeout {
				require.False(t, errors.As(err, &apiErr), "a timeout carries no AWS answer")
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
				var op *smithy.OperationError
				require.ErrorAs(t, err, &op)
				require.Equal(t, "DescribeAutoScalingGroups", op.Operation())
				return
			}
			require.ErrorAs(t, err, &apiErr)
			require.Equal(t, tt.code, apiErr.ErrorCode())
			require.Equal(t, tt.wantFault, apiErr.ErrorFault())
		})
	}
}
