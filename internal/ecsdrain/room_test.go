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
