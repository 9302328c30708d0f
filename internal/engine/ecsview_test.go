package engine

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// viewECS is one ECS cluster for the drain checks that reuse the tick's view: container instances by ARN (a
// deregistered one is INACTIVE and keeps its EC2 instance id), service tasks by container instance ARN, and
// every call counted by operation.
type viewECS struct {
	instances map[string]ecstypes.ContainerInstance
	tasks     map[string][]string // container instance ARN -> RUNNING task ARNs
	// stopping are tasks with desired status STOPPED and lastStatus STOPPING, by container instance ARN:
	// counted in neither runningTasksCount nor pendingTasksCount (field case C8).
	stopping  map[string][]string
	calls     map[string]int
	listedFor []string // ContainerInstance of every ListTasks
}

var _ awsapi.ECS = (*viewECS)(nil)

func newViewECS() *viewECS {
	return &viewECS{instances: map[string]ecstypes.ContainerInstance{}, tasks: map[string][]string{}, stopping: map[string][]string{}, calls: map[string]int{}}
}

func (f *viewECS) register(arn, instanceID, status string) {
	f.instances[arn] = ecstypes.ContainerInstance{ContainerInstanceArn: aws.String(arn), Ec2InstanceId: aws.String(instanceID),
		Status: aws.String(status), AgentConnected: status != "INACTIVE"}
}

func (f *viewECS) ListContainerInstances(context.Context, *ecs.ListContainerInstancesInput, ...func(*ecs.Options)) (*ecs.ListContainerInstancesOutput, error) {
	f.calls["ListContainerInstances"]++
	out := &ecs.ListContainerInstancesOutput{}
	for arn, ci := range f.instances {
		if aws.ToString(ci.Status) != "INACTIVE" { // ECS lists no deregistered container instance
			out.ContainerInstanceArns = append(out.ContainerInstanceArns, arn)
		}
	}
	return out, nil
}

func (f *viewECS) DescribeContainerInstances(_ context.Context, in *ecs.DescribeContainerInstancesInput, _ ...func(*ecs.Options)) (*ecs.DescribeContainerInstancesOutput, error) {
	f.calls["DescribeContainerInstances"]++
	out := &ecs.DescribeContainerInstancesOutput{}
	for _, arn := range in.ContainerInstances {
		if ci, ok := f.instances[arn]; ok {
			ci.RunningTasksCount = int32(len(f.tasks[arn]))
			out.ContainerInstances = append(out.ContainerInstances, ci)
		} else {
			out.Failures = append(out.Failures, ecstypes.Failure{Arn: aws.String(arn), Reason: aws.String("MISSING")})
		}
	}
	return out, nil
}

func (f *viewECS) UpdateContainerInstancesState(_ context.Context, in *ecs.UpdateContainerInstancesStateInput, _ ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	f.calls["UpdateContainerInstancesState"]++
	out := &ecs.UpdateContainerInstancesStateOutput{}
	for _, arn := range in.ContainerInstances {
		ci, ok := f.instances[arn]
		if !ok {
			out.Failures = append(out.Failures, ecstypes.Failure{Arn: aws.String(arn), Reason: aws.String("MISSING")})
			continue
		}
		ci.Status = aws.String(string(in.Status))
		f.instances[arn] = ci
	}
	return out, nil
}

func (f *viewECS) ListTasks(_ context.Context, in *ecs.ListTasksInput, _ ...func(*ecs.Options)) (*ecs.ListTasksOutput, error) {
	f.calls["ListTasks"]++
	f.listedFor = append(f.listedFor, aws.ToString(in.ContainerInstance))
	if in.DesiredStatus == ecstypes.DesiredStatusStopped {
		return &ecs.ListTasksOutput{TaskArns: f.stopping[aws.ToString(in.ContainerInstance)]}, nil
	}
	return &ecs.ListTasksOutput{TaskArns: f.tasks[aws.ToString(in.ContainerInstance)]}, nil
}

func (f *viewECS) DescribeTasks(_ context.Context, in *ecs.DescribeTasksInput, _ ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error) {
	f.calls["DescribeTasks"]++
	out := &ecs.DescribeTasksOutput{}
	stopping := map[string]bool{}
	for _, arns := range f.stopping {
		for _, arn := range arns {
			stopping[arn] = true
		}
	}
	for _, arn := range in.Tasks {
		last := "RUNNING"
		if stopping[arn] {
			last = "STOPPING"
		}
		out.Tasks = append(out.Tasks, ecstypes.Task{TaskArn: aws.String(arn), LastStatus: aws.String(last), Group: aws.String("service:web")})
	}
	return out, nil
}

