package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"
)

// twoPerInstance is an account where a container instance holds two non-daemon tasks.
func twoPerInstance() *Account {
	return New(testingclock.NewFakeClock(start), Options{MaxTasksPerInstance: 2})
}

// managedGroup is a capacity-provider group with managed scaling and managed termination protection.
func managedGroup(name string, minSize, maxSize, desired int32) GroupSpec {
	return GroupSpec{Name: name, Min: minSize, Max: maxSize, Desired: desired, ECSCluster: "prod", NewInstancesProtectedFromScaleIn: true,
		CapacityProvider: &CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true}}
}

func protection(g GroupView) map[string]bool {
	out := map[string]bool{}
	for _, i := range g.Instances {
		out[i.ID] = i.ProtectedFromScaleIn
	}
	return out
}

func TestCapacityProviderScalesOutForTasksThatDoNotFit(t *testing.T) {
	a := twoPerInstance()
	newGroup(t, a, managedGroup("g", 1, 6, 3))
	a.CreateService("prod", "web", 8, false)
	require.Equal(t, 6, a.ServiceTasks("prod", "web"))
	require.Equal(t, 8, a.ServiceDesired("prod", "web"))
	require.Equal(t, 2, a.ProvisioningTasks("prod"), "two tasks find no room")

	a.Advance(59 * time.Second)
	require.Equal(t, int32(3), a.Group("g").Desired)
	require.Empty(t, a.DesiredChanges("g"))

	a.Advance(time.Second)
	require.Equal(t, []DesiredChange{{At: start.Add(time.Minute), From: 3, To: 4, By: CallerECS}}, a.DesiredChanges("g"))
	r, ok := a.CapacityProviderReservation("g")
	require.True(t, ok)
	require.InDelta(t, 400.0/3, r, 0.01, "M = 3 busy + 1 needed, N = 3")

	// Launched at 1m: boots at 2m30s, registers at 2m50s, its tasks run at 3m.
	a.Advance(2 * time.Minute)
	require.Equal(t, 8, a.ServiceTasks("prod", "web"), "the waiting tasks went to the new instance")
	require.Zero(t, a.ProvisioningTasks("prod"))
	require.Len(t, a.DesiredChanges("g"), 1, "no second instance while the first was on its way")

	a.Advance(30 * time.Minute)
	g := a.Group("g")
	require.Equal(t, int32(4), g.Desired)
	require.Len(t, g.Instances, 4)
	require.Len(t, a.DesiredChanges("g"), 1, "at 100% ECS leaves the group alone")
	r, _ = a.CapacityProviderReservation("g")
	require.InDelta(t, 100, r, 0.01)

	desc := describeGroup(t, a, "g")
	tags := map[string]string{}
	for _, tag := range desc.Tags {
		tags[aws.ToString(tag.Key)] = aws.ToString(tag.Value)
	}
	require.Equal(t, "true", tags[ECSManagedTagKey])
	require.Equal(t, "cp", aws.ToString(describeCI(t, a, "prod", g.Instances[3].ContainerInstanceARN).CapacityProviderName))
}

