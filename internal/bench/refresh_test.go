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

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// refreshResults are the figures of the rollout by instance refresh, the only way the agent rolls a group: an
// ECS group of 1, 10 and 100 instances with the agent's launching and terminating hooks.
type refreshResults struct {
	// RefreshOverheadRatio<n>At15s and RefreshOverheadRatio<n>SafetyPoll are the n-instance rollout's simulated
	// time (the golden-AMI change to Completed) over the refresh floor of n instances (refreshFloor), at the
	// 15 s tick and with wake-up events at the 2 min safety poll.
	RefreshOverheadRatio1At15s        float64 `json:"refresh_overhead_ratio_1_15s_tick"`
	RefreshOverheadRatio1SafetyPoll   float64 `json:"refresh_overhead_ratio_1_safety_poll"`
	RefreshOverheadRatio10At15s       float64 `json:"refresh_overhead_ratio_10_15s_tick"`
	RefreshOverheadRatio10SafetyPoll  float64 `json:"refresh_overhead_ratio_10_safety_poll"`
	RefreshOverheadRatio100At15s      float64 `json:"refresh_overhead_ratio_100_15s_tick"`
	RefreshOverheadRatio100SafetyPoll float64 `json:"refresh_overhead_ratio_100_safety_poll"`
	// RefreshFloorSeconds<n> is the refresh floor of the n-instance group, in simulated seconds.
	RefreshFloorSeconds1   float64 `json:"refresh_floor_seconds_1"`
	RefreshFloorSeconds10  float64 `json:"refresh_floor_seconds_10"`
	RefreshFloorSeconds100 float64 `json:"refresh_floor_seconds_100"`
	// AWS calls per replaced instance, sqs:ReceiveMessage apart, and DynamoDB requests per replaced instance of
	// the 10-instance rollout, at the 15 s tick and with wake-up events; the maps are the same by operation
	// (ReceiveMessage included).
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
	// FleetRefresh* are the same per replaced instance of ten groups of ten, each in a cluster of its own, rolled
	// at once with wake-up events (fleetRefreshRollout): what each replaced instance costs when the agent's
	// per-account work (the lifecycle sweep, the full passes) is shared by the groups of an account.
	FleetRefreshAPICallsPerInstance        float64            `json:"fleet_refresh_api_calls_per_instance"`
	FleetRefreshReceiveMessagePerInstance  float64            `json:"fleet_refresh_receive_message_per_instance"`
	FleetRefreshDynamoDBOpsPerInstance     float64            `json:"fleet_refresh_dynamodb_ops_per_instance"`
	FleetRefreshAPICallsPerInstanceByOp    map[string]float64 `json:"fleet_refresh_api_calls_per_instance_by_operation"`
	FleetRefreshDynamoDBOpsPerInstanceByOp map[string]float64 `json:"fleet_refresh_dynamodb_ops_per_instance_by_operation"`
}

// fleetRefreshGroups and fleetRefreshInstances are the shape of the fleet rollout the bench measures beside the
// one group's: ten groups of ten instances.
const fleetRefreshGroups, fleetRefreshInstances = 10, 10

// refreshSpec is the bench's group of n instances (desired = min = n, max n + 1: room for the refresh's batch of
// one above desired; 2n tasks of a service), with the agent's launching and terminating hooks (Build's default).
func refreshSpec(n int, events bool) testworld.Spec {
	return testworld.Spec{WakeUpEvents: events, WakeUpQueue: events, Groups: []testworld.GroupSetup{{Name: "roll", Cluster: "bench", Parameter: "/golden-ami/roll",
		Min: int32(n), Max: int32(n + 1), Desired: int32(n)}}, Services: map[string]int{"web": 2 * n}}
}

