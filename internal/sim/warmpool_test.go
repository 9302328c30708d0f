package sim

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"
)

// warmGroup is a group of 2 (max 4) with a launching and a terminating hook to a queue and a warm pool.
func warmGroup(t *testing.T, spec WarmPoolSpec) (*Account, string, string) {
	t.Helper()
	a := newAccount(t)
	q := a.CreateQueue("hooks", 5, "")
	lt := a.CreateLaunchTemplate("lt", "ami-old", "m6i.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "g", Min: 1, Max: 4, Desired: 2, LaunchTemplateID: lt, ECSCluster: "c",
		Hooks: []HookSpec{{Name: "launch", Transition: TransitionLaunching, QueueURL: q},
			{Name: "drain", Transition: TransitionTerminating, QueueURL: q}}}))
	require.NoError(t, a.PutWarmPool("g", spec))
	drainQueue(a, q)
	return a, q, lt
}

var seenTokens = map[string]bool{}

// drainQueue returns the lifecycle notifications on the queue not returned before.
func drainQueue(a *Account, q string) []hookNotification {
	var out []hookNotification
	for _, body := range a.QueueMessages(q) {
		var n hookNotification
		if json.Unmarshal([]byte(body), &n) == nil && n.LifecycleActionToken != "" && !seenTokens[n.LifecycleActionToken] {
			seenTokens[n.LifecycleActionToken] = true
			out = append(out, n)
		}
	}
	return out
}

func completeAll(t *testing.T, a *Account, ns []hookNotification) {
	t.Helper()
	for _, n := range ns {
		_, err := a.AutoScaling().CompleteLifecycleAction(context.Background(), &autoscaling.CompleteLifecycleActionInput{
			AutoScalingGroupName: aws.String(n.AutoScalingGroupName), LifecycleHookName: aws.String(n.LifecycleHookName),
			LifecycleActionToken: aws.String(n.LifecycleActionToken), LifecycleActionResult: aws.String(ResultContinue)})
		require.NoError(t, err)
	}
}

func poolStates(a *Account) map[string]string {
	out := map[string]string{}
	for _, i := range a.WarmPool("g") {
		out[i.ID] = i.LifecycleState
	}
	return out
}

func TestWarmPoolFillsToMaxMinusDesiredStoppedAndOutsideTheGroup(t *testing.T) {
	a, _, _ := warmGroup(t, WarmPoolSpec{})
	pool := a.WarmPool("g")
	require.Len(t, pool, 2, "pool size is max (4) minus desired (2)")
	for _, i := range pool {
		require.Equal(t, "Warmed:Stopped", i.LifecycleState)
		require.Equal(t, "stopped", i.EC2State)
		require.Empty(t, i.ContainerInstanceARN, "the ECS agent does not register while warming")
	}
	out, err := a.AutoScaling().DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err)
	g := out.AutoScalingGroups[0]
	require.Len(t, g.Instances, 2, "pool instances are not the group's instances")
	require.Equal(t, int32(2), aws.ToInt32(g.WarmPoolSize))
	require.NotNil(t, g.WarmPoolConfiguration)
	wp, err := a.AutoScaling().DescribeWarmPool(context.Background(), &autoscaling.DescribeWarmPoolInput{AutoScalingGroupName: aws.String("g"), MaxRecords: aws.Int32(1)})
	require.NoError(t, err)
	require.Len(t, wp.Instances, 1)
	require.NotNil(t, wp.NextToken, "paged by MaxRecords")
	ai, err := a.AutoScaling().DescribeAutoScalingInstances(context.Background(), &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: []string{pool[0].ID}})
	require.NoError(t, err)
	require.Equal(t, "Warmed:Stopped", aws.ToString(ai.AutoScalingInstances[0].LifecycleState), "DescribeAutoScalingInstances lists pool instances")
	require.Equal(t, "g", aws.ToString(ai.AutoScalingInstances[0].AutoScalingGroupName))
}

