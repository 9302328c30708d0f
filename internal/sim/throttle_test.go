package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// TestWireThrottlesAboveTheAccountBucketWithTheServicesCode: past its bucket, a call fails with the code the
// service documents (RequestLimitExceeded for EC2, Throttling for Auto Scaling), classified as transient and
// counted; the bucket refills at its rate; other classes keep their own buckets.
func TestWireThrottlesAboveTheAccountBucketWithTheServicesCode(t *testing.T) {
	ctx := context.Background()
	acct := sim.New(clocktesting.NewFakeClock(time.Unix(0, 0)), sim.Options{})
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	f := sim.NewFaults(1, nil)
	f.SetWire(sim.Wire{Clock: clk, Account: sim.AccountLimits{
		awsapi.RateEC2:         {Rate: 1, Burst: 2},
		awsapi.RateAutoScaling: {Rate: 1, Burst: 1},
	}})
	e, as := f.EC2(acct.EC2()), f.AutoScaling(acct.AutoScaling())
	describe := func() error {
		_, err := e.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
		return err
	}
	require.NoError(t, describe())
	require.NoError(t, describe())
	err := describe()
	var api smithy.APIError
	require.ErrorAs(t, err, &api)
	require.Equal(t, "RequestLimitExceeded", api.ErrorCode())
	require.True(t, awsapi.IsThrottled(err) && awsapi.IsTransient(err))

	_, err = as.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err, "Auto Scaling has its own bucket")
	_, err = as.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{})
	require.ErrorAs(t, err, &api)
	require.Equal(t, "Throttling", api.ErrorCode())

	clk.SetTime(clk.Now().Add(time.Second))
	require.NoError(t, describe(), "one token refilled after a second")
	require.Equal(t, 2, sim.Total(f.Stats().Throttled))
}

// TestWireClientLimiterKeepsCallsUnderTheAccountBucket: with the agent's limiter in front (below the
// account's rate), a burst of calls waits instead of being throttled.
func TestWireClientLimiterKeepsCallsUnderTheAccountBucket(t *testing.T) {
	ctx := context.Background()
	acct := sim.New(clocktesting.NewFakeClock(time.Unix(0, 0)), sim.Options{})
	f := sim.NewFaults(1, nil)
	f.SetWire(sim.Wire{
		Client:  awsapi.NewLimiter(awsapi.RateLimits{awsapi.RateEC2: {Rate: 40, Burst: 1}}),
		Account: sim.AccountLimits{awsapi.RateEC2: {Rate: 50, Burst: 5}},
	})
	e := f.EC2(acct.EC2())
	for range 20 {
		_, err := e.DescribeInstances(ctx, &ec2.DescribeInstancesInput{})
		require.NoError(t, err)
	}
	require.Zero(t, sim.Total(f.Stats().Throttled))
}

// TestWireLatencyIsSpentInRealTime: a call takes at least the wire's latency of real time.
func TestWireLatencyIsSpentInRealTime(t *testing.T) {
	acct := sim.New(clocktesting.NewFakeClock(time.Unix(0, 0)), sim.Options{})
	f := sim.NewFaults(1, nil)
	f.SetWire(sim.Wire{Latency: 30 * time.Millisecond})
	start := time.Now()
	_, err := f.EC2(acct.EC2()).DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
}