func (f *viewECS) DescribeServices(_ context.Context, in *ecs.DescribeServicesInput, _ ...func(*ecs.Options)) (*ecs.DescribeServicesOutput, error) {
	f.calls["DescribeServices"]++
	out := &ecs.DescribeServicesOutput{}
	for _, s := range in.Services {
		out.Services = append(out.Services, ecstypes.Service{ServiceName: aws.String(s), SchedulingStrategy: ecstypes.SchedulingStrategyReplica})
	}
	return out, nil
}

const (
	ciOld = "arn:aws:ecs:eu-west-1:123456789012:container-instance/c1/0000000000000000000000000000000a"
	ciNew = "arn:aws:ecs:eu-west-1:123456789012:container-instance/c1/0000000000000000000000000000000b"
)

// TestC8DrainOfATerminatingInstanceWithNoTaskCountedIsNotDrainedWhileATaskIsStopping: the old instance's
// container instance is DRAINING (its terminating lifecycle action's drain) with runningTasksCount +
// pendingTasksCount 0, but a task is STOPPING, counted in neither (field case C8). The drain check the
// terminating lifecycle action makes (ECSPlatform.DrainStatus) lists the tasks and finds the instance not
// drained; once the task is STOPPED it is drained.
func TestC8DrainOfATerminatingInstanceWithNoTaskCountedIsNotDrainedWhileATaskIsStopping(t *testing.T) {
	ctx := context.Background()
	api := newViewECS()
	api.register(ciOld, "i-1", "DRAINING")
	api.stopping[ciOld] = []string{"arn:task/stopping"}
	platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}
	nodes, err := platform.Observe(ctx, "c1")
	require.NoError(t, err)
	require.Zero(t, nodes["i-1"].Tasks, "C8: the counts are already zero")

	prog, err := platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained, "a task STOPPING: %s", prog.Detail)
	require.Equal(t, 1, prog.Remaining)
	require.Equal(t, []string{ciOld, ciOld}, api.listedFor, "the tasks are listed, desired status RUNNING and STOPPED")

	delete(api.stopping, ciOld)
	prog, err = platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.True(t, prog.Drained, prog.Detail)
}

// TestSecondDrainCheckOfAFinishedDrainListsNoTasksWhileTheContainerInstanceStaysDrainingAndEmpty: a look at
// a drain an earlier look found finished checks it with one DescribeContainerInstances, not the task listing again — but only while the
// container instance is still DRAINING with no task running or pending. One set ACTIVE in between, given a task
// and set DRAINING again, is checked in full and is not drained.
func TestSecondDrainCheckOfAFinishedDrainListsNoTasksWhileTheContainerInstanceStaysDrainingAndEmpty(t *testing.T) {
	ctx := context.Background()
	api := newViewECS()
	api.register(ciOld, "i-1", "DRAINING")
	platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}

	prog, err := platform.DrainStatus(ctx, "c1", "i-1") // the first check
	require.NoError(t, err)
	require.True(t, prog.Drained)
	require.Equal(t, 2, api.calls["ListTasks"])

	prog, err = platform.DrainStatus(ctx, "c1", "i-1") // the lifecycle action's check
	require.NoError(t, err)
	require.True(t, prog.Drained, prog.Detail)
	require.Equal(t, 2, api.calls["ListTasks"], "no second listing of the tasks")

	// Someone sets it ACTIVE, ECS places a task, and it is set DRAINING again: the counters show the task, more
	// than the daemon tasks of the last listing (none), so it is not drained, and that needs no listing.
	api.tasks[ciOld] = []string{"arn:task/late"}
	prog, err = platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained, "a task RUNNING again: %s", prog.Detail)
	require.Contains(t, prog.Detail, "ECS's task counts")
	require.Equal(t, 2, api.calls["ListTasks"], "not drained by the counters alone")

	// The late task stops: STOPPING, counted in neither counter (C8). The drain is not finished.
	delete(api.tasks, ciOld)
	api.stopping[ciOld] = []string{"arn:task/late"}
	prog, err = platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained, "a task STOPPING (C8): %s", prog.Detail)
	delete(api.stopping, ciOld)

	// The agent's own undrain forgets the finished drain too.
	delete(api.tasks, ciOld)
	_, err = platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.NoError(t, platform.Undrain(ctx, "c1", "i-1"))
	api.register(ciOld, "i-1", "DRAINING")
	listed := api.calls["ListTasks"]
	_, err = platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.Equal(t, listed+2, api.calls["ListTasks"], "after an undrain the drain is checked in full")
}

