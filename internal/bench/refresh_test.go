package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// refreshResults are the figures of the rollout by instance refresh (patch-agent/strategy=refresh): the same
// 10-instance ECS group as the surge figures, with the agent's launching and terminating hooks.
type refreshResults struct {
	// RefreshOverheadRatio10At15s and RefreshOverheadRatio10SafetyPoll are the rollout's simulated time
	// (the golden-AMI change to Completed) over the refresh floor (refreshFloor), at the 15 s tick and with
	// wake-up events at the 2 min safety poll.
	RefreshOverheadRatio10At15s      float64 `json:"refresh_overhead_ratio_10_15s_tick"`
	RefreshOverheadRatio10SafetyPoll float64 `json:"refresh_overhead_ratio_10_safety_poll"`
	// RefreshFloorSeconds10 is the refresh floor of the 10-instance group, in simulated seconds.
	RefreshFloorSeconds10 float64 `json:"refresh_floor_seconds_10"`
	// AWS calls per replaced instance, sqs:ReceiveMessage apart, and DynamoDB requests per replaced instance,
	// at the 15 s tick and with wake-up events; the maps are the same by operation (ReceiveMessage included).
	RefreshAPICallsPerInstance                  float64            `json:"refresh_api_calls_per_instance"`
	RefreshReceiveMessagePerInstance            float64            `json:"refresh_receive_message_per_instance"`
	RefreshDynamoDBOpsPerInstance               float64            `json:"refresh_dynamodb_ops_per_instance"`
	RefreshAPICallsPerInstanceSafetyPoll        float64            `json:"refresh_api_calls_per_instance_safety_poll"`
	RefreshReceiveMessagePerInstanceSafetyPoll  float64            `json:"refresh_receive_message_per_instance_safety_poll"`
	RefreshDynamoDBOpsPerInstanceSafetyPoll     float64            `json:"refresh_dynamodb_ops_per_instance_safety_poll"`
	RefreshAPICallsPerInstanceByOp              map[string]float64 `json:"refresh_api_calls_per_instance_by_operation"`
	RefreshAPICallsPerInstanceSafetyPollByOp    map[string]float64 `json:"refresh_api_calls_per_instance_safety_poll_by_operation"`
	RefreshDynamoDBOpsPerInstanceByOp           map[string]float64 `json:"refresh_dynamodb_ops_per_instance_by_operation"`
	RefreshDynamoDBOpsPerInstanceSafetyPollByOp map[string]float64 `json:"refresh_dynamodb_ops_per_instance_safety_poll_by_operation"`
}

// refreshSpec is the surge figures' group of n instances (desired = min = n, max n + 1, 2n tasks of a service)
// rolled by instance refresh in batches of one: tagged patch-agent/strategy=refresh, with the agent's launching
// hook beside its terminating hook.
func refreshSpec(n int, events bool) demo.Spec {
	return demo.Spec{WakeUpEvents: events, WakeUpQueue: events, Groups: []demo.GroupSetup{{Name: "roll", Cluster: "bench", Parameter: "/golden-ami/roll",
		Min: int32(n), Max: int32(n + 1), Desired: int32(n),
		Tags: map[string]string{lifecycle.TagStrategy: lifecycle.StrategyRefresh}}}, Services: map[string]int{"web": 2 * n}}
}