// refreshRollout rolls the group of n instances to ImageB with the agent, at the given reconcile tick
// or (events) with wake-up events at the production safety poll, and returns its simulated time from the
// golden-AMI change to Completed, the AWS calls during it and, with a DynamoDB store (nil: the memory store),
// the store's DynamoDB requests during it. Every invariant of the checker holds, desired capacity unwritten.
func refreshRollout(t *testing.T, n int, tick time.Duration, events bool, db *countedStore) (time.Duration, map[string]int, map[string]int) {
	ctx := context.Background()
	spec := refreshSpec(n, events)
	if db != nil {
		spec.Store = db.store
	}
	w, err := testworld.Build(spec)
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
	w.PublishAMI("/golden-ami/roll", testworld.ImageB)
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

// refreshFloor is the time the same instance refresh of the group of n instances takes in the
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
	w, err := testworld.Build(refreshSpec(n, false))
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
	version := a.CreateLaunchTemplateVersion(g.LaunchTemplateID, testworld.ImageB)
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

// measureRefresh fills res's refresh figures: the rollouts of 1, 10 and 100 instances at the 15 s tick and with
// wake-up events against the refresh floor of each size, the 10-instance ones on a DynamoDB store on kumo with
// their AWS calls and DynamoDB requests counted; it logs those two rollouts' calls and requests per replaced
// instance by operation and the requests by kind of item (printCosts, printItems), as TestRefreshCosts does.
func measureRefresh(t *testing.T) refreshResults {
	var res refreshResults
	var floor time.Duration
	floor, res.RefreshOverheadRatio1At15s, res.RefreshOverheadRatio1SafetyPoll = refreshOverhead(t, 1)
	res.RefreshFloorSeconds1 = floor.Seconds()
	floor, res.RefreshOverheadRatio100At15s, res.RefreshOverheadRatio100SafetyPoll = refreshOverhead(t, 100)
	res.RefreshFloorSeconds100 = floor.Seconds()

	const n = 10
	floor = refreshFloor(t, n)
	res.RefreshFloorSeconds10 = floor.Seconds()
	db := dynamoStore(t)
	took, calls, ops := refreshRollout(t, n, 15*time.Second, false, db)
	res.RefreshOverheadRatio10At15s = took.Seconds() / floor.Seconds()
	res.RefreshAPICallsPerInstanceByOp, res.RefreshAPICallsPerInstance, res.RefreshReceiveMessagePerInstance = perInstanceTotals(calls, n)
	res.RefreshDynamoDBOpsPerInstanceByOp, res.RefreshDynamoDBOpsPerInstance, _ = perInstanceTotals(ops, n)
	printCosts(t, fmt.Sprintf("refresh, 15 s tick (took %s)", took), res.RefreshOverheadRatio10At15s, calls, ops)
	printItems(t, db.api)
	db = dynamoStore(t)
	took, calls, ops = refreshRollout(t, n, 0, true, db)
	res.RefreshOverheadRatio10SafetyPoll = took.Seconds() / floor.Seconds()
	res.RefreshAPICallsPerInstanceSafetyPollByOp, res.RefreshAPICallsPerInstanceSafetyPoll, res.RefreshReceiveMessagePerInstanceSafetyPoll = perInstanceTotals(calls, n)
	res.RefreshDynamoDBOpsPerInstanceSafetyPollByOp, res.RefreshDynamoDBOpsPerInstanceSafetyPoll, _ = perInstanceTotals(ops, n)
	printCosts(t, fmt.Sprintf("refresh, wake-up events, 2 min safety poll (took %s)", took), res.RefreshOverheadRatio10SafetyPoll, calls, ops)
	printItems(t, db.api)
	const replaced = fleetRefreshGroups * fleetRefreshInstances
	took, calls, ops = fleetRefreshRollout(t, fleetRefreshGroups, fleetRefreshInstances, 0, dynamoStore(t))
	res.FleetRefreshAPICallsPerInstanceByOp, res.FleetRefreshAPICallsPerInstance, res.FleetRefreshReceiveMessagePerInstance = perInstanceTotals(calls, replaced)
	res.FleetRefreshDynamoDBOpsPerInstanceByOp, res.FleetRefreshDynamoDBOpsPerInstance, _ = perInstanceTotals(ops, replaced)
	printCostsOf(t, fmt.Sprintf("%d groups of %d by refresh at once, wake-up events (took %s)", fleetRefreshGroups, fleetRefreshInstances, took), 0, replaced, calls, ops)
	return res
}

// refreshOverhead returns the refresh floor of the group of n instances and its rollout's time over that floor
// at the 15 s tick and with wake-up events at the 2 min safety poll, each on the memory store.
func refreshOverhead(t *testing.T, n int) (floor time.Duration, at15s, safetyPoll float64) {
	floor = refreshFloor(t, n)
	took, _, _ := refreshRollout(t, n, 15*time.Second, false, nil)
	at15s = took.Seconds() / floor.Seconds()
	took, _, _ = refreshRollout(t, n, 0, true, nil)
	return floor, at15s, took.Seconds() / floor.Seconds()
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

// refreshFigures are the report's rows of the rollout by instance refresh.
func refreshFigures(r refreshResults) []figure {
	const floorHow = "over the refresh floor: the same instance refresh in the simulated account (MinHealthyPercentage 100, MaxHealthyPercentage 100 + ceil(100 / n) for a batch of one, SkipMatching, the group's warm-up) with a perfect hook handler and no agent, each launching action completed the instant its instance serves, each old instance set DRAINING the instant its terminating action waits and that action completed the instant its last task stopped (StartInstanceRefresh to Successful, looked at every simulated second)"
	return []figure{
		{"rollout time / refresh floor, 1 / 10 / 100 instances, 15 s tick", fmt.Sprintf("%.3f / %.3f / %.3f", r.RefreshOverheadRatio1At15s, r.RefreshOverheadRatio10At15s, r.RefreshOverheadRatio100At15s),
			"<= 1.05", verdict(max(r.RefreshOverheadRatio1At15s, r.RefreshOverheadRatio10At15s, r.RefreshOverheadRatio100At15s) <= 1.05),
			"an ECS group of n instances (max n + 1, the agent's launching and terminating hooks) rolled by the agent's instance refresh at the 15 s reconcile interval without wake-up events: golden-AMI change to Completed, " + floorHow},
		{"rollout time / refresh floor, 1 / 10 / 100 instances, wake-up events", fmt.Sprintf("%.3f / %.3f / %.3f (floors %.0f / %.0f / %.0f s)", r.RefreshOverheadRatio1SafetyPoll, r.RefreshOverheadRatio10SafetyPoll, r.RefreshOverheadRatio100SafetyPoll,
			r.RefreshFloorSeconds1, r.RefreshFloorSeconds10, r.RefreshFloorSeconds100),
			"<= 1.05", verdict(max(r.RefreshOverheadRatio1SafetyPoll, r.RefreshOverheadRatio10SafetyPoll, r.RefreshOverheadRatio100SafetyPoll) <= 1.05),
			"same, with wake-up events routed to the wake-up queue and the production reconcile interval (2 min safety poll), driven as Agent.Run (World.RunEvents)"},
		{"AWS API calls per replaced instance, wake-up events", fmt.Sprintf("%.1f (+ %.1f ReceiveMessage)", r.RefreshAPICallsPerInstanceSafetyPoll, r.RefreshReceiveMessagePerInstanceSafetyPoll), "<= 15", verdict(r.RefreshAPICallsPerInstanceSafetyPoll <= 15),
			"the 10-instance rollout at the 2 min safety poll with wake-up events / 10, sqs:ReceiveMessage apart (it grows with time, not work; by operation below)"},
		{"DynamoDB requests per replaced instance, wake-up events", fmt.Sprintf("%.1f", r.RefreshDynamoDBOpsPerInstanceSafetyPoll), "<= 8", verdict(r.RefreshDynamoDBOpsPerInstanceSafetyPoll <= 8),
			"every request of the DynamoDB store (kumo) during the same rollout / 10, without the bench's own reads (by operation below)"},
		{"AWS API calls per replaced instance, 15 s tick", fmt.Sprintf("%.1f (+ %.1f ReceiveMessage)", r.RefreshAPICallsPerInstance, r.RefreshReceiveMessagePerInstance), "<= 15", verdict(r.RefreshAPICallsPerInstance <= 15),
			"the 10-instance rollout at the 15 s reconcile interval without wake-up events / 10, sqs:ReceiveMessage apart"},
		{"DynamoDB requests per replaced instance, 15 s tick", fmt.Sprintf("%.1f", r.RefreshDynamoDBOpsPerInstance), "<= 8", verdict(r.RefreshDynamoDBOpsPerInstance <= 8),
			"same rollout; a Query or Scan counts each page"},
		{"AWS API calls / DynamoDB requests per replaced instance, 10 groups of 10 at once, wake-up events",
			fmt.Sprintf("%.1f (+ %.1f ReceiveMessage) / %.1f", r.FleetRefreshAPICallsPerInstance, r.FleetRefreshReceiveMessagePerInstance, r.FleetRefreshDynamoDBOpsPerInstance), "-", "-",
			"ten such groups, each in a cluster of its own with its service, rolled at once to one golden AMI / 100: the lifecycle sweep (a hundred groups a DescribeAutoScalingGroups) and the full passes shared among the groups of an account, as in production; the goals above are one group's alone (by operation below)"},
	}
}

// TestRefreshCosts prints the figures of the rollout by instance refresh alone (PATCH_AGENT_BENCH=1
// PATCH_AGENT_KUMO=$(scripts/ensure-kumo.sh) go test ./internal/bench -run TestRefreshCosts -v): the refresh
// floor, each rollout's time over it, and its AWS calls and DynamoDB requests per replaced instance by
// operation and by kind of item; then the rollout time over the refresh floor of 1 and 100 instances.
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
	for _, size := range []int{1, 100} {
		floor, at15s, safetyPoll := refreshOverhead(t, size)
		t.Logf("refresh, %d instances: floor %s; rollout time / floor %.3f at the 15 s tick, %.3f with wake-up events", size, floor, at15s, safetyPoll)
	}
}

// eksRefreshRollout is refreshRollout for the demo's EKS self-managed node group (a Deployment under a
// PodDisruptionBudget, a DaemonSet) with n instances rolled by instance refresh in batches of one, at the
// 15 s tick or with wake-up events; Kubernetes calls are not counted (they are not AWS calls).
func eksRefreshRollout(t *testing.T, n int, events bool, db *countedStore) (time.Duration, map[string]int, map[string]int) {
	ctx := context.Background()
	spec := testworld.DemoSpec()
	spec.Groups, spec.Services = spec.Groups[1:], nil
	g := &spec.Groups[0]
	g.Min, g.Desired, g.Max = int32(n), int32(n), int32(n+1)
	spec.WakeUpEvents, spec.WakeUpQueue, spec.Store = events, events, db.store
	w, err := testworld.Build(spec)
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
	w.PublishPublicAMI(w.EKSParameter(g.Name), testworld.ImageB)
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

// fleetRefreshSpec is the bench's fleet of groups ECS groups of n instances each (desired = min = n, max n + 1),
// every group in a cluster of its own, all on one golden-AMI parameter: the shape of an account whose groups
// one AMI rolls at once.
func fleetRefreshSpec(groups, n int) testworld.Spec {
	spec := testworld.Spec{WakeUpEvents: true, WakeUpQueue: true, Services: map[string]int{"web": 2 * n}}
	for k := range groups {
		spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: fmt.Sprintf("roll-%02d", k), Cluster: fmt.Sprintf("bench-%02d", k),
			Parameter: "/golden-ami/roll", Min: int32(n), Max: int32(n + 1), Desired: int32(n)})
	}
	return spec
}