// TestLookDescribesTheKnownContainerInstancesWithoutListingUnlessTheMembershipMayHaveChanged: once a listing
// showed every instance's container instance, a look describes those ARNs with one DescribeContainerInstances
// and no ListContainerInstances — unless one may have changed: an instance never seen registered (it may have
// joined), a container instance INACTIVE (deregistered: the instance may have registered again under a new
// ARN), one whose agent is disconnected (an agent that registered afresh leaves it behind), or one ECS no
// longer knows (MISSING). Then it lists, and the view shows the instance's current container instance.
func TestLookDescribesTheKnownContainerInstancesWithoutListingUnlessTheMembershipMayHaveChanged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		change   func(api *viewECS)
		ids      []string
		wantList bool
		wantARN  string // of i-1 in the view
	}{
		{name: "nothing changed: no listing", change: func(*viewECS) {}, wantARN: ciOld},
		{name: "status changed to DRAINING: still no listing", change: func(api *viewECS) {
			ci := api.instances[ciOld]
			ci.Status = aws.String("DRAINING")
			api.instances[ciOld] = ci
		}, wantARN: ciOld},
		{name: "an instance never seen registered: listed", change: func(api *viewECS) { api.register("arn:ci/i-3", "i-3", "ACTIVE") },
			ids: []string{"i-1", "i-2", "i-9", "i-3"}, wantList: true, wantARN: ciOld},
		{name: "deregistered and registered again under a new ARN: listed", change: func(api *viewECS) {
			api.register(ciOld, "i-1", "INACTIVE")
			api.register(ciNew, "i-1", "ACTIVE")
		}, wantList: true, wantARN: ciNew},
		{name: "agent registered afresh, the old one left disconnected: listed", change: func(api *viewECS) {
			ci := api.instances[ciOld]
			ci.AgentConnected = false
			api.instances[ciOld] = ci
			api.register(ciNew, "i-1", "ACTIVE")
		}, wantList: true, wantARN: ciNew},
		{name: "MISSING: listed", change: func(api *viewECS) {
			delete(api.instances, ciOld)
			api.register(ciNew, "i-1", "ACTIVE")
		}, wantList: true, wantARN: ciNew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newViewECS()
			api.register(ciOld, "i-1", "ACTIVE")
			api.register("arn:ci/i-2", "i-2", "ACTIVE")
			api.register("arn:ci/i-9", "i-9", "ACTIVE")
			platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}
			_, err := platform.Observe(context.Background(), "c1") // the last listing
			require.NoError(t, err)
			tc.change(api)
			ids := tc.ids
			if ids == nil {
				ids = []string{"i-1", "i-2", "i-9"}
			}
			lists, describes := api.calls["ListContainerInstances"], api.calls["DescribeContainerInstances"]

			nodes, err := platform.ObserveKnown(context.Background(), "c1", ids)
			require.NoError(t, err)
			require.Equal(t, tc.wantARN, nodes["i-1"].Name)
			if !tc.wantList {
				require.Equal(t, lists, api.calls["ListContainerInstances"], "no ListContainerInstances")
				require.Equal(t, describes+1, api.calls["DescribeContainerInstances"], "one describe of the known ARNs")
				require.Equal(t, aws.ToString(api.instances[ciOld].Status), nodes["i-1"].Status, "the status as described now")
				return
			}
			require.Equal(t, lists+1, api.calls["ListContainerInstances"], "the cluster is listed")
		})
	}
}

// oldARNLeftBehind are the two ways ECS leaves ciOld behind when the EC2 instance i-1 registers again under a
// new ARN: deregistered (INACTIVE, still described for a while), or left in its status with its ECS container
// agent disconnected (Amazon ECS Developer Guide, "Amazon ECS container instance lifecycle").
var oldARNLeftBehind = []struct {
	name  string
	leave func(api *viewECS)
}{
	{name: "old ARN deregistered (INACTIVE)", leave: func(api *viewECS) { api.register(ciOld, "i-1", "INACTIVE") }},
	{name: "old ARN left with its agent disconnected", leave: func(api *viewECS) {
		ci := api.instances[ciOld]
		ci.AgentConnected = false
		api.instances[ciOld] = ci
	}},
}