// The idle instance keeps the protection it launched with until ECS scales in (ECS does not clear it on every
// idle instance every minute); at the 15th datapoint below target ECS clears it and lowers
// desired capacity, and Auto Scaling terminates that instance.
func TestCapacityProviderClearsProtectionWhenItScalesInAfter15Minutes(t *testing.T) {
	a := newAccount(t)
	newGroup(t, a, managedGroup("g", 1, 5, 3))
	a.CreateService("prod", "web", 2, false) // one task on each of the first two instances (spread over AZs)
	a.CreateService("prod", "logs", 0, true) // daemon tasks everywhere; they do not count
	insts := a.Group("g").Instances
	idle := insts[2]
	require.Equal(t, map[string]int{"RUNNING": 1}, idle.TasksByLastStatus, "only the daemon task")
	require.Equal(t, map[string]bool{insts[0].ID: true, insts[1].ID: true, idle.ID: true}, protection(a.Group("g")), "protected at launch")

	a.Advance(time.Minute)
	r, _ := a.CapacityProviderReservation("g")
	require.InDelta(t, 200.0/3, r, 0.01)

	a.Advance(13 * time.Minute) // 14 datapoints below target
	require.Equal(t, map[string]bool{insts[0].ID: true, insts[1].ID: true, idle.ID: true}, protection(a.Group("g")),
		"the idle instance keeps its protection until ECS scales in")
	require.Equal(t, int32(3), a.Group("g").Desired)
	require.Empty(t, a.DesiredChanges("g"))
	require.Empty(t, a.Terminations())

	a.Advance(time.Minute) // the 15th
	require.Equal(t, []DesiredChange{{At: start.Add(15 * time.Minute), From: 3, To: 2, By: CallerECS}}, a.DesiredChanges("g"))
	terms := a.Terminations()
	require.Len(t, terms, 1)
	require.Equal(t, idle.ID, terms[0].InstanceID, "scale-in takes the unprotected instance")
	require.Equal(t, CauseScaleIn, terms[0].Cause)

	a.Advance(30 * time.Minute)
	g := a.Group("g")
	require.Len(t, g.Instances, 2)
	require.Equal(t, int32(2), g.Desired)
	require.Len(t, a.DesiredChanges("g"), 1, "M = N: no further scale-in")
	require.Equal(t, 2, a.ServiceTasks("prod", "web"))
}

func TestCapacityProviderScalesOutForADrainWhenTheOthersAreFull(t *testing.T) {
	a := twoPerInstance()
	newGroup(t, a, managedGroup("g", 1, 5, 3))
	a.CreateService("prod", "web", 6, false)
	a.Advance(time.Minute)
	require.Empty(t, a.DesiredChanges("g"), "full and at target")

	victim := a.Group("g").Instances[0]
	setDraining(t, a, "prod", victim.ContainerInstanceARN, ecstypes.ContainerInstanceStatusDraining)
	require.Equal(t, 2, a.ProvisioningTasks("prod"), "the replacements wait for room")
	v, _ := a.Instance(victim.ID)
	require.Equal(t, map[string]int{"RUNNING": 2}, v.TasksByLastStatus, "the old tasks keep running meanwhile")
	require.True(t, v.ProtectedFromScaleIn)

	a.Advance(time.Minute)
	require.Equal(t, []DesiredChange{{At: start.Add(2 * time.Minute), From: 3, To: 4, By: CallerECS}}, a.DesiredChanges("g"),
		"M = 3 busy (the DRAINING one included) + 1 needed = 4")

	// Launched at 2m: registers at 3m50s, replacements run at 4m, the old tasks are STOPPED at 4m30s.
	for i := 0; i < 3; i++ {
		a.Advance(time.Minute)
		require.Equal(t, 6, a.ServiceTasks("prod", "web"), "the service never lost a running task")
	}
	v, _ = a.Instance(victim.ID)
	require.Equal(t, map[string]int{"STOPPED": 2}, v.TasksByLastStatus, "the drain finished")
	require.True(t, v.ProtectedFromScaleIn, "the drained instance keeps its protection until ECS scales it in")
	require.Zero(t, a.ProvisioningTasks("prod"))
	require.Len(t, a.DesiredChanges("g"), 1)

	// The DRAINING instance counts in M while its tasks run (until 4m30s): M = 4 at 3m and 4m. M = 3, N = 4
	// from 5m: the 15th datapoint below target is at 19m, when the drained instance goes.
	a.Advance(13*time.Minute + 59*time.Second)
	require.Len(t, a.DesiredChanges("g"), 1)
	a.Advance(time.Second)
	require.Equal(t, DesiredChange{At: start.Add(19 * time.Minute), From: 4, To: 3, By: CallerECS}, a.DesiredChanges("g")[1])
	terms := a.Terminations()
	require.Len(t, terms, 1)
	require.Equal(t, victim.ID, terms[0].InstanceID)
	require.True(t, terms[0].DrainedAtRequest)
	require.Equal(t, 6, a.ServiceTasks("prod", "web"))
}