// refreshRollout rolls the refresh group of n instances to ImageB with the agent, at the given reconcile tick
// or (events) with wake-up events at the production safety poll, and returns its simulated time from the
// golden-AMI change to Completed, the AWS calls during it and, with a DynamoDB store (nil: the memory store),
// the store's DynamoDB requests during it. Every invariant of the checker holds, desired capacity unwritten.
func refreshRollout(t *testing.T, n int, tick time.Duration, events bool, db *countedStore) (time.Duration, map[string]int, map[string]int) {
	ctx := context.Background()
	spec := refreshSpec(n, events)
	if db != nil {
		spec.Store = db.store
	}
	w, err := demo.Build(spec)
	require.NoError(t, err)
	run := func(limit time.Duration, done func() bool) (bool, error) {
		if events {
			return w.RunEvents(ctx, limit, done)
		}
		return w.RunUntil(ctx, tick, limit, done)
	}
	_, err = run(30*time.Second, func() bool { return false })
	require.NoError(t, err)
	w.Account.ResetCalls()
	if db != nil {
		db.api.reset()
	}
	start := w.Account.Clock().Now()
	w.PublishAMI("/golden-ami/roll", demo.ImageB)
	rollout := func() state.Rollout { return w.Rollout(ctx, "roll") }
	if db != nil {
		rollout = func() state.Rollout {
			r, err := db.uncounted.GetRollout(ctx, "roll")
			require.NoError(t, err)
			return r
		}
	}
	done, err := run(time.Duration(n)*time.Hour, func() bool { return rollout().Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v", rollout())
	require.Empty(t, w.Checker.Finish())
	require.Zero(t, w.Account.Calls()["autoscaling:SetDesiredCapacity"])
	took := rollout().UpdatedAt.Sub(start)
	if db == nil {
		return took, w.Account.Calls(), nil
	}
	return took, w.Account.Calls(), db.api.snapshot()
}

// refreshFloor is the time the same instance refresh of the refresh group of n instances takes in the
// simulated account with a perfect lifecycle hook handler and no agent: the launch template version of ImageB
// made at once, StartInstanceRefresh with the agent's preferences (MinHealthyPercentage 100,
// MaxHealthyPercentage 100 + ceil(100 / n) for a batch of one, SkipMatching, the group's instance warm-up),
// each launching action completed (CONTINUE) the instant its instance serves (container instance ACTIVE, ECS
// agent connected), each terminating action's container instance set DRAINING the instant it waits and the
// action completed the instant no task on it is other than STOPPED. It returns the time from
// StartInstanceRefresh to Successful. The handler looks every simulated second, so the floor is high by at most
// a second per lifecycle action.
func refreshFloor(t *testing.T, n int) time.Duration {
	ctx := context.Background()
	w, err := demo.Build(refreshSpec(n, false))
	require.NoError(t, err)
	a := w.Account
	asg, ecsAPI := a.AutoScaling(), a.ECS()
	handle := func() {
		var acts []sim.LifecycleAction
		a.Observe(func(v *sim.View) { acts = v.LifecycleActions() })
		g := a.Group("roll")
		byID := map[string]sim.InstanceView{}
		for _, i := range g.Instances {
			byID[i.ID] = i
		}
		for _, act := range acts {
			i, ok := byID[act.InstanceID]
			if !act.Active || act.Group != "roll" || !ok {
				continue
			}
			complete := false
			switch act.Transition {
			case sim.TransitionLaunching:
				complete = i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected
			case sim.TransitionTerminating:
				if i.ContainerInstanceStatus == "ACTIVE" {
					_, err := ecsAPI.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("bench"),
						ContainerInstances: []string{i.ContainerInstanceARN}, Status: ecstypes.ContainerInstanceStatusDraining})
					require.NoError(t, err)
					a.Advance(0)
					i = a.Group("roll").Instances[indexOf(a.Group("roll"), i.ID)]
				}
				complete = i.ContainerInstanceStatus != "ACTIVE"
				for status, count := range i.TasksByLastStatus {
					if status != "STOPPED" && count > 0 {
						complete = false
					}
				}
			}
			if complete {
				_, err := asg.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String(act.Group),
					LifecycleHookName: aws.String(act.Hook), LifecycleActionToken: aws.String(act.Token), LifecycleActionResult: aws.String(sim.ResultContinue)})
				require.NoError(t, err)
			}
		}
	}
	// The group settles as in the agent's runs (any launching action of the initial instances completed).
	for range 30 {
		handle()
		a.Advance(time.Second)
	}
	g := a.Group("roll")
	version := a.CreateLaunchTemplateVersion(g.LaunchTemplateID, demo.ImageB)
	out, err := asg.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{"roll"}})
	require.NoError(t, err)
	require.Len(t, out.AutoScalingGroups, 1)
	warmup := aws.ToInt32(out.AutoScalingGroups[0].HealthCheckGracePeriod) // as the agent decides it
	if d := out.AutoScalingGroups[0].DefaultInstanceWarmup; d != nil {
		warmup = *d
	}
	start := a.Clock().Now()
	_, err = asg.StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("roll"), Strategy: astypes.RefreshStrategyRolling,
		DesiredConfiguration: &astypes.DesiredConfiguration{LaunchTemplate: &astypes.LaunchTemplateSpecification{
			LaunchTemplateId: aws.String(g.LaunchTemplateID), Version: aws.String(fmt.Sprint(version))}},
		Preferences: &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(int32(100 + (100+n-1)/n)),
			SkipMatching: aws.Bool(true), InstanceWarmup: aws.Int32(warmup), AutoRollback: aws.Bool(false),
			ScaleInProtectedInstances: astypes.ScaleInProtectedInstancesWait, StandbyInstances: astypes.StandbyInstancesWait}})
	require.NoError(t, err)
	for limit := start.Add(time.Duration(n) * time.Hour); a.Clock().Now().Before(limit); {
		handle()
		rs, err := asg.DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String("roll")})
		require.NoError(t, err)
		require.NotEmpty(t, rs.InstanceRefreshes)
		switch s := rs.InstanceRefreshes[0].Status; s {
		case astypes.InstanceRefreshStatusSuccessful:
			return a.Clock().Now().Sub(start)
		case astypes.InstanceRefreshStatusPending, astypes.InstanceRefreshStatusInProgress:
		default:
			t.Fatalf("the floor's refresh ended %s: %s", s, aws.ToString(rs.InstanceRefreshes[0].StatusReason))
		}
		a.Advance(time.Second)
	}
	t.Fatalf("the floor's refresh did not end within %d hours", n)
	return 0
}