// fleetRefreshRollout rolls the fleet of fleetRefreshSpec to ImageB with the agent, with wake-up events at
// the production safety poll, each cluster running a service of 2n tasks, and returns the simulated time from
// the golden-AMI change to the last group's Completed, the AWS calls and the DynamoDB requests during it. Every
// invariant of the checker holds, desired capacity unwritten.
func fleetRefreshRollout(t *testing.T, groups, n int, lease time.Duration, db *countedStore) (time.Duration, map[string]int, map[string]int) {
	ctx := context.Background()
	spec := fleetRefreshSpec(groups, n)
	spec.Store, spec.LeaseTTL = db.store, lease
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	for _, g := range spec.Groups[1:] { // Build places Services on the first group's cluster
		w.Account.CreateService(g.Cluster, "web", 2*n, false)
		w.Checker.Workloads[g.Cluster+"/web"] = 2 * n
	}
	_, err = w.RunEvents(ctx, 30*time.Second, func() bool { return false })
	require.NoError(t, err)
	w.Account.ResetCalls()
	db.api.reset()
	start := w.Account.Clock().Now()
	w.PublishAMI("/golden-ami/roll", testworld.ImageB)
	last := start
	completed := func() bool {
		for _, g := range spec.Groups {
			r, err := db.uncounted.GetRollout(ctx, g.Name)
			require.NoError(t, err)
			if r.Phase != state.PhaseCompleted {
				return false
			}
			if r.UpdatedAt.After(last) {
				last = r.UpdatedAt
			}
		}
		return true
	}
	done, err := w.RunEvents(ctx, time.Duration(n)*time.Hour, completed)
	require.NoError(t, err)
	require.True(t, done, "the fleet's rollouts did not all complete")
	require.Empty(t, w.Checker.Finish())
	require.Zero(t, w.Account.Calls()["autoscaling:SetDesiredCapacity"])
	return last.Sub(start), w.Account.Calls(), db.api.snapshot()
}