func TestCapacityProviderNeverScalesAboveMax(t *testing.T) {
	a := twoPerInstance()
	newGroup(t, a, managedGroup("g", 0, 4, 2))
	a.CreateService("prod", "web", 20, false)
	require.Equal(t, 16, a.ProvisioningTasks("prod"))

	for i := 0; i < 30; i++ {
		a.Advance(time.Minute)
		g := a.Group("g")
		require.LessOrEqual(t, g.Desired, int32(4))
		require.LessOrEqual(t, len(g.Instances), 4)
	}
	require.Equal(t, []DesiredChange{{At: start.Add(time.Minute), From: 2, To: 3, By: CallerECS}, {At: start.Add(2 * time.Minute), From: 3, To: 4, By: CallerECS}},
		a.DesiredChanges("g"), "M = 2 + 8 would be 10: a 3-AZ group adds minimumScalingStepSize (1) a minute, up to max")
	require.Equal(t, 8, a.ServiceTasks("prod", "web"))
	require.Equal(t, 12, a.ProvisioningTasks("prod"), "the rest stay waiting")
	r, _ := a.CapacityProviderReservation("g")
	require.InDelta(t, 250, r, 0.01, "M = 4 + 6 = 10 over N = 4")
}

func TestCapacityProviderScalesFromZeroAndKeepsHeadroom(t *testing.T) {
	a := twoPerInstance()
	newGroup(t, a, managedGroup("g", 0, 10, 0))
	a.CreateService("prod", "web", 3, false)
	require.Equal(t, 3, a.ProvisioningTasks("prod"))
	a.Advance(time.Minute)
	r, _ := a.CapacityProviderReservation("g")
	require.InDelta(t, 200, r, 0.01, "M > 0 and N = 0")
	require.Equal(t, int32(1), a.Group("g").Desired, "a 3-AZ group adds minimumScalingStepSize (1) at a time")
	a.Advance(time.Minute)
	require.Equal(t, int32(2), a.Group("g").Desired, "ceil(3 tasks / 2 a piece)")
	a.Advance(4 * time.Minute)
	require.Equal(t, 3, a.ServiceTasks("prod", "web"))

	b := newAccount(t)
	spec := managedGroup("h", 1, 10, 2)
	spec.CapacityProvider.TargetCapacity = 50
	newGroup(t, b, spec)
	b.CreateService("prod", "web", 2, false)
	b.Advance(2 * time.Minute)
	require.Equal(t, int32(4), b.Group("h").Desired, "two busy instances at a 50% target, one instance a minute")
	b.Advance(30 * time.Minute)
	require.Equal(t, int32(4), b.Group("h").Desired, "50% reservation is on target")
	require.Len(t, b.DesiredChanges("h"), 2)
}