// TestDrainCheckOfAReRegisteredContainerInstanceSeenByALookWithoutAListingCountsTheNewOnesTasks (mutant 38):
// the last listing showed the old instance i-1 DRAINING on its container instance ARN; since, its ECS container
// agent registered it again under a new ARN, which runs a task — the old ARN deregistered (INACTIVE), or left
// registered with its agent disconnected. The next look, which describes the known ARNs instead of listing,
// must not take the old ARN's empty task list for the drain's end: it lists the cluster, its view shows the new
// container instance, and the drain check of the terminating lifecycle action counts its task.
func TestDrainCheckOfAReRegisteredContainerInstanceSeenByALookWithoutAListingCountsTheNewOnesTasks(t *testing.T) {
	for _, tc := range oldARNLeftBehind {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			api := newViewECS()
			api.register(ciOld, "i-1", "DRAINING")
			api.register("arn:ci/i-2", "i-2", "ACTIVE")
			api.register("arn:ci/i-9", "i-9", "ACTIVE")
			platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}
			_, err := platform.Observe(ctx, "c1") // the last listing: i-1 on ciOld
			require.NoError(t, err)
			tc.leave(api)
			api.register(ciNew, "i-1", "DRAINING")
			api.tasks[ciNew] = []string{"arn:task/1"}

			nodes, err := platform.ObserveKnown(ctx, "c1", []string{"i-1", "i-2", "i-9"})
			require.NoError(t, err)
			require.Equal(t, ciNew, nodes["i-1"].Name, "the view shows the instance's current container instance")
			prog, err := platform.DrainStatus(ctx, "c1", "i-1")
			require.NoError(t, err)
			require.False(t, prog.Drained, "a task RUNNING on the instance's current container instance: %s", prog.Detail)
			require.NotContains(t, api.listedFor, ciOld, "the old ARN's tasks are not the instance's")
		})
	}
}

// TestTheLookThatStartsADrainDescribesTheContainerInstanceOnce: a terminating lifecycle action's first look
// describes the container instance (DrainStatus) and starts its drain on what it found (StartDrainFound): one
// DescribeContainerInstances, not one before UpdateContainerInstancesState and one after. A drain just started
// with tasks counted is under way and its tasks are listed from the next look; an instance with none counted
// is listed at once, so an empty one is drained in the same look and one whose tasks are stopping is not (C8).
// A container instance deregistered since the look (MISSING) is found afresh: the instance's new container
// instance is set DRAINING, and its task keeps the drain unfinished.
func TestTheLookThatStartsADrainDescribesTheContainerInstanceOnce(t *testing.T) {
	for _, tc := range []struct {
		name         string
		tasks        []string
		stopping     []string
		reRegistered bool // deregistered between the look and the start; registered again as ciNew with a task
		wantDrained  bool
		wantDescribe int
		wantLists    int
	}{
		{name: "tasks counted: under way, listed from the next look", tasks: []string{"arn:task/a", "arn:task/b"}, wantDescribe: 1},
		{name: "no task: drained in the same look", wantDrained: true, wantDescribe: 1, wantLists: 2},
		{name: "a task stopping, none counted (C8): listed, not drained", stopping: []string{"arn:task/s"}, wantDescribe: 1, wantLists: 2},
		{name: "deregistered since the look: found afresh", reRegistered: true, wantDescribe: 4, wantLists: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			api := newViewECS()
			api.register(ciOld, "i-1", "ACTIVE")
			api.tasks[ciOld], api.stopping[ciOld] = tc.tasks, tc.stopping
			platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}

			look, err := platform.DrainStatus(ctx, "c1", "i-1")
			require.NoError(t, err)
			require.False(t, look.Started, look.Detail)
			require.Equal(t, ciOld, look.Node.Name, "the look names the container instance it described")
			require.Equal(t, int32(len(tc.tasks)), look.Node.Tasks)
			if tc.reRegistered {
				delete(api.instances, ciOld)
				api.register(ciNew, "i-1", "ACTIVE")
				api.tasks[ciNew] = []string{"arn:task/new"}
			}

			prog, err := platform.StartDrainFound(ctx, "c1", "i-1", look.Node)
			require.NoError(t, err)
			require.Equal(t, tc.wantDrained, prog.Drained, prog.Detail)
			require.True(t, prog.Started, prog.Detail)
			require.Equal(t, tc.wantDescribe, api.calls["DescribeContainerInstances"])
			require.Equal(t, tc.wantLists, api.calls["ListTasks"])
			arn := ciOld
			if tc.reRegistered {
				arn = ciNew
			}
			require.Equal(t, "DRAINING", aws.ToString(api.instances[arn].Status))
			if tc.wantDrained {
				return
			}
			next, err := platform.DrainStatus(ctx, "c1", "i-1")
			require.NoError(t, err)
			require.False(t, next.Drained, "the next look lists the tasks: %s", next.Detail)
		})
	}
}

