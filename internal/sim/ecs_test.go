package sim

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

func setDraining(t *testing.T, a *Account, cluster, arn string, status ecstypes.ContainerInstanceStatus) {
	t.Helper()
	out, err := a.ECS().UpdateContainerInstancesState(context.Background(), &ecs.UpdateContainerInstancesStateInput{
		Cluster: aws.String(cluster), ContainerInstances: []string{arn}, Status: status})
	require.NoError(t, err)
	require.Empty(t, out.Failures)
	require.Equal(t, string(status), aws.ToString(out.ContainerInstances[0].Status))
}

func describeCI(t *testing.T, a *Account, cluster, arn string) ecstypes.ContainerInstance {
	t.Helper()
	out, err := a.ECS().DescribeContainerInstances(context.Background(), &ecs.DescribeContainerInstancesInput{
		Cluster: aws.String(cluster), ContainerInstances: []string{arn}})
	require.NoError(t, err)
	require.Len(t, out.ContainerInstances, 1)
	return out.ContainerInstances[0]
}

// tasksOn lists and describes every task on a container instance with the given desired status.
func tasksOn(t *testing.T, a *Account, cluster, arn string, desired ecstypes.DesiredStatus) []ecstypes.Task {
	t.Helper()
	ctx := context.Background()
	list, err := a.ECS().ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(cluster), ContainerInstance: aws.String(arn), DesiredStatus: desired})
	require.NoError(t, err)
	if len(list.TaskArns) == 0 {
		return nil
	}
	desc, err := a.ECS().DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(cluster), Tasks: list.TaskArns})
	require.NoError(t, err)
	return desc.Tasks
}

func lastStatuses(tasks []ecstypes.Task) map[string]int {
	out := map[string]int{}
	for _, t := range tasks {
		out[aws.ToString(t.LastStatus)]++
	}
	return out
}

// Field case C8: a DRAINING container instance whose tasks are DEACTIVATING / STOPPING / DEPROVISIONING shows
// runningTasksCount + pendingTasksCount == 0 while it is not yet drained.
func TestDrainingWalksTasksThroughTheStopStages(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 3, Max: 4, Desired: 3, ECSCluster: "prod"})
	a.CreateService("prod", "web", 6, false)
	victim := a.Group("g").Instances[0]
	require.Equal(t, map[string]int{"RUNNING": 2}, victim.TasksByLastStatus)

	setDraining(t, a, "prod", victim.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	require.Equal(t, map[string]int{"RUNNING": 2}, lastStatuses(tasksOn(t, a, "prod", victim.ContainerInstanceARN, "")),
		"old tasks keep running until their replacements run")
	ci := describeCI(t, a, "prod", victim.ContainerInstanceARN)
	require.Equal(t, int32(2), ci.RunningTasksCount)

	a.Advance(10 * time.Second) // replacements RUNNING, old tasks DEACTIVATING
	ci = describeCI(t, a, "prod", victim.ContainerInstanceARN)
	require.Equal(t, "DRAINING", aws.ToString(ci.Status))
	require.Zero(t, ci.RunningTasksCount+ci.PendingTasksCount, "C8: the counts are already zero")
	require.Empty(t, tasksOn(t, a, "prod", victim.ContainerInstanceARN, ""), "no task with desiredStatus RUNNING is left")
	stopping := tasksOn(t, a, "prod", victim.ContainerInstanceARN, ecstypes.DesiredStatusStopped)
	require.Equal(t, map[string]int{"DEACTIVATING": 2}, lastStatuses(stopping), "C8: but the tasks are not STOPPED")
	require.Equal(t, "service:web", aws.ToString(stopping[0].Group))
	require.Equal(t, "STOPPED", aws.ToString(stopping[0].DesiredStatus))

	for _, want := range []string{"STOPPING", "DEPROVISIONING", "STOPPED"} {
		a.Advance(10 * time.Second)
		require.Equal(t, map[string]int{want: 2}, lastStatuses(tasksOn(t, a, "prod", victim.ContainerInstanceARN, ecstypes.DesiredStatusStopped)))
		require.Equal(t, 6, a.ServiceTasks("prod", "web"), "the service never lost a running task")
	}
	for _, i := range a.Group("g").Instances[1:] {
		require.Equal(t, map[string]int{"RUNNING": 3}, i.TasksByLastStatus, "replacements went to the other instances")
	}

	svc, err := a.ECS().DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String("prod"), Services: []string{"web", "nope"}})
	require.NoError(t, err)
	require.Equal(t, int32(6), svc.Services[0].RunningCount)
	require.Equal(t, "MISSING", aws.ToString(svc.Failures[0].Reason))
}

