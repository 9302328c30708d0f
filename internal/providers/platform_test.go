package providers_test

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// drainingECS is one DRAINING container instance (i-1) whose task counters and tasks the test sets; it counts
// the task listings.
type drainingECS struct {
	running int32
	tasks   []types.Task
	lists   int
}

const drainingARN = "arn:aws:ecs:us-east-1:111122223333:container-instance/c/1"

func (f *drainingECS) ListContainerInstances(context.Context, *ecs.ListContainerInstancesInput, ...func(*ecs.Options)) (*ecs.ListContainerInstancesOutput, error) {
	return &ecs.ListContainerInstancesOutput{ContainerInstanceArns: []string{drainingARN}}, nil
}

func (f *drainingECS) DescribeContainerInstances(context.Context, *ecs.DescribeContainerInstancesInput, ...func(*ecs.Options)) (*ecs.DescribeContainerInstancesOutput, error) {
	return &ecs.DescribeContainerInstancesOutput{ContainerInstances: []types.ContainerInstance{{
		ContainerInstanceArn: aws.String(drainingARN), Ec2InstanceId: aws.String("i-1"),
		Status: aws.String(ecsdrain.StatusDraining), AgentConnected: true, RunningTasksCount: f.running,
	}}}, nil
}

func (f *drainingECS) UpdateContainerInstancesState(context.Context, *ecs.UpdateContainerInstancesStateInput, ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	return &ecs.UpdateContainerInstancesStateOutput{}, nil
}

func (f *drainingECS) ListTasks(_ context.Context, in *ecs.ListTasksInput, _ ...func(*ecs.Options)) (*ecs.ListTasksOutput, error) {
	f.lists++
	var arns []string
	for _, t := range f.tasks {
		if aws.ToString(t.DesiredStatus) == string(in.DesiredStatus) {
			arns = append(arns, aws.ToString(t.TaskArn))
		}
	}
	return &ecs.ListTasksOutput{TaskArns: arns}, nil
}

func (f *drainingECS) DescribeTasks(_ context.Context, in *ecs.DescribeTasksInput, _ ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error) {
	var out []types.Task
	for _, t := range f.tasks {
		for _, arn := range in.Tasks {
			if arn == aws.ToString(t.TaskArn) {
				out = append(out, t)
			}
		}
	}
	return &ecs.DescribeTasksOutput{Tasks: out}, nil
}

func (f *drainingECS) DescribeServices(_ context.Context, in *ecs.DescribeServicesInput, _ ...func(*ecs.Options)) (*ecs.DescribeServicesOutput, error) {
	var out []types.Service
	for _, s := range in.Services {
		out = append(out, types.Service{ServiceName: aws.String(s), SchedulingStrategy: types.SchedulingStrategyReplica})
	}
	return &ecs.DescribeServicesOutput{Services: out}, nil
}

func (f *drainingECS) setTasks(desired, last string) {
	f.tasks = nil
	for _, arn := range []string{"t1", "t2"} {
		f.tasks = append(f.tasks, types.Task{TaskArn: aws.String(arn), DesiredStatus: aws.String(desired),
			LastStatus: aws.String(last), Group: aws.String("service:web")})
	}
}

// A drain check of a DRAINING container instance whose task counters still count more tasks than the daemon
// tasks its last listing found reports it not drained without listing its tasks again; once the counters drop
// to the daemon tasks' count, the tasks are listed in full, since tasks that are stopping count in neither
// counter (field case C8), and only the listing says drained.
func TestECSDrainStatusListsNoTasksWhileTheCountersShowATaskThatBlocksTheDrain(t *testing.T) {
	ctx := context.Background()
	f := &drainingECS{running: 2}
	f.setTasks("RUNNING", "RUNNING")
	p := providers.ECSPlatform{Drainer: ecsdrain.New(f)}

	prog, err := p.DrainStatus(ctx, "c", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained)
	require.Equal(t, 2, prog.Remaining)
	require.Equal(t, 2, f.lists, "the first check lists the tasks (desired RUNNING and STOPPED)")

	prog, err = p.DrainStatus(ctx, "c", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained)
	require.True(t, prog.Started)
	require.Equal(t, 2, prog.Remaining)
	require.Equal(t, 2, f.lists, "2 tasks counted, no daemon task listed: not drained, no second listing")

	f.running = 0
	f.setTasks("STOPPED", "STOPPING")
	prog, err = p.DrainStatus(ctx, "c", "i-1")
	require.NoError(t, err)
	require.False(t, prog.Drained, "C8: stopping tasks count in neither counter")
	require.Equal(t, 4, f.lists, "no task counted: listed in full")

	f.setTasks("STOPPED", "STOPPED")
	prog, err = p.DrainStatus(ctx, "c", "i-1")
	require.NoError(t, err)
	require.True(t, prog.Drained)
}