func TestCapacityProviderValidationAndManagedDraining(t *testing.T) {
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-old", "m6i.large")
	base := GroupSpec{Name: "g", Min: 1, Max: 3, Desired: 1, LaunchTemplateID: lt, ECSCluster: "prod"}

	spec := base
	spec.CapacityProvider = &CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true}
	requireAPIError(t, a.CreateGroup(spec), "ValidationError", "instance protection from scale in")
	spec.CapacityProvider = &CapacityProviderSpec{ManagedScaling: true, TargetCapacity: 101}
	requireAPIError(t, a.CreateGroup(spec), "ValidationError", "between 1 and 100")
	spec = base
	spec.ECSCluster = ""
	spec.CapacityProvider = &CapacityProviderSpec{ManagedScaling: true}
	requireAPIError(t, a.CreateGroup(spec), "ValidationError", "cluster")
	require.Empty(t, a.Group("g").Name, "no group was created")

	spec = base
	spec.CapacityProvider = &CapacityProviderSpec{ManagedDraining: true}
	require.NoError(t, a.CreateGroup(spec))
	hooks, err := a.AutoScaling().DescribeLifecycleHooks(context.Background(), &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String("g")})
	require.NoError(t, err)
	require.Len(t, hooks.LifecycleHooks, 1)
	require.Equal(t, ECSManagedDrainingHookName, aws.ToString(hooks.LifecycleHooks[0].LifecycleHookName))
	for _, tag := range describeGroup(t, a, "g").Tags {
		require.NotEqual(t, ECSManagedTagKey, aws.ToString(tag.Key), "no managed scaling, no tag")
	}
	_, ok := a.CapacityProviderReservation("g")
	require.False(t, ok)
	inst := a.Group("g").Instances[0]
	require.Equal(t, "g", aws.ToString(describeCI(t, a, "prod", inst.ContainerInstanceARN).CapacityProviderName), "named after the group by default")

	a.CreateService("prod", "web", 1, false)
	_, err = a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(context.Background(), &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(inst.ID), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	require.NoError(t, err)
	v, _ := a.Instance(inst.ID)
	require.Equal(t, "DRAINING", v.ContainerInstanceStatus, "ECS drains the terminating instance")
	a.Advance(3 * time.Minute)
	v, _ = a.Instance(inst.ID)
	require.Equal(t, "Terminated", v.LifecycleState)
	require.Equal(t, CallerECS, a.LifecycleCompletions()[0].Caller)
	require.Equal(t, 1, a.ServiceTasks("prod", "web"))
}

func TestDesiredChangesRecordWhoMovedDesired(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	newGroup(t, a, GroupSpec{Name: "g", Min: 1, Max: 5, Desired: 2})
	require.NoError(t, a.SetDesiredCapacity("g", 3))
	require.NoError(t, a.SetDesiredCapacity("g", 3)) // no change, no record
	_, err := asClient(a).SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(4)})
	require.NoError(t, err)
	a.Advance(time.Minute)
	_, err = a.AutoScaling().(*AutoScalingClient).UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"), MaxSize: aws.Int32(3)})
	require.NoError(t, err)
	victim := ""
	for _, i := range a.Group("g").Instances {
		if i.LifecycleState == "InService" {
			victim = i.ID
		}
	}
	_, err = a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(victim), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)

	require.Equal(t, []DesiredChange{
		{At: start, From: 2, To: 3, By: CallerTest},
		{At: start, From: 3, To: 4, By: CallerAPI},
		{At: start.Add(time.Minute), From: 4, To: 3, By: CallerAPI},
		{At: start.Add(time.Minute), From: 3, To: 2, By: CallerAPI},
	}, a.DesiredChanges("g"))
	require.Nil(t, a.DesiredChanges("nope"))
	require.Zero(t, a.ServiceDesired("prod", "web"))
}

// Amazon ECS API Reference, "ManagedScaling": a scale-out of a group in one Availability Zone adds the demand,
// at least minimumScalingStepSize and at most maximumScalingStepSize instances; a group in several zones adds
// exactly minimumScalingStepSize whatever the demand; out-of-range step sizes are refused.
func TestCapacityProviderScalingStepSizes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		azs      []string
		min, max int32
		tasks    int
		want     int32 // desired after the first evaluation (from 1)
	}{
		{name: "one zone, defaults: the whole demand", azs: []string{"us-east-1a"}, tasks: 10, want: 5},
		{name: "one zone, maximumScalingStepSize 2", azs: []string{"us-east-1a"}, max: 2, tasks: 10, want: 3},
		{name: "one zone, minimumScalingStepSize 3 for a demand of 1", azs: []string{"us-east-1a"}, min: 3, tasks: 3, want: 4},
		{name: "three zones: exactly minimumScalingStepSize", tasks: 10, min: 2, want: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := twoPerInstance()
			spec := managedGroup("g", 0, 20, 1)
			spec.AvailabilityZones = tc.azs
			spec.CapacityProvider.MinimumScalingStepSize, spec.CapacityProvider.MaximumScalingStepSize = tc.min, tc.max
			newGroup(t, a, spec)
			a.CreateService("prod", "web", tc.tasks, false)
			a.Advance(time.Minute)
			require.Equal(t, tc.want, a.Group("g").Desired)
		})
	}
	a := newAccount(t)
	spec := managedGroup("g", 0, 20, 1)
	spec.CapacityProvider.MinimumScalingStepSize = 10001
	spec.LaunchTemplateID = a.CreateLaunchTemplate("lt", "ami-old", "m6i.large")
	require.ErrorContains(t, a.CreateGroup(spec), "must be between 1 and 10000")
}