func TestDaemonTasksStopLastAndJoinNewInstances(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 2, Max: 3, Desired: 2, ECSCluster: "prod"})
	a.CreateService("prod", "web", 2, false)
	a.CreateService("prod", "logs", 0, true)
	victim := a.Group("g").Instances[0]
	require.Equal(t, map[string]int{"RUNNING": 2}, victim.TasksByLastStatus, "one web task and one daemon task")

	setDraining(t, a, "prod", victim.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	a.Advance(10 * time.Second)
	v, _ := a.Instance(victim.ID)
	require.Equal(t, map[string]int{"DEACTIVATING": 1, "RUNNING": 1}, v.TasksByLastStatus, "the daemon task still runs")
	a.Advance(30 * time.Second)
	v, _ = a.Instance(victim.ID)
	require.Equal(t, map[string]int{"STOPPED": 1, "DEACTIVATING": 1}, v.TasksByLastStatus, "the daemon task stops once the others are STOPPED")
	a.Advance(30 * time.Second)
	v, _ = a.Instance(victim.ID)
	require.Equal(t, map[string]int{"STOPPED": 2}, v.TasksByLastStatus)

	a.SetDesiredCapacity("g", 3)
	a.Advance(90*time.Second + 20*time.Second + 10*time.Second)
	fresh := a.Group("g").Instances[2]
	require.Equal(t, map[string]int{"RUNNING": 1}, fresh.TasksByLastStatus, "a daemon task on the new instance, no rebalanced web task")
}

func TestDrainingWaitsForCapacity(t *testing.T) {
	a := New(testingclock.NewFakeClock(start), Options{MaxTasksPerInstance: 2})
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 2, Desired: 1, ECSCluster: "prod"})
	a.CreateService("prod", "web", 2, false)
	victim := a.Group("g").Instances[0]
	setDraining(t, a, "prod", victim.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)

	a.Advance(5 * time.Minute)
	v, _ := a.Instance(victim.ID)
	require.Equal(t, map[string]int{"RUNNING": 2}, v.TasksByLastStatus, "no other instance can take the tasks")

	a.SetDesiredCapacity("g", 2)
	a.Advance(90*time.Second + 20*time.Second + 10*time.Second)
	v, _ = a.Instance(victim.ID)
	require.Equal(t, map[string]int{"DEACTIVATING": 2}, v.TasksByLastStatus)
	require.Equal(t, 2, a.ServiceTasks("prod", "web"))
}

func TestReactivatingStopsTheDrain(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 2, Max: 2, Desired: 2, ECSCluster: "prod"})
	a.CreateService("prod", "web", 4, false)
	victim := a.Group("g").Instances[0]
	setDraining(t, a, "prod", victim.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	a.Advance(5 * time.Second)
	setDraining(t, a, "prod", victim.ContainerInstanceARN, ecstypes.ContainerInstanceStatusActive)
	a.Advance(time.Minute)

	v, _ := a.Instance(victim.ID)
	require.Equal(t, map[string]int{"RUNNING": 2}, v.TasksByLastStatus, "the original tasks keep running")
	require.Equal(t, 4, a.ServiceTasks("prod", "web"), "surplus replacements were stopped")
}

