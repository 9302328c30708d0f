package ecsdrain_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// roomWorld is a cluster of 3 instances with room for 2 tasks each (sim.Options.MaxTasksPerInstance), running a
// service of the given task count.
func roomWorld(t *testing.T, tasks int) (*sim.Account, []sim.InstanceView) {
	t.Helper()
	a := sim.New(testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)), sim.Options{MaxTasksPerInstance: 2})
	lt := a.CreateLaunchTemplate("g-lt", "ami-old", "m6i.large")
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "g", Min: 3, Max: 3, Desired: 3, LaunchTemplateID: lt, ECSCluster: "prod"}))
	a.Advance(5 * time.Minute)
	a.CreateService("prod", "web", tasks, false)
	a.CreateService("prod", "log-router", 0, true)
	a.Advance(time.Minute)
	return a, a.Group("g").Instances
}

// TestRoomFitsTasksByCPUAndMemoryAndNamesOtherDrains: the rest of the cluster's remainingResources decide whether
// an instance's service tasks fit elsewhere (daemon tasks never move), and another DRAINING container instance is
// named (one drain per cluster).
func TestRoomFitsTasksByCPUAndMemoryAndNamesOtherDrains(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name           string
		tasks          int
		drainOther     bool
		wantTasks      int
		wantUnplaced   int
		wantOtherDrain int
	}{
		{name: "room to spare", tasks: 3, wantTasks: 1},
		{name: "full cluster", tasks: 6, wantTasks: 2, wantUnplaced: 2},
		{name: "another instance draining", tasks: 2, drainOther: true, wantTasks: 1, wantOtherDrain: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, insts := roomWorld(t, tc.tasks)
			if tc.drainOther {
				_, err := a.ECS().UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("prod"),
					ContainerInstances: []string{insts[2].ContainerInstanceARN}, Status: ecstypes.ContainerInstanceStatusDraining})
				require.NoError(t, err)
			}
			room, err := ecsdrain.New(a.ECS()).Room(ctx, "prod", insts[0].ID)
			require.NoError(t, err)
			require.Equal(t, tc.wantTasks, room.Tasks, "service tasks to move (the daemon task stays)")
			require.Equal(t, tc.wantUnplaced, room.Unplaced)
			require.Equal(t, tc.wantUnplaced == 0, room.Fits())
			require.Len(t, room.OtherDraining, tc.wantOtherDrain)
			require.Zero(t, room.Standalone)
		})
	}
}

func TestRoomOfAnUnregisteredInstanceIsErrNotRegistered(t *testing.T) {
	a, _ := roomWorld(t, 1)
	_, err := ecsdrain.New(a.ECS()).Room(context.Background(), "prod", "i-0000000000000dead")
	require.ErrorIs(t, err, ecsdrain.ErrNotRegistered)
}

// TestRoomCountsAStaticHostPortOrDistinctInstanceTaskOnlyWhereECSCouldPlaceIt: a task whose
// container holds a static host port fits only on an instance where that port is free (remainingResources
// PORTS), and a distinctInstance task only on an instance without a task of its service — however much CPU
// and memory the others have left.
func TestRoomCountsAStaticHostPortOrDistinctInstanceTaskOnlyWhereECSCouldPlaceIt(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		tasks        int
		deployment   sim.ServiceDeployment
		wantUnplaced int
	}{
		{name: "no constraint: CPU and memory decide", tasks: 3, wantUnplaced: 0},
		{name: "static host port held on every other instance", tasks: 3, deployment: sim.ServiceDeployment{MaximumPercent: 100, StaticHostPort: true}, wantUnplaced: 1},
		{name: "static host port free on one other instance", tasks: 2, deployment: sim.ServiceDeployment{MaximumPercent: 100, StaticHostPort: true}, wantUnplaced: 0},
		{name: "distinctInstance: every other instance holds a task of the service", tasks: 3, deployment: sim.ServiceDeployment{DistinctInstance: true}, wantUnplaced: 1},
		{name: "distinctInstance: one other instance without one", tasks: 2, deployment: sim.ServiceDeployment{DistinctInstance: true}, wantUnplaced: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := sim.New(testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)), sim.Options{MaxTasksPerInstance: 4})
			lt := a.CreateLaunchTemplate("g-lt", "ami-old", "m6i.large")
			require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "g", Min: 3, Max: 3, Desired: 3, LaunchTemplateID: lt, ECSCluster: "prod"}))
			a.Advance(5 * time.Minute)
			a.CreateService("prod", "web", tc.tasks, false) // spread: one task per instance
			a.SetServiceDeployment("prod", "web", tc.deployment)
			a.Advance(time.Minute)
			var busy string
			for _, i := range a.Group("g").Instances {
				if i.TasksByLastStatus["RUNNING"] > 0 {
					busy = i.ID
				}
			}
			require.NotEmpty(t, busy)
			room, err := ecsdrain.New(a.ECS()).Room(ctx, "prod", busy)
			require.NoError(t, err)
			require.Equal(t, 1, room.Tasks)
			require.Equal(t, tc.wantUnplaced, room.Unplaced)
		})
	}
}