func indexOf(g sim.GroupView, id string) int {
	for k, i := range g.Instances {
		if i.ID == id {
			return k
		}
	}
	return -1
}

// measureRefresh fills res's refresh figures: the 10-instance refresh rollout at the 15 s tick and with
// wake-up events, each on a DynamoDB store on kumo, against the refresh floor.
func measureRefresh(t *testing.T) refreshResults {
	const n = 10
	var res refreshResults
	floor := refreshFloor(t, n)
	res.RefreshFloorSeconds10 = floor.Seconds()
	took, calls, ops := refreshRollout(t, n, 15*time.Second, false, dynamoStore(t))
	res.RefreshOverheadRatio10At15s = took.Seconds() / floor.Seconds()
	res.RefreshAPICallsPerInstanceByOp, res.RefreshAPICallsPerInstance, res.RefreshReceiveMessagePerInstance = perInstanceTotals(calls, n)
	res.RefreshDynamoDBOpsPerInstanceByOp, res.RefreshDynamoDBOpsPerInstance, _ = perInstanceTotals(ops, n)
	took, calls, ops = refreshRollout(t, n, 0, true, dynamoStore(t))
	res.RefreshOverheadRatio10SafetyPoll = took.Seconds() / floor.Seconds()
	res.RefreshAPICallsPerInstanceSafetyPollByOp, res.RefreshAPICallsPerInstanceSafetyPoll, res.RefreshReceiveMessagePerInstanceSafetyPoll = perInstanceTotals(calls, n)
	res.RefreshDynamoDBOpsPerInstanceSafetyPollByOp, res.RefreshDynamoDBOpsPerInstanceSafetyPoll, _ = perInstanceTotals(ops, n)
	return res
}

// perInstanceTotals divides counts by n: by operation, their total without sqs:ReceiveMessage, and ReceiveMessage.
func perInstanceTotals(counts map[string]int, n int) (byOp map[string]float64, total, receive float64) {
	byOp = map[string]float64{}
	for op, c := range counts {
		byOp[op] = float64(c) / float64(n)
		if op == "sqs:ReceiveMessage" {
			receive += float64(c) / float64(n)
			continue
		}
		total += float64(c) / float64(n)
	}
	return byOp, total, receive
}

// refreshFigures are the report's rows of the refresh rollout.
func refreshFigures(r refreshResults) []figure {
	return []figure{
		{"refresh: rollout time / refresh floor, 10 instances, 15 s tick / wake-up events", fmt.Sprintf("%.3f / %.3f (floor %.0f s)", r.RefreshOverheadRatio10At15s, r.RefreshOverheadRatio10SafetyPoll, r.RefreshFloorSeconds10),
			"<= 1.05", verdict(max(r.RefreshOverheadRatio10At15s, r.RefreshOverheadRatio10SafetyPoll) <= 1.05),
			"the same 10-instance ECS group tagged patch-agent/strategy=refresh (launching and terminating hooks), rolled by the agent: golden-AMI change to Completed, over the refresh floor: the same instance refresh in the simulated account (MinHealthyPercentage 100, MaxHealthyPercentage 110 for a batch of one, SkipMatching, the group's warm-up) with a perfect hook handler and no agent, each launching action completed the instant its instance serves, each old instance set DRAINING the instant its terminating action waits and that action completed the instant its last task stopped (StartInstanceRefresh to Successful, looked at every simulated second)"},
		{"refresh: AWS API calls per replaced instance, wake-up events", fmt.Sprintf("%.1f (+ %.1f ReceiveMessage)", r.RefreshAPICallsPerInstanceSafetyPoll, r.RefreshReceiveMessagePerInstanceSafetyPoll), "<= 15", verdict(r.RefreshAPICallsPerInstanceSafetyPoll <= 15),
			"the 10-instance refresh rollout at the 2 min safety poll with wake-up events / 10, sqs:ReceiveMessage apart (by operation below)"},
		{"refresh: DynamoDB requests per replaced instance, wake-up events", fmt.Sprintf("%.1f", r.RefreshDynamoDBOpsPerInstanceSafetyPoll), "<= 8", verdict(r.RefreshDynamoDBOpsPerInstanceSafetyPoll <= 8),
			"every request of the DynamoDB store (kumo) during the same rollout / 10 (by operation below)"},
		{"refresh: AWS API calls per replaced instance, 15 s tick", fmt.Sprintf("%.1f (+ %.1f ReceiveMessage)", r.RefreshAPICallsPerInstance, r.RefreshReceiveMessagePerInstance), "<= 15", verdict(r.RefreshAPICallsPerInstance <= 15),
			"the 10-instance refresh rollout at the 15 s reconcile interval without wake-up events / 10, sqs:ReceiveMessage apart"},
		{"refresh: DynamoDB requests per replaced instance, 15 s tick", fmt.Sprintf("%.1f", r.RefreshDynamoDBOpsPerInstance), "<= 8", verdict(r.RefreshDynamoDBOpsPerInstance <= 8),
			"same rollout; a Query or Scan counts each page"},
	}
}