func TestTerminatedInstanceTasksAreReplaced(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 0, Max: 3, Desired: 3, ECSCluster: "prod"})
	a.CreateService("prod", "web", 6, false)
	victim := a.Group("g").Instances[0]

	_, err := a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(victim.ID), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	require.Equal(t, Termination{InstanceID: victim.ID, Group: "g", Cause: CauseAPI, RequestedAt: start,
		ContainerInstanceStatus: "ACTIVE", NonStoppedTasks: 2, Proceeded: true, ProceededAt: start}, a.Terminations()[0], "terminated without a drain")

	a.Advance(30 * time.Second)
	v, _ := a.Instance(victim.ID)
	require.Equal(t, "Terminated", v.LifecycleState)
	require.Empty(t, v.ContainerInstanceStatus)
	require.Equal(t, map[string]int{"STOPPED": 2}, v.TasksByLastStatus)
	list, err := a.ECS().ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("prod")})
	require.NoError(t, err)
	require.Len(t, list.ContainerInstanceArns, 2, "the container instance is deregistered")
	require.Equal(t, "INACTIVE", aws.ToString(describeCI(t, a, "prod", victim.ContainerInstanceARN).Status))

	a.Advance(10 * time.Second)
	require.Equal(t, 6, a.ServiceTasks("prod", "web"), "the service re-placed its tasks")
}

// Field case C7: 250 container instances; ListContainerInstances returns ARNs only, 100 a page.
func TestListContainerInstancesPaging(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 250, Max: 250, Desired: 250, ECSCluster: "big"})
	target := a.Group("g").Instances[230]

	var pages [][]string
	in := &ecs.ListContainerInstancesInput{Cluster: aws.String("big")}
	for {
		out, err := a.ECS().ListContainerInstances(ctx, in)
		require.NoError(t, err)
		pages = append(pages, out.ContainerInstanceArns)
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	require.Len(t, pages, 3)
	require.Len(t, pages[0], 100)
	require.Len(t, pages[1], 100)
	require.Len(t, pages[2], 50)
	require.Contains(t, pages[2], target.ContainerInstanceARN)

	desc, err := a.ECS().DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("big"), ContainerInstances: pages[2]})
	require.NoError(t, err)
	found := ""
	for _, ci := range desc.ContainerInstances {
		if aws.ToString(ci.Ec2InstanceId) == target.ID {
			found = aws.ToString(ci.ContainerInstanceArn)
		}
	}
	require.Equal(t, target.ContainerInstanceARN, found)

	filtered, err := a.ECS().ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("big"),
		Filter: aws.String("ec2InstanceId == " + target.ID)})
	require.NoError(t, err)
	require.Equal(t, []string{target.ContainerInstanceARN}, filtered.ContainerInstanceArns)

	_, err = a.ECS().ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("big"), Filter: aws.String("bogus ~ 1")})
	requireAPIError(t, err, "InvalidParameterException", "filter")

	setDraining(t, a, "big", target.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	draining, err := a.ECS().ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("big"), Status: ecstypes.ContainerInstanceStatusDraining})
	require.NoError(t, err)
	require.Equal(t, []string{target.ContainerInstanceARN}, draining.ContainerInstanceArns)
}

func TestDescribeContainerInstancesLimits(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 1, Desired: 1, ECSCluster: "prod"})
	arns := make([]string, 101)
	for i := range arns {
		arns[i] = a.Group("g").Instances[0].ContainerInstanceARN
	}
	_, err := a.ECS().DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("prod"), ContainerInstances: arns})
	requireAPIError(t, err, "InvalidParameterException", "100")
	var invalid *ecstypes.InvalidParameterException
	require.ErrorAs(t, err, &invalid)

	out, err := a.ECS().DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("prod"), ContainerInstances: []string{"nope"}})
	require.NoError(t, err)
	require.Equal(t, "MISSING", aws.ToString(out.Failures[0].Reason))

	_, err = a.ECS().ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("missing")})
	requireAPIError(t, err, "ClusterNotFoundException", "Cluster not found.")
}

