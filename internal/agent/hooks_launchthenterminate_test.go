package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// A launching action whose instance is terminated before the agent saw it healthy (a person's
// TerminateInstanceInAutoScalingGroup while it waits in Pending:Wait, registered in its cluster): its launching
// action ends, the instance waits on the terminating hook, and the agent drains it and continues it. The
// launching action's record is still open: its next look must not take the DRAINING instance for one the agent
// drained that returns from the warm pool and set it ACTIVE again — the instance is in Terminating:Proceed, and
// ECS would place tasks on it that its termination then kills. It is set DRAINING once and never ACTIVE again.
func TestLaunchingActionOfAnInstanceTerminatedMidLaunchNeverUndrainsIt(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 2, HeartbeatTimeout: 300 * time.Second}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 30 * time.Second
	w := build(t, spec)
	settle(t, w, 30*time.Second)
	before := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		before[i.ID] = true
	}
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
	w.Checker.Baseline[g.Name] = 2
	var fresh string
	for range 300 { // the agent holds the launching action until the instance is healthy in its cluster
		for _, i := range w.Account.Group(g.Name).Instances {
			if !before[i.ID] && i.LifecycleState == "Pending:Wait" && i.ContainerInstanceStatus == "ACTIVE" {
				fresh = i.ID // registered: the agent has not looked since
			}
		}
		if fresh != "" {
			break
		}
		require.NoError(t, w.Agent.RunOnce(ctx))
		w.Account.Advance(time.Second)
	}
	require.NotEmpty(t, fresh, "the new instance registered while its launching action waits")
	_, err := w.Account.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(fresh), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	w.Account.ResetCalls()
	active := 0
	for range 120 {
		require.NoError(t, w.Agent.RunOnce(ctx))
		w.Account.Advance(5 * time.Second)
		for _, i := range w.Account.Group(g.Name).Instances {
			if i.ID == fresh && i.LifecycleState == "Terminating:Wait" && i.ContainerInstanceStatus == "ACTIVE" &&
				w.Account.Calls()["ecs:UpdateContainerInstancesState"] > 1 {
				active++
			}
		}
	}
	require.Equal(t, 1, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "set DRAINING once, never back to ACTIVE")
	require.Zero(t, active)
	cs := completionsOf(w, fresh)
	require.NotEmpty(t, cs)
	require.True(t, cs[len(cs)-1].Drained, "continued once drained")
}