// TestRefreshCosts prints the figures of the rollout by instance refresh alone (PATCH_AGENT_BENCH=1
// PATCH_AGENT_KUMO=$(scripts/ensure-kumo.sh) go test ./internal/bench -run TestRefreshCosts -v): the refresh
// floor, each rollout's time over it, and its AWS calls and DynamoDB requests per replaced instance by
// operation and by kind of item.
func TestRefreshCosts(t *testing.T) {
	if os.Getenv("PATCH_AGENT_BENCH") == "" {
		t.Skip("measurements run with PATCH_AGENT_BENCH=1")
	}
	const n = 10
	floor := refreshFloor(t, n)
	t.Logf("refresh floor, %d instances: %s", n, floor)
	db := dynamoStore(t)
	took, calls, ops := refreshRollout(t, n, 15*time.Second, false, db)
	printCosts(t, fmt.Sprintf("refresh, 15 s tick (took %s)", took), took.Seconds()/floor.Seconds(), calls, ops)
	printItems(t, db.api)
	db = dynamoStore(t)
	took, calls, ops = refreshRollout(t, n, 0, true, db)
	printCosts(t, fmt.Sprintf("refresh, wake-up events, 2 min safety poll (took %s)", took), took.Seconds()/floor.Seconds(), calls, ops)
	printItems(t, db.api)
	for _, events := range []bool{false, true} {
		db = dynamoStore(t)
		took, calls, ops = eksRefreshRollout(t, n, events, db)
		printCosts(t, fmt.Sprintf("EKS self-managed group by refresh, wake-up events %v (took %s; no EKS floor: the ratio is over the ECS floor)", events, took),
			took.Seconds()/floor.Seconds(), calls, ops)
	}
}

// eksRefreshRollout is refreshRollout for the demo's EKS self-managed node group (a Deployment under a
// PodDisruptionBudget, a DaemonSet) with n instances rolled by instance refresh in batches of one, at the
// 15 s tick or with wake-up events; Kubernetes calls are not counted (they are not AWS calls).
func eksRefreshRollout(t *testing.T, n int, events bool, db *countedStore) (time.Duration, map[string]int, map[string]int) {
	ctx := context.Background()
	spec := demo.DemoSpec()
	spec.Groups, spec.Services = spec.Groups[1:], nil
	g := &spec.Groups[0]
	g.Min, g.Desired, g.Max = int32(n), int32(n), int32(n+1)
	g.Tags = map[string]string{lifecycle.TagStrategy: lifecycle.StrategyRefresh}
	spec.WakeUpEvents, spec.WakeUpQueue, spec.Store = events, events, db.store
	w, err := demo.Build(spec)
	require.NoError(t, err)
	run := func(limit time.Duration, done func() bool) (bool, error) {
		if events {
			return w.RunEvents(ctx, limit, done)
		}
		return w.RunUntil(ctx, 15*time.Second, limit, done)
	}
	_, err = run(time.Minute, func() bool { return false })
	require.NoError(t, err)
	w.Account.ResetCalls()
	db.api.reset()
	start := w.Account.Clock().Now()
	w.PublishPublicAMI(w.EKSParameter(g.Name), demo.ImageB)
	rollout := func() state.Rollout {
		r, err := db.uncounted.GetRollout(ctx, g.Name)
		require.NoError(t, err)
		return r
	}
	done, err := run(time.Duration(n)*time.Hour, func() bool { return rollout().Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v", rollout())
	require.Empty(t, w.Checker.Finish())
	return rollout().UpdatedAt.Sub(start), w.Account.Calls(), db.api.snapshot()
}