func TestListTasksPaging(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 20, Max: 20, Desired: 20, ECSCluster: "prod"})
	a.CreateService("prod", "web", 150, false)
	var all []string
	in := &ecs.ListTasksInput{Cluster: aws.String("prod"), ServiceName: aws.String("web")}
	for {
		out, err := a.ECS().ListTasks(ctx, in)
		require.NoError(t, err)
		require.LessOrEqual(t, len(out.TaskArns), 100)
		all = append(all, out.TaskArns...)
		if out.NextToken == nil {
			break
		}
		in.NextToken = out.NextToken
	}
	require.Len(t, all, 150)
	_, err := a.ECS().DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("prod"), Tasks: all[:101]})
	requireAPIError(t, err, "InvalidParameterException", "100")
}

// Field case C17: ECS managed instance draining owns a terminating hook of its own.
func TestECSManagedDraining(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	q := a.CreateQueue("agent", 0, "")
	newGroup(t, a, GroupSpec{Name: "g", Min: 0, Max: 3, Desired: 2, ECSCluster: "prod", ECSManagedDraining: true,
		Hooks: []HookSpec{{Name: "drain", Transition: TransitionTerminating, QueueURL: q}}})
	a.CreateService("prod", "web", 4, false)
	victim := a.Group("g").Instances[0]

	_, err := a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(victim.ID), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	v, _ := a.Instance(victim.ID)
	require.Equal(t, "Terminating:Wait", v.LifecycleState)
	require.Equal(t, "DRAINING", v.ContainerInstanceStatus, "ECS drains on its own")

	_, err = a.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String("g"),
		LifecycleHookName: aws.String("drain"), InstanceId: aws.String(victim.ID), LifecycleActionResult: aws.String("CONTINUE")})
	require.NoError(t, err)
	v, _ = a.Instance(victim.ID)
	require.Equal(t, "Terminating:Wait", v.LifecycleState, "ECS's own action is still open")

	a.Advance(40 * time.Second)
	v, _ = a.Instance(victim.ID)
	require.Equal(t, "Terminating:Proceed", v.LifecycleState)
	completions := a.LifecycleCompletions()
	require.Len(t, completions, 2)
	require.Equal(t, ECSManagedDrainingHookName, completions[1].Hook)
	require.Equal(t, CallerECS, completions[1].Caller)
	require.Equal(t, 4, a.ServiceTasks("prod", "web"))
}

func TestListContainerInstancesFilterExpressions(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 3, Max: 3, Desired: 3, ECSCluster: "prod"})
	a.CreateService("prod", "web", 2, false) // instances 0 and 1 (spread over AZs) get one task each
	insts := a.Group("g").Instances
	list := func(filter string) []string {
		out, err := a.ECS().ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("prod"), Filter: aws.String(filter)})
		require.NoError(t, err, filter)
		return out.ContainerInstanceArns
	}
	require.Equal(t, []string{insts[2].ContainerInstanceARN}, list("runningTasksCount == 0"))
	require.Len(t, list("runningTasksCount > 0"), 2)
	require.Len(t, list("ec2InstanceId in ["+insts[0].ID+", "+insts[2].ID+"]"), 2)
	require.Equal(t, []string{insts[1].ContainerInstanceARN}, list("ec2InstanceId !in ["+insts[0].ID+", "+insts[2].ID+"]"))
	require.Equal(t, []string{insts[0].ContainerInstanceARN}, list("attribute:ecs.availability-zone == us-east-1a and agentConnected == true"))
}