// TestFleetRefreshCosts prints the AWS calls and DynamoDB requests per replaced instance of ten groups of ten
// rolled at once (PATCH_AGENT_BENCH=1 PATCH_AGENT_KUMO=$(scripts/ensure-kumo.sh) go test ./internal/bench -run
// TestFleetRefreshCosts -v): what an account's groups pay together, the lifecycle sweep's DescribeAutoScalingGroups
// (a hundred groups a call) shared among them; then the same with `--lease-ttl 10m` instead of the default 2
// minutes, what a longer lease saves in renewals of the rollout records and lifecycle action claims.
func TestFleetRefreshCosts(t *testing.T) {
	if os.Getenv("PATCH_AGENT_BENCH") == "" {
		t.Skip("measurements run with PATCH_AGENT_BENCH=1")
	}
	const groups, n = fleetRefreshGroups, fleetRefreshInstances
	for _, lease := range []time.Duration{0, 10 * time.Minute} {
		db := dynamoStore(t)
		took, calls, ops := fleetRefreshRollout(t, groups, n, lease, db)
		what := "default lease"
		if lease > 0 {
			what = fmt.Sprintf("--lease-ttl %s", lease)
		}
		printCostsOf(t, fmt.Sprintf("%d groups of %d by refresh at once, wake-up events, %s (took %s)", groups, n, what, took), 0, groups*n, calls, ops)
		printItemsOf(t, db.api, groups*n)
	}
}
