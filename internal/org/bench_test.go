package org_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/org"
	"github.com/patch-agent/patch-agent/internal/org/orgsim"
)

// wire spends each call's round trip in real time — the accounts overlap as they would against AWS, and the
// runner's timeout is its real one — drawn uniformly from 20-200 ms; 5 % of the attempts are throttled and
// retried after a jittered backoff of up to 1 s, doubling with each retry (the shape of the SDK's standard
// retryer). It adds up the time spent: the serial sum.
type wire struct {
	mu        sync.Mutex
	rng       *rand.Rand
	calls     int
	throttled int
	spent     time.Duration
}

func (w *wire) draw() (time.Duration, bool, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls++
	lat := 20*time.Millisecond + time.Duration(w.rng.Int64N(int64(180*time.Millisecond)))
	throttled := w.rng.Float64() < 0.05
	back := time.Duration(w.rng.Int64N(int64(time.Second)))
	if throttled {
		w.throttled++
	}
	return lat, throttled, back
}

func (w *wire) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	start := time.Now()
	defer func() {
		w.mu.Lock()
		w.spent += time.Since(start)
		w.mu.Unlock()
	}()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pass spends one call's time, its throttled attempts and their backoffs included.
func (w *wire) pass(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		lat, throttled, back := w.draw()
		if err := w.wait(ctx, lat); err != nil {
			return err
		}
		if !throttled {
			return nil
		}
		if attempt >= 9 {
			return &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
		}
		if err := w.wait(ctx, back<<attempt); err != nil {
			return err
		}
	}
}

func through[O any](ctx context.Context, w *wire, call func() (*O, error)) (*O, error) {
	if err := w.pass(ctx); err != nil {
		return nil, err
	}
	return call()
}

type slowASG struct {
	awsapi.ReadOnlyAutoScaling
	w *wire
}

func (c slowASG) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	return through(ctx, c.w, func() (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
		return c.ReadOnlyAutoScaling.DescribeAutoScalingGroups(ctx, in, o...)
	})
}
func (c slowASG) DescribeLaunchConfigurations(ctx context.Context, in *autoscaling.DescribeLaunchConfigurationsInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeLaunchConfigurationsOutput, error) {
	return through(ctx, c.w, func() (*autoscaling.DescribeLaunchConfigurationsOutput, error) {
		return c.ReadOnlyAutoScaling.DescribeLaunchConfigurations(ctx, in, o...)
	})
}

type slowEC2 struct {
	awsapi.ReadOnlyEC2
	w *wire
}

func (c slowEC2) DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, o ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error) {
	return through(ctx, c.w, func() (*ec2.DescribeLaunchTemplateVersionsOutput, error) {
		return c.ReadOnlyEC2.DescribeLaunchTemplateVersions(ctx, in, o...)
	})
}
func (c slowEC2) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, o ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	return through(ctx, c.w, func() (*ec2.DescribeInstancesOutput, error) { return c.ReadOnlyEC2.DescribeInstances(ctx, in, o...) })
}
func (c slowEC2) DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, o ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	return through(ctx, c.w, func() (*ec2.DescribeImagesOutput, error) { return c.ReadOnlyEC2.DescribeImages(ctx, in, o...) })
}
func (c slowEC2) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, o ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	return through(ctx, c.w, func() (*ec2.DescribeInstanceTypesOutput, error) {
		return c.ReadOnlyEC2.DescribeInstanceTypes(ctx, in, o...)
	})
}

type slowECS struct {
	awsapi.ReadOnlyECS
	w *wire
}

func (c slowECS) ListClusters(ctx context.Context, in *ecs.ListClustersInput, o ...func(*ecs.Options)) (*ecs.ListClustersOutput, error) {
	return through(ctx, c.w, func() (*ecs.ListClustersOutput, error) { return c.ReadOnlyECS.ListClusters(ctx, in, o...) })
}
func (c slowECS) DescribeCapacityProviders(ctx context.Context, in *ecs.DescribeCapacityProvidersInput, o ...func(*ecs.Options)) (*ecs.DescribeCapacityProvidersOutput, error) {
	return through(ctx, c.w, func() (*ecs.DescribeCapacityProvidersOutput, error) {
		return c.ReadOnlyECS.DescribeCapacityProviders(ctx, in, o...)
	})
}

type slowEKS struct {
	awsapi.ReadOnlyEKS
	w *wire
}