// Each move through the warm pool waits on the lifecycle hooks in its own state, and its notification says
// where the instance comes from and goes to (User Guide, "Use lifecycle hooks with a warm pool").
func TestWarmPoolMovesWaitInTheirStatesAndNotifyOriginAndDestination(t *testing.T) {
	a, q, lt := warmGroup(t, WarmPoolSpec{ReuseOnScaleIn: true, MaxGroupPreparedCapacity: aws.Int32(3)})
	require.Len(t, a.WarmPool("g"), 1)
	served := a.Group("g").Instances[0].ID

	// Scale in with reuse: back to the pool, waiting on the terminating hook in Warmed:Pending:Wait.
	require.NoError(t, a.SetDesiredCapacity("g", 1))
	ns := drainQueue(a, q)
	require.Len(t, ns, 1)
	back := ns[0].EC2InstanceID
	require.Equal(t, [3]string{TransitionTerminating, "AutoScalingGroup", "WarmPool"}, [3]string{ns[0].LifecycleTransition, ns[0].Origin, ns[0].Destination})
	require.Equal(t, "Warmed:Pending:Wait", poolStates(a)[back])
	require.Len(t, a.Group("g").Instances, 1, "it left the group")
	completeAll(t, a, ns)
	a.Advance(time.Minute)
	require.Equal(t, "Warmed:Stopped", poolStates(a)[back])
	require.Empty(t, a.Terminations(), "a return to the pool is no termination")

	// Scale out: the oldest warmed instance leaves the pool and waits in Pending:Wait on the launching hook.
	require.NoError(t, a.SetDesiredCapacity("g", 2))
	ns = drainQueue(a, q)
	require.Empty(t, ns, "it first starts (Pending)")
	a.Advance(a.Options().BootDelay)
	ns = drainQueue(a, q)
	require.Len(t, ns, 1)
	drawn := ns[0].EC2InstanceID
	require.Equal(t, [3]string{TransitionLaunching, "WarmPool", "AutoScalingGroup"}, [3]string{ns[0].LifecycleTransition, ns[0].Origin, ns[0].Destination})
	completeAll(t, a, ns)
	v, _ := a.Instance(drawn)
	require.Equal(t, "InService", v.LifecycleState)

	// The pool keeps its AMI when the template changes; a terminated pool instance waits in
	// Warmed:Terminating:Wait and the refill launches the current version into the pool (Warmed:Pending:Wait).
	a.SetDefaultLaunchTemplateVersion(lt, a.CreateLaunchTemplateVersion(lt, "ami-new"))
	pool := a.WarmPool("g")
	require.Len(t, pool, 1)
	require.Equal(t, "ami-old", pool[0].ImageID)
	_, err := a.AutoScaling().(*AutoScalingClient).TerminateInstanceInAutoScalingGroup(context.Background(), &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(pool[0].ID), ShouldDecrementDesiredCapacity: aws.Bool(true)})
	require.NoError(t, err)
	require.Equal(t, int32(2), a.Group("g").Desired, "a pool instance is no part of desired capacity")
	ns = drainQueue(a, q)
	require.Len(t, ns, 1)
	require.Equal(t, [3]string{TransitionTerminating, "WarmPool", "EC2"}, [3]string{ns[0].LifecycleTransition, ns[0].Origin, ns[0].Destination})
	require.Equal(t, "Warmed:Terminating:Wait", poolStates(a)[pool[0].ID])
	completeAll(t, a, ns)
	a.Advance(a.Options().BootDelay)
	ns = drainQueue(a, q)
	require.Len(t, ns, 1)
	require.Equal(t, [3]string{TransitionLaunching, "EC2", "WarmPool"}, [3]string{ns[0].LifecycleTransition, ns[0].Origin, ns[0].Destination})
	require.Equal(t, "Warmed:Pending:Wait", poolStates(a)[ns[0].EC2InstanceID])
	completeAll(t, a, ns)
	a.Advance(time.Minute)
	pool = a.WarmPool("g")
	require.Len(t, pool, 1)
	require.Equal(t, "ami-new", pool[0].ImageID)
	require.Equal(t, "Warmed:Stopped", pool[0].LifecycleState)
	_, gone := poolStates(a)[served]
	require.False(t, gone)
}