// Amazon ECS Developer Guide, "Amazon ECS task placement strategies": binpack on memory fills the instance with
// the least memory left first; the default spread by Availability Zone, then instance, evens them out. Both are
// reported by DescribeServices.
func TestPlacementStrategyBinpackFillsOneInstanceFirst(t *testing.T) {
	for _, tc := range []struct {
		name    string
		binpack bool
		perCI   []int // tasks per instance, sorted high to low
		first   ecstypes.PlacementStrategyType
	}{
		{name: "spread", perCI: []int{2, 2, 1}, first: ecstypes.PlacementStrategyTypeSpread},
		{name: "binpack", binpack: true, perCI: []int{4, 1, 0}, first: ecstypes.PlacementStrategyTypeBinpack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(testingclock.NewFakeClock(start), Options{MaxTasksPerInstance: 4})
			newGroup(t, a, GroupSpec{Name: "g", Min: 3, Max: 3, Desired: 3, ECSCluster: "prod"})
			a.Advance(5 * time.Minute)
			a.CreateService("prod", "web", 0, false)
			a.SetServiceDeployment("prod", "web", ServiceDeployment{Binpack: tc.binpack})
			a.SetServiceDesiredCount("prod", "web", 5)
			a.Advance(time.Minute)
			var got []int
			for _, i := range a.Group("g").Instances {
				got = append(got, i.TasksByLastStatus["RUNNING"])
			}
			sort.Sort(sort.Reverse(sort.IntSlice(got)))
			require.Equal(t, tc.perCI, got)
			out, err := a.ECS().DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String("prod"), Services: []string{"web"}})
			require.NoError(t, err)
			require.Equal(t, tc.first, out.Services[0].PlacementStrategy[0].Type)
		})
	}
}

// Availability Zone rebalancing: a group of 2 instances in 2 zones runs 6 tasks, 3 in each; a third instance
// joins in the third zone. The replica scheduler leaves the tasks where they are (3, 3, 0); with rebalancing
// ECS moves one task at a time into the empty zone, the new task RUNNING before the old one stops, until the
// zones hold 2, 2 and 2 with the service never below its count; a binpack service is not rebalanced.
func TestAvailabilityZoneRebalancingMovesTasksIntoTheEmptyZone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       ServiceDeployment
		perZone []int
		status  ecstypes.AvailabilityZoneRebalancing
	}{
		{"disabled", ServiceDeployment{}, []int{3, 3, 0}, ecstypes.AvailabilityZoneRebalancingDisabled},
		{"enabled", ServiceDeployment{AvailabilityZoneRebalancing: true}, []int{2, 2, 2}, ecstypes.AvailabilityZoneRebalancingEnabled},
		{"enabled but binpack", ServiceDeployment{AvailabilityZoneRebalancing: true, Binpack: true}, nil, ecstypes.AvailabilityZoneRebalancingDisabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAccount(t)
			newGroup(t, a, GroupSpec{Name: "g", Min: 2, Max: 3, Desired: 2, ECSCluster: "prod"})
			a.Advance(5 * time.Minute)
			a.CreateService("prod", "web", 0, false)
			a.SetServiceDeployment("prod", "web", tc.d)
			a.SetServiceDesiredCount("prod", "web", 6)
			a.Advance(time.Minute)
			low := 6
			a.OnChange(func(v *View) { low = min(low, v.ServiceTasks("prod", "web")) })
			a.SetDesiredCapacity("g", 3)
			a.Advance(10 * time.Minute)
			perZone := map[string]int{}
			for _, i := range a.Group("g").Instances {
				perZone[i.AvailabilityZone] += i.TasksByLastStatus["RUNNING"]
			}
			require.Len(t, perZone, 3, "one instance per zone")
			var got []int
			for _, n := range perZone {
				got = append(got, n)
			}
			sort.Sort(sort.Reverse(sort.IntSlice(got)))
			if tc.perZone != nil {
				require.Equal(t, tc.perZone, got)
			}
			require.Equal(t, 6, a.ServiceTasks("prod", "web"))
			require.Equal(t, 6, low, "never below the service's count")
			out, err := a.ECS().DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String("prod"), Services: []string{"web"}})
			require.NoError(t, err)
			require.Equal(t, tc.status, out.Services[0].AvailabilityZoneRebalancing)
		})
	}
}