// TestDrainStartedOnAContainerInstanceFoundDrainedBeforeItWentBackInServiceIsCheckedInFull: this process found
// the container instance drained once (an earlier drain), then someone else — another replica's undrain, an
// operator — set it ACTIVE and ECS placed a task on it. A terminating action's look finds it ACTIVE with the
// task counted and sets it DRAINING (StartDrainFound, the listing left to the next look). By the next look the
// task is STOPPING, counted in neither counter (C8): the drain is not finished, whatever the earlier check
// found.
func TestDrainStartedOnAContainerInstanceFoundDrainedBeforeItWentBackInServiceIsCheckedInFull(t *testing.T) {
	ctx := context.Background()
	api := newViewECS()
	api.register(ciOld, "i-1", "DRAINING")
	platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}
	prog, err := platform.DrainStatus(ctx, "c1", "i-1") // an earlier drain, found finished
	require.NoError(t, err)
	require.True(t, prog.Drained, prog.Detail)

	api.register(ciOld, "i-1", "ACTIVE") // set ACTIVE by someone else (not this Drainer's Undrain)
	api.tasks[ciOld] = []string{"arn:task/late"}

	look, err := platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.False(t, look.Started, look.Detail)
	prog, err = platform.StartDrainFound(ctx, "c1", "i-1", look.Node)
	require.NoError(t, err)
	require.False(t, prog.Drained, prog.Detail)

	delete(api.tasks, ciOld) // ECS stops the task: STOPPING, counted in neither counter (C8)
	api.stopping[ciOld] = []string{"arn:task/late"}
	prog, err = platform.DrainStatus(ctx, "c1", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained, "a task STOPPING (C8): %s", prog.Detail)
}

// TestDrainOfAnInstanceRegisteredAgainUnderANewARNSinceTheLastListingDrainsTheNewContainerInstance: the last
// listing showed i-1 on ciOld; since, its ECS container agent registered it again as ciNew, which runs a task,
// and ciOld is deregistered (INACTIVE, still described) or left behind with its agent disconnected. No look
// of the cluster lists it in between (a scale-in of a group that is not rolling). The terminating action's look
// (DrainStatus, StartDrainFound, then the next DrainStatus) must drain ciNew and count its task, not take the
// old ARN's empty task list for the drain's end.
func TestDrainOfAnInstanceRegisteredAgainUnderANewARNSinceTheLastListingDrainsTheNewContainerInstance(t *testing.T) {
	for _, tc := range oldARNLeftBehind {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			api := newViewECS()
			api.register(ciOld, "i-1", "ACTIVE")
			platform := providers.ECSPlatform{Drainer: ecsdrain.New(api)}
			_, err := platform.Observe(ctx, "c1") // the last listing: i-1 on ciOld
			require.NoError(t, err)
			tc.leave(api)
			api.register(ciNew, "i-1", "ACTIVE")
			api.tasks[ciNew] = []string{"arn:task/1"}

			look, err := platform.DrainStatus(ctx, "c1", "i-1")
			require.NoError(t, err)
			if !look.Drained && !look.Started && look.Node.Registered {
				look, err = platform.StartDrainFound(ctx, "c1", "i-1", look.Node)
				require.NoError(t, err)
			}
			require.False(t, look.Drained, "a task RUNNING on the instance's current container instance: %s", look.Detail)
			require.Equal(t, "DRAINING", aws.ToString(api.instances[ciNew].Status), "the instance's current container instance is drained")
			next, err := platform.DrainStatus(ctx, "c1", "i-1")
			require.NoError(t, err)
			require.False(t, next.Drained, "a task RUNNING on the instance's current container instance: %s", next.Detail)
		})
	}
}