func (c slowEKS) ListClusters(ctx context.Context, in *eks.ListClustersInput, o ...func(*eks.Options)) (*eks.ListClustersOutput, error) {
	return through(ctx, c.w, func() (*eks.ListClustersOutput, error) { return c.ReadOnlyEKS.ListClusters(ctx, in, o...) })
}
func (c slowEKS) DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, o ...func(*eks.Options)) (*eks.DescribeClusterOutput, error) {
	return through(ctx, c.w, func() (*eks.DescribeClusterOutput, error) { return c.ReadOnlyEKS.DescribeCluster(ctx, in, o...) })
}
func (c slowEKS) ListNodegroups(ctx context.Context, in *eks.ListNodegroupsInput, o ...func(*eks.Options)) (*eks.ListNodegroupsOutput, error) {
	return through(ctx, c.w, func() (*eks.ListNodegroupsOutput, error) { return c.ReadOnlyEKS.ListNodegroups(ctx, in, o...) })
}
func (c slowEKS) DescribeNodegroup(ctx context.Context, in *eks.DescribeNodegroupInput, o ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error) {
	return through(ctx, c.w, func() (*eks.DescribeNodegroupOutput, error) { return c.ReadOnlyEKS.DescribeNodegroup(ctx, in, o...) })
}

type slowSSM struct {
	awsapi.ReadOnlySSM
	w *wire
}

func (c slowSSM) GetParameters(ctx context.Context, in *ssm.GetParametersInput, o ...func(*ssm.Options)) (*ssm.GetParametersOutput, error) {
	return through(ctx, c.w, func() (*ssm.GetParametersOutput, error) { return c.ReadOnlySSM.GetParameters(ctx, in, o...) })
}
func (c slowSSM) GetParameterHistory(ctx context.Context, in *ssm.GetParameterHistoryInput, o ...func(*ssm.Options)) (*ssm.GetParameterHistoryOutput, error) {
	return through(ctx, c.w, func() (*ssm.GetParameterHistoryOutput, error) {
		return c.ReadOnlySSM.GetParameterHistory(ctx, in, o...)
	})
}

// A 50-account audit on the simulation, real time: each call 20-200 ms, 5 % throttled (and retried), one
// account whose STS never answers. Goal: wall time within 1.5 x (serial sum / concurrency) + the per-account
// timeout, where the serial sum is the time every call of the 49 answering accounts spent, retries included.
// PATCH_AGENT_BENCH=1 go test ./internal/org -run TestOrganizationAuditBenchmark -v
func TestOrganizationAuditBenchmark(t *testing.T) {
	if os.Getenv("PATCH_AGENT_BENCH") == "" {
		t.Skip("a benchmark in real time (about 15 s): PATCH_AGENT_BENCH=1 runs it")
	}
	const accounts, concurrency, timeout = 50, 8, 10 * time.Second
	w := orgsim.New(20)
	wr := &wire{rng: rand.New(rand.NewPCG(43, 50))}
	w.Audit = func(_ org.Target, c audit.Clients) audit.Clients {
		return audit.Clients{AutoScaling: slowASG{c.AutoScaling, wr}, EC2: slowEC2{c.EC2, wr}, ECS: slowECS{c.ECS, wr}, EKS: slowEKS{c.EKS, wr}, SSM: slowSSM{c.SSM, wr}}
	}
	for n := 1; n <= accounts; n++ {
		a := fleet.New()
		require.NoError(t, fleet.AddHardCodedECS(a, fleet.Group{Name: "orders-ecs", Cluster: "orders", InstanceType: "m6i.large", Image: fleet.ECSx86.Image(2), Instances: 2}))
		require.NoError(t, fleet.AddPatchAgentECS(a, fleet.Group{Name: "search-ecs", Cluster: "search", InstanceType: "m7g.large", Image: fleet.ECSarm64.Image(5), Instances: 2}, fleet.ECSarm64.Parameter))
		w.AddMember(org.Target{Account: org.Account{ID: fmt.Sprintf("2000000000%02d", n)}, Region: region}, "", a, org.DefaultDeployment)
	}
	hung := fmt.Sprintf("2000000000%02d", 17)
	w.Org.HangAssumeRole(hung)
	list, err := org.ListAccounts(context.Background(), w.Org, nil)
	require.NoError(t, err)
	targets := org.Targets(list, []string{region})

	start := time.Now()
	results := org.Audit(context.Background(), org.Runner{Concurrency: concurrency, Timeout: timeout}, w.Connector("patch-agent-operator", ""), targets)
	wall := time.Since(start)

	rep := org.NewAuditReport(results, fleet.Start)
	require.Equal(t, 1, rep.Summary.Failed)
	require.Equal(t, hung, rep.Failed()[0].ID)
	require.Equal(t, 2*(accounts-1), rep.Summary.Groups)
	serial := wr.spent
	bound := time.Duration(1.5*float64(serial)/concurrency) + timeout
	t.Logf("50-account audit: wall %.2f s; serial sum %.2f s over %d calls (%d throttled attempts); serial/concurrency %.2f s; bound 1.5 x that + %s = %.2f s; ratio wall / (serial/concurrency + timeout) %.2f",
		wall.Seconds(), serial.Seconds(), wr.calls, wr.throttled, serial.Seconds()/concurrency, timeout, bound.Seconds(),
		wall.Seconds()/(serial.Seconds()/concurrency+timeout.Seconds()))
	require.LessOrEqual(t, wall, bound)
}
