package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"
)

// draining counts the group's InService instances whose container instance is DRAINING.
func draining(g GroupView) int {
	n := 0
	for _, i := range g.Instances {
		if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "DRAINING" {
			n++
		}
	}
	return n
}

func TestOnChangeSeesAChangeUndoneBeforeAnyoneLooksBetweenCalls(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 2, Max: 3, Desired: 2, ECSCluster: "prod"})
	a.CreateService("prod", "web", 4, false)
	var seen []int
	a.OnChange(func(v *View) { seen = append(seen, draining(v.Group("g"))) })

	arn := a.Group("g").Instances[0].ContainerInstanceARN
	setDraining(t, a, "prod", arn, ecstypes.ContainerInstanceStatusDraining)
	setDraining(t, a, "prod", arn, ecstypes.ContainerInstanceStatusActive)
	require.Equal(t, []int{1, 0}, seen, "one change per call, each seen")
	require.Zero(t, draining(a.Group("g")), "a look afterwards sees nothing")

	seen = nil
	_, err := a.AutoScaling().DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err)
	a.Group("g")
	require.Empty(t, seen, "reads change nothing and call no watcher")
}

func TestOnChangeSeesTimedEventsAndTheViewReadsTheAccount(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1, ECSCluster: "prod",
		Hooks: []HookSpec{{Name: "drain", Transition: TransitionTerminating, HeartbeatTimeout: 300 * time.Second, QueueURL: "q"}}})
	a.CreateService("prod", "web", 2, false)
	var states, clusters []string
	var last []LifecycleAction
	tasks := -1
	a.OnChange(func(v *View) {
		g := v.Group("g")
		states = append(states, g.Instances[len(g.Instances)-1].LifecycleState)
		clusters = append(clusters, g.Cluster)
		last = v.LifecycleActions()
		if tasks < 0 {
			tasks = v.ServiceTasks("prod", "web")
		}
	})
	require.NoError(t, a.SetDesiredCapacity("g", 2))
	require.Equal(t, []string{"Pending"}, states, "the desired change and its launch")
	require.Equal(t, []string{"prod"}, clusters)
	require.Equal(t, 2, tasks)
	a.Advance(a.Options().BootDelay)
	require.Equal(t, "InService", states[len(states)-1], "the end of the boot is a change")

	victim := a.Group("g").Instances[0].ID
	_, err := a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(context.Background(), &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(victim), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	require.Len(t, last, 1)
	require.Equal(t, LifecycleAction{Token: last[0].Token, InstanceID: victim, Group: "g", Hook: "drain", Transition: TransitionTerminating,
		Target: "q", Started: a.Clock().Now(), Active: true, GlobalDeadline: a.Clock().Now().Add(100 * 300 * time.Second)}, last[0])
	a.Advance(300 * time.Second)
	require.False(t, last[0].Active)
	require.True(t, last[0].TimedOut, "ended by its heartbeat timeout")
	require.Equal(t, ResultContinue, last[0].Result, "the hook's default result")
	term := a.Terminations()[0]
	require.True(t, term.Proceeded)
	require.Equal(t, term.RequestedAt.Add(300*time.Second), term.ProceededAt)
}

// An instance set back to ACTIVE while replacements for its tasks were starting leaves the service with extra
// tasks; the scheduler must stop those, never the replacements of tasks on an instance still DRAINING (it would
// start them again, without end).
func TestReactivatingOneInstanceWhileAnotherDrainsKeepsTheDrainGoing(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 3, Max: 4, Desired: 3, ECSCluster: "prod"})
	a.CreateService("prod", "web", 6, false)
	require.NoError(t, a.SetDesiredCapacity("g", 4)) // a scale out: one more instance, empty
	a.Advance(2 * time.Minute)
	g := a.Group("g")
	drained, dipped := g.Instances[0], g.Instances[1]
	setDraining(t, a, "prod", drained.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	setDraining(t, a, "prod", dipped.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	setDraining(t, a, "prod", dipped.ContainerInstanceARN, ecstypes.ContainerInstanceStatusActive)
	a.Advance(time.Minute)

	require.Equal(t, 6, a.ServiceTasks("prod", "web"))
	i, _ := a.Instance(drained.ID)
	require.Equal(t, map[string]int{"STOPPED": 2}, i.TasksByLastStatus, "the DRAINING instance drained")
	total := 0
	for _, inst := range a.Group("g").Instances {
		for _, n := range inst.TasksByLastStatus {
			total += n
		}
	}
	require.LessOrEqual(t, total, 12, "running tasks, the drained ones and a few leftover replacements stopped: no churn")
}