// A service's own capacity provider strategy (Amazon ECS Developer Guide, "Amazon ECS capacity providers for
// EC2 workloads"): its tasks go only to the instances of the providers the strategy names, base first, then by
// weight, and the tasks that wait for room are credited to the provider the strategy picks for them, whose
// group alone scales out; a launch type EC2 service's waiting tasks scale no capacity provider.
func TestCapacityProviderStrategyPerServicePlacesAndCreditsToItsProviders(t *testing.T) {
	two := func(name, cp string) GroupSpec {
		s := managedGroup(name, 1, 6, 1)
		s.CapacityProvider.Name = cp
		return s
	}
	t.Run("base and weight", func(t *testing.T) {
		a := New(testingclock.NewFakeClock(start), Options{MaxTasksPerInstance: 10})
		newGroup(t, a, two("a", "cp-a"))
		newGroup(t, a, two("b", "cp-b"))
		a.Advance(5 * time.Minute)
		a.CreateService("prod", "web", 0, false)
		a.SetServiceDeployment("prod", "web", ServiceDeployment{CapacityProviderStrategy: []StrategyItem{
			{CapacityProvider: "cp-a", Base: 1, Weight: 1}, {CapacityProvider: "cp-b", Weight: 3}}})
		a.SetServiceDesiredCount("prod", "web", 5)
		a.Advance(time.Minute)
		require.Equal(t, 2, a.Group("a").Instances[0].TasksByLastStatus["RUNNING"], "the base, then one share of weight 1")
		require.Equal(t, 3, a.Group("b").Instances[0].TasksByLastStatus["RUNNING"], "three shares of weight 3")
		out, err := a.ECS().DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String("prod"), Services: []string{"web"}})
		require.NoError(t, err)
		require.Len(t, out.Services[0].CapacityProviderStrategy, 2)
		require.Empty(t, out.Services[0].LaunchType, "a service has a launch type or a capacity provider strategy")
	})
	for _, tc := range []struct {
		name         string
		d            ServiceDeployment
		wantA, wantB int32
		tasksOnA     int
		provisioning int // tasks waiting for room before the first evaluation
	}{
		{name: "waiting tasks of a cp-b service scale cp-b only", d: ServiceDeployment{CapacityProviderStrategy: []StrategyItem{{CapacityProvider: "cp-b", Weight: 1}}},
			wantA: 1, wantB: 2, tasksOnA: 0, provisioning: 4},
		{name: "launch type EC2: any instance, no provider scales", d: ServiceDeployment{LaunchTypeEC2: true},
			wantA: 1, wantB: 1, tasksOnA: 2, provisioning: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := twoPerInstance()
			newGroup(t, a, two("a", "cp-a"))
			newGroup(t, a, two("b", "cp-b"))
			a.Advance(5 * time.Minute)
			a.CreateService("prod", "web", 0, false)
			a.SetServiceDeployment("prod", "web", tc.d)
			a.SetServiceDesiredCount("prod", "web", 6)
			require.Equal(t, tc.provisioning, a.ProvisioningTasks("prod"))
			a.Advance(time.Minute)
			require.Equal(t, tc.wantA, a.Group("a").Desired)
			require.Equal(t, tc.wantB, a.Group("b").Desired)
			require.Equal(t, tc.tasksOnA, a.Group("a").Instances[0].TasksByLastStatus["RUNNING"])
		})
	}
}
