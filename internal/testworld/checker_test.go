package testworld_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/checker"
)

// The checker is proven on deliberately broken agents: each test breaks the agent one way and asserts that the
// checker names the invariant and the group it breaks. A checker that passes a broken agent is no safety net.

// runFor steps the world (agent iteration, invariant check, tick) for d of simulated time.
func runFor(t *testing.T, w *testworld.World, d time.Duration) {
	t.Helper()
	_, err := w.RunUntil(context.Background(), testworld.CheckerTick, d, func() bool { return false })
	require.NoError(t, err)
}

// scaleIn lets the agent see the group settled, then has a user lower its desired capacity to 1: Auto Scaling
// terminates two instances through the group's terminating hook.
func scaleIn(t *testing.T, w *testworld.World) {
	t.Helper()
	runFor(t, w, 30*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity("g", 1))
}

// violationsOf returns the violations of invariant inv for group.
func violationsOf(vs []checker.Violation, inv int, group string) []checker.Violation {
	var out []checker.Violation
	for _, v := range vs {
		if v.Invariant == inv && v.Group == group {
			out = append(out, v)
		}
	}
	return out
}

// swallowCompletions answers CompleteLifecycleAction with success without sending it: the agent believes every
// lifecycle action completed, Auto Scaling never hears of it.
type swallowCompletions struct{ awsapi.AutoScaling }

func (swallowCompletions) CompleteLifecycleAction(context.Context, *autoscaling.CompleteLifecycleActionInput, ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func TestCheckerInvariant4AgentThatNeverCompletesLifecycleActions(t *testing.T) {
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients { c.AutoScaling = swallowCompletions{c.AutoScaling}; return c })
	scaleIn(t, w)
	runFor(t, w, 20*time.Minute)
	vs := w.Checker.Finish()
	inv4 := violationsOf(vs, 4, "g")
	require.Len(t, inv4, 2, "both terminating lifecycle actions of the scale-in: %v", vs)
	for _, v := range inv4 {
		require.Contains(t, v.Detail, "timed out")
		require.Contains(t, v.Detail, "never completed by CompleteLifecycleAction")
	}
	require.Empty(t, violationsOf(vs, 2, "g"), "the agent drained both before their actions timed out")
	require.Zero(t, w.Account.Calls()["autoscaling:CompleteLifecycleAction"])
}

// abandonTerminations completes terminating lifecycle actions with ABANDON instead of CONTINUE.
type abandonTerminations struct{ awsapi.AutoScaling }

func (a abandonTerminations) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	cp := *in
	cp.LifecycleActionResult = aws.String(sim.ResultAbandon)
	return a.AutoScaling.CompleteLifecycleAction(ctx, &cp, o...)
}

// abandonLaunches completes the agent's launching lifecycle actions with ABANDON instead of CONTINUE: an
// agent that throws away good capacity.
type abandonLaunches struct{ awsapi.AutoScaling }

func (a abandonLaunches) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	cp := *in
	if aws.ToString(in.LifecycleHookName) == testworld.LaunchHookName {
		cp.LifecycleActionResult = aws.String(sim.ResultAbandon)
	}
	return a.AutoScaling.CompleteLifecycleAction(ctx, &cp, o...)
}

// An agent that abandons a launch it found healthy in its cluster breaks invariant 4; the warm pool's exemption
// (an old-configuration instance leaving the pool during a refresh) does not cover a plain scale out.
func TestCheckerInvariant4LaunchAbandonedWhileHealthy(t *testing.T) {
	w, err := testworld.Build(testworld.Spec{Groups: []testworld.GroupSetup{{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 6, Desired: 3}},
		Services: map[string]int{"web": 6}, Wrap: func(c agent.Clients) agent.Clients { c.AutoScaling = abandonLaunches{c.AutoScaling}; return c }})
	require.NoError(t, err)
	runFor(t, w, 30*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity("g", 4))
	runFor(t, w, 5*time.Minute)
	inv4 := violationsOf(w.Checker.Finish(), 4, "g")
	require.NotEmpty(t, inv4)
	require.Contains(t, inv4[0].Detail, "completed ABANDON while the instance was healthy")
}

func TestCheckerInvariant4TerminatingActionCompletedWithTheWrongResult(t *testing.T) {
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients { c.AutoScaling = abandonTerminations{c.AutoScaling}; return c })
	scaleIn(t, w)
	runFor(t, w, 20*time.Minute)
	inv4 := violationsOf(w.Checker.Finish(), 4, "g")
	require.Len(t, inv4, 2)
	for _, v := range inv4 {
		require.Contains(t, v.Detail, "completed ABANDON, not CONTINUE")
	}
}

// dropLifecycleMessages hides every lifecycle action notification from the agent, as a consumer that loses
// them would: the agent never sees them.
type dropLifecycleMessages struct {
	awsapi.SQS
	mu      sync.Mutex
	dropped int
}

func (d *dropLifecycleMessages) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := d.SQS.ReceiveMessage(ctx, in, o...)
	if err != nil {
		return out, err
	}
	kept := []sqstypes.Message{}
	for _, m := range out.Messages {
		if strings.Contains(aws.ToString(m.Body), "LifecycleActionToken") {
			d.mu.Lock()
			d.dropped++
			d.mu.Unlock()
			continue
		}
		kept = append(kept, m)
	}
	out.Messages = kept
	return out, nil
}

// blindToWaits answers DescribeAutoScalingInstances with nothing: the agent's reconcile loop cannot confirm
// an instance waiting without its message (lifecycleaction.Hooks.AdoptWaiting), so it never takes one up.
type blindToWaits struct{ awsapi.AutoScaling }

func (b blindToWaits) DescribeAutoScalingInstances(context.Context, *autoscaling.DescribeAutoScalingInstancesInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
	return &autoscaling.DescribeAutoScalingInstancesOutput{}, nil
}

func TestCheckerInvariant2ScaleInTerminationsTheAgentNeverSaw(t *testing.T) {
	drop := &dropLifecycleMessages{}
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients {
		drop.SQS = c.SQS
		c.SQS, c.AutoScaling = drop, blindToWaits{c.AutoScaling}
		return c
	})
	scaleIn(t, w)
	victims := map[string]bool{}
	for _, term := range w.Account.Terminations() {
		require.Equal(t, sim.CauseScaleIn, term.Cause)
		victims[term.InstanceID] = true
	}
	require.Len(t, victims, 2)
	runFor(t, w, 20*time.Minute)
	require.Positive(t, drop.dropped)

	vs := w.Checker.Finish()
	inv2 := violationsOf(vs, 2, "g")
	require.Len(t, inv2, 2, "both scale-in terminations went through undrained: %v", vs)
	for _, v := range inv2 {
		id := strings.Fields(v.Detail)[1]
		require.True(t, victims[id], "violation names a victim of the scale-in: %s", v.Detail)
		require.Contains(t, v.Detail, "termination cause scale-in")
		require.Contains(t, v.Detail, "timed out (CONTINUE)")
	}
	require.Len(t, violationsOf(vs, 4, "g"), 2, "and neither lifecycle action was completed")
}

// forgeDrain adds another container instance to every DRAINING request of the agent, as a broken instance
// lookup would (C7): an instance of a group the agent does not manage.
type forgeDrain struct {
	awsapi.ECS
	mu    sync.Mutex
	extra string // container instance ARN added to DRAINING requests
}

func (f *forgeDrain) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, o ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	f.mu.Lock()
	extra := f.extra
	f.mu.Unlock()
	if in.Status == ecstypes.ContainerInstanceStatusDraining && extra != "" {
		cp := *in
		cp.ContainerInstances = append(append([]string(nil), in.ContainerInstances...), extra)
		in = &cp
	}
	return f.ECS.UpdateContainerInstancesState(ctx, in, o...)
}

func TestCheckerInvariant1ForgedDrainOfAnUnmanagedGroupInTheSameCluster(t *testing.T) {
	forge := &forgeDrain{}
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients { forge.ECS = c.ECS; c.ECS = forge; return c },
		testworld.GroupSetup{Name: "theirs", Cluster: "c1", Parameter: "/golden/theirs", Min: 1, Max: 2, Desired: 1, Unmanaged: true})
	theirs := w.Account.Group("theirs").Instances[0]
	forge.extra = theirs.ContainerInstanceARN
	ctx := context.Background()
	w.PublishAMI("/golden/g", testworld.ImageB)
	done, err := w.RunUntil(ctx, testworld.CheckerTick, time.Hour, func() bool {
		i, _ := w.Account.Instance(theirs.ID)
		return i.ContainerInstanceStatus == "DRAINING"
	})
	require.NoError(t, err)
	require.True(t, done, "the broken agent drained their instance")

	vs := w.Checker.Finish()
	inv1 := violationsOf(vs, 1, "theirs")
	require.Len(t, inv1, 1, "%v", vs)
	require.Contains(t, inv1[0].Detail, "serving capacity 0 below desired (a group the agent does not manage, in a managed cluster) 1")
	require.Zero(t, w.Checker.MinServing["theirs"])
}

// dipWithinOneCall, when the agent drains an instance of the group (an old instance in Terminating:Wait, which
// the instance refresh replaces), also drains an in-service instance of the group and puts it back ACTIVE
// before returning: two drains at once, undone before the agent iteration ends.
type dipWithinOneCall struct {
	awsapi.ECS
	account *sim.Account
	group   string
	mu      sync.Mutex
	dips    int
}

func (d *dipWithinOneCall) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, o ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	out, err := d.ECS.UpdateContainerInstancesState(ctx, in, o...)
	if err != nil || in.Status != ecstypes.ContainerInstanceStatusDraining {
		return out, err
	}
	for _, i := range d.account.Group(d.group).Instances {
		if i.LifecycleState != "InService" || i.ContainerInstanceStatus != "ACTIVE" {
			continue
		}
		for _, status := range []ecstypes.ContainerInstanceStatus{ecstypes.ContainerInstanceStatusDraining, ecstypes.ContainerInstanceStatusActive} {
			if _, err := d.ECS.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: in.Cluster,
				ContainerInstances: []string{i.ContainerInstanceARN}, Status: status}); err != nil {
				return nil, err
			}
		}
		d.mu.Lock()
		d.dips++
		d.mu.Unlock()
		break
	}
	return out, nil
}

func TestCheckerInvariants1And3MomentaryDipInsideOneAgentIteration(t *testing.T) {
	dip := &dipWithinOneCall{group: "g"}
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients { dip.ECS = c.ECS; c.ECS = dip; return c })
	dip.account = w.Account
	ctx := context.Background()
	w.PublishAMI("/golden/g", testworld.ImageB)
	mostDrainingBetweenIterations := 0
	done, err := w.RunUntil(ctx, testworld.CheckerTick, 3*time.Hour, func() bool {
		n := 0
		for _, i := range w.Account.Group("g").Instances {
			if (i.LifecycleState == "InService" || i.LifecycleState == "Terminating:Wait") && i.ContainerInstanceStatus == "DRAINING" {
				n++
			}
		}
		mostDrainingBetweenIterations = max(mostDrainingBetweenIterations, n)
		r := w.Rollout(ctx, "g")
		return r.TargetImageID == testworld.ImageB && !r.Active()
	})
	require.NoError(t, err)
	require.True(t, done, "%+v %v %v", w.Rollout(ctx, "g"), dip.dips, w.Account.Calls())
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, "g").Phase)
	require.Positive(t, dip.dips)
	require.Equal(t, 1, mostDrainingBetweenIterations, "between agent iterations the world looks fine")

	vs := w.Checker.Finish()
	inv1, inv3 := violationsOf(vs, 1, "g"), violationsOf(vs, 3, "g")
	require.Len(t, inv1, dip.dips, "each dip seen once: %v", vs)
	require.Len(t, inv3, dip.dips, "%v", vs)
	require.Contains(t, inv1[0].Detail, "serving capacity 2 below desired 3")
	require.Contains(t, inv3[0].Detail, "2 instances DRAINING at once")
}

func TestCheckerHealthyScaleInAndRolloutHaveNoViolation(t *testing.T) {
	w := testworld.BrokenWorld(t, nil, testworld.GroupSetup{Name: "theirs", Cluster: "c1", Parameter: "/golden/theirs", Min: 1, Max: 2, Desired: 1, Unmanaged: true})
	scaleIn(t, w)
	runFor(t, w, 20*time.Minute)
	ctx := context.Background()
	w.PublishAMI("/golden/g", testworld.ImageB)
	done, err := w.RunUntil(ctx, testworld.CheckerTick, 3*time.Hour, func() bool { return w.Rollout(ctx, "g").Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	runFor(t, w, 5*time.Minute)
	require.Empty(t, w.Checker.Finish())
	require.Equal(t, int32(1), w.Checker.Baseline["g"], "the baseline followed the user's scale-in")
	require.Equal(t, 1, w.Checker.MinServing["theirs"], "the group sharing the cluster kept serving")
}

// ignoreDrains answers DRAINING requests with success without sending them: the agent believes its instances
// drain, ECS never hears of it and their tasks keep running.
type ignoreDrains struct{ awsapi.ECS }

func (i ignoreDrains) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, o ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	if in.Status == ecstypes.ContainerInstanceStatusDraining {
		return &ecs.UpdateContainerInstancesStateOutput{}, nil
	}
	return i.ECS.UpdateContainerInstancesState(ctx, in, o...)
}

func TestCheckerInvariant2DrainDeadlineExceptionHoldsOnlyFromTheDeadline(t *testing.T) {
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients { c.ECS = ignoreDrains{c.ECS}; return c })
	require.Equal(t, 30*time.Minute, w.Checker.DrainTimeout, "the agent's --drain-timeout")
	scaleIn(t, w)
	runFor(t, w, time.Hour)
	var continued []sim.Completion
	for _, comp := range w.Account.LifecycleCompletions() {
		if comp.Accepted && comp.Caller == sim.CallerAPI {
			continued = append(continued, comp)
		}
	}
	require.Len(t, continued, 2)
	for _, comp := range continued {
		require.False(t, comp.Drained, "the tasks never left")
		require.Equal(t, sim.ResultContinue, comp.Result)
		require.GreaterOrEqual(t, comp.At.Sub(w.Account.Terminations()[0].RequestedAt), 30*time.Minute, "at the drain deadline")
	}
	require.Empty(t, violationsOf(w.Checker.Finish(), 2, "g"), "continued undrained at the deadline: the documented exception")

	// The same world with a drain deadline longer than the run: the same completions are violations.
	w = testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients { c.ECS = ignoreDrains{c.ECS}; return c })
	w.Checker.DrainTimeout = 2 * time.Hour
	scaleIn(t, w)
	runFor(t, w, time.Hour)
	inv2 := violationsOf(w.Checker.Finish(), 2, "g")
	require.Len(t, inv2, 4, "each instance: completed CONTINUE undrained, then shut down undrained: %v", inv2)
}

func TestCheckerInvariant2ScaleInOfAGroupWithoutATerminatingHook(t *testing.T) {
	w, err := testworld.Build(testworld.Spec{Groups: []testworld.GroupSetup{{Name: "bare", Cluster: "c1", Parameter: "/golden/bare", Min: 1, Max: 3, Desired: 2,
		HeartbeatTimeout: -1}}, Services: map[string]int{"web": 4}})
	require.NoError(t, err)
	runFor(t, w, 30*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity("bare", 1))
	runFor(t, w, 5*time.Minute)
	inv2 := violationsOf(w.Checker.Finish(), 2, "bare")
	require.Len(t, inv2, 1, "nothing could drain the instance scale-in took")
	require.Contains(t, inv2[0].Detail, "termination cause scale-in")
	require.Contains(t, inv2[0].Detail, "no terminating lifecycle hook held it")
}

// bareGroup is an account with one ECS group "g" (cluster c1, min = desired = 3, max 6, no lifecycle hook, no
// task) judged by a started checker, and the agent's Auto Scaling and ECS clients: the broken models below
// drive the account directly, through the calls the agent would make.
func bareGroup(t *testing.T, opts sim.Options) (*sim.Account, *checker.Checker) {
	t.Helper()
	a, c, _ := bareGroupAndTemplate(t, opts)
	return a, c
}

// bareGroupAndTemplate is bareGroup that also returns the id of the group's launch template.
func bareGroupAndTemplate(t *testing.T, opts sim.Options) (*sim.Account, *checker.Checker, string) {
	t.Helper()
	a := sim.New(testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)), opts)
	lt := a.CreateLaunchTemplate("g-lt", testworld.ImageA, "m7g.large")
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "g", Min: 3, Max: 6, Desired: 3, LaunchTemplateID: lt, ECSCluster: "c1"}))
	c := checker.NewChecker(a, map[string]int32{"g": 3})
	c.Start()
	return a, c, lt
}

func servingOf(a *sim.Account, group string) int {
	n := 0
	for _, i := range a.Group(group).Instances {
		if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
			n++
		}
	}
	return n
}

func drainInstance(t *testing.T, a *sim.Account, id string) {
	t.Helper()
	i, _ := a.Instance(id)
	_, err := a.ECS().UpdateContainerInstancesState(context.Background(), &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("c1"),
		ContainerInstances: []string{i.ContainerInstanceARN}, Status: ecstypes.ContainerInstanceStatusDraining})
	require.NoError(t, err)
}

func terminate(t *testing.T, a *sim.Account, id string, decrement bool) {
	t.Helper()
	_, err := a.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(context.Background(), &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(id), ShouldDecrementDesiredCapacity: aws.Bool(decrement)})
	require.NoError(t, err)
}

func TestCheckerInvariant1ReplacementThatTerminatesBeforeItLaunches(t *testing.T) {
	// A replacement model that terminates before it launches, at min size = desired capacity (what an instance
	// refresh at MinHealthyPercentage 100 must never do): the old instance goes, its replacement comes 10
	// minutes later.
	a, c := bareGroup(t, sim.Options{})
	old := a.Group("g").Instances[0].ID
	a.SetLaunchShortfall("g", sim.Shortfall{})
	terminatedAt := a.Clock().Now()
	terminate(t, a, old, false)
	a.Advance(10 * time.Minute)
	require.Equal(t, 2, servingOf(a, "g"))
	a.ClearLaunchShortfall("g")
	a.Advance(5 * time.Minute)
	require.Equal(t, 3, servingOf(a, "g"), "the late replacement serves")

	inv1 := violationsOf(c.Finish(), 1, "g")
	require.Len(t, inv1, 1, "%v", inv1)
	require.Equal(t, "serving capacity 2 below desired 3", inv1[0].Detail)
	require.Equal(t, terminatedAt, inv1[0].At, "seen at the termination, not at the next look")
	require.Equal(t, 2, c.MinServing["g"])
}

func TestCheckerInvariant1OthersAsksAreExemptForTheirBootTimeOnly(t *testing.T) {
	// An operator's termination without decrement and an autoscaler's raise ask for instances: serving below
	// desired while they boot is not the agent's doing.
	a, c := bareGroup(t, sim.Options{})
	require.True(t, a.TerminateWithoutDecrement(a.Group("g").Instances[1].ID))
	require.Equal(t, 2, servingOf(a, "g"))
	a.Advance(3 * time.Minute)
	require.NoError(t, a.SetDesiredCapacity("g", 5))
	a.Advance(3 * time.Minute)
	require.Equal(t, 5, servingOf(a, "g"))
	require.Empty(t, violationsOf(c.Finish(), 1, "g"))
	require.Equal(t, int32(5), c.Baseline["g"])

	// Instances that take longer than OthersBootTime to serve: the ask is held from then on.
	a, c = bareGroup(t, sim.Options{BootDelay: checker.OthersBootTime + 2*time.Minute})
	raisedAt := a.Clock().Now()
	require.NoError(t, a.SetDesiredCapacity("g", 4))
	a.Advance(checker.OthersBootTime - time.Second)
	require.Empty(t, c.Check(), "within the boot time")
	a.Advance(time.Second)
	require.Len(t, c.Check(), 1, "the end of the boot time is seen at the next look (a world looks after each agent iteration)")
	a.Advance(5 * time.Minute)
	require.Equal(t, 4, servingOf(a, "g"))
	inv1 := violationsOf(c.Finish(), 1, "g")
	require.Len(t, inv1, 1)
	require.Equal(t, "serving capacity 3 below desired 4", inv1[0].Detail)
	require.Equal(t, raisedAt.Add(checker.OthersBootTime), inv1[0].At)
}

// drainWithoutCoverAfterARaise plays a broken agent on a bare group: an autoscaler raises desired capacity 3 -> 4,
// then 4 -> 5 a minute later, and once the first of its instances serves the agent drains an old instance at
// once, while the autoscaler's second instance still boots, leaves it DRAINING 10 minutes and terminates it
// without decrement. It returns the checker after the run and the time of the drain.
func drainWithoutCoverAfterARaise(t *testing.T) (*checker.Checker, time.Time) {
	t.Helper()
	a, c := bareGroup(t, sim.Options{})
	old := a.Group("g").Instances[0].ID
	require.NoError(t, a.SetDesiredCapacity("g", 4), "the autoscaler scales out")
	a.Advance(time.Minute)
	require.NoError(t, a.SetDesiredCapacity("g", 5), "the autoscaler scales out again while its first instance boots")
	for range 300 {
		if servingOf(a, "g") == 4 {
			break
		}
		a.Advance(time.Second)
	}
	require.Equal(t, 4, servingOf(a, "g"), "the autoscaler's first instance serves")
	drainedAt := a.Clock().Now()
	drainInstance(t, a, old)
	require.Equal(t, 3, servingOf(a, "g"))
	a.Advance(time.Minute)
	require.Equal(t, 4, servingOf(a, "g"), "the autoscaler's second instance serves; the old one still drains")
	a.Advance(9 * time.Minute)
	terminate(t, a, old, false)
	a.Advance(3 * time.Minute)
	require.Equal(t, 5, servingOf(a, "g"))
	return c, drainedAt
}

func TestCheckerInvariant1AgentThatDrainsWithoutCoverAfterAnAutoscalersRaise(t *testing.T) {
	// A raise by others holds serving capacity to it before serving ever reaches it: only the instances still
	// booting are exempt.
	c, drainedAt := drainWithoutCoverAfterARaise(t)
	vs := c.Finish()
	inv1 := violationsOf(vs, 1, "g")
	require.Len(t, inv1, 1, "one condition, from the drain until the replacement of the drained instance serves: %v", vs)
	require.Equal(t, drainedAt, inv1[0].At)
	require.Equal(t, "serving capacity 3 below desired 5 less 1 instance(s) others asked for that are still booting", inv1[0].Detail)
	require.Equal(t, 3, c.MinServing["g"])
}

// coverByItself plays a broken agent that makes room for its instance refresh by itself: before the first
// StartInstanceRefresh it raises the group's maximum size and desired capacity by one.
type coverByItself struct {
	awsapi.AutoScaling
	account *sim.Account
	mu      sync.Mutex
	done    bool
}

func (c *coverByItself) StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	c.mu.Lock()
	first := !c.done
	c.done = true
	c.mu.Unlock()
	if first {
		name := aws.ToString(in.AutoScalingGroupName)
		g := c.account.Group(name)
		as := c.account.AutoScaling().(*sim.AutoScalingClient) // the agent's calls: sim.CallerAPI
		if _, err := as.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: in.AutoScalingGroupName,
			MaxSize: aws.Int32(g.Max + 1)}); err != nil {
			return nil, err
		}
		if _, err := as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: in.AutoScalingGroupName,
			DesiredCapacity: aws.Int32(g.Desired + 1)}); err != nil {
			return nil, err
		}
	}
	return c.AutoScaling.StartInstanceRefresh(ctx, in, o...)
}

func TestCheckerNoDesiredWritesRuleCatchesAnAgentsWrites(t *testing.T) {
	// The agent never writes desired capacity or maximum size: each write of a broken agent is a violation of
	// invariant 1, whatever the rollout does after it.
	cover := &coverByItself{}
	w := testworld.BrokenWorld(t, func(c agent.Clients) agent.Clients {
		cover.AutoScaling = c.AutoScaling
		c.AutoScaling = cover
		return c
	})
	cover.account = w.Account
	ctx := context.Background()
	w.PublishAMI("/golden/g", testworld.ImageB)
	done, err := w.RunUntil(ctx, testworld.CheckerTick, 3*time.Hour, func() bool { return w.Rollout(ctx, "g").Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, "g"))
	require.True(t, cover.done, "the rollout started an instance refresh")
	var details []string
	for _, v := range w.Checker.Finish() {
		require.Equal(t, 1, v.Invariant, "%s", v)
		details = append(details, v.Detail)
	}
	require.Equal(t, []string{
		"the agent wrote desired capacity or maximum size: UpdateAutoScalingGroup desired 3 -> 3, max 6 -> 7",
		"the agent wrote desired capacity: SetDesiredCapacity 3 -> 4",
	}, details)

	// A decrementing termination, and the writes the rule leaves alone: others' raise and termination without
	// decrement, and the agent's own UpdateAutoScalingGroup that changes neither desired capacity nor maximum size.
	a, c := bareGroup(t, sim.Options{})
	require.NoError(t, a.SetDesiredCapacity("g", 4), "an autoscaler scales out")
	a.Advance(3 * time.Minute)
	require.Equal(t, 4, servingOf(a, "g"))
	_, err = a.AutoScaling().(*sim.AutoScalingClient).UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{AutoScalingGroupName: aws.String("g"),
		MinSize: aws.Int32(2), MaxSize: aws.Int32(6)})
	require.NoError(t, err)
	require.True(t, a.TerminateWithoutDecrement(a.Group("g").Instances[1].ID))
	a.Advance(3 * time.Minute)
	require.Equal(t, 4, servingOf(a, "g"))
	require.Empty(t, violationsOf(c.Check(), 1, "g"))
	victim := a.Group("g").Instances[0].ID
	terminate(t, a, victim, true)
	a.Advance(3 * time.Minute)
	inv1 := violationsOf(c.Finish(), 1, "g")
	require.Len(t, inv1, 2, "%v", inv1)
	require.ElementsMatch(t, []string{
		"the agent wrote desired capacity: TerminateInstanceInAutoScalingGroup " + victim + " with decrement (4 -> 3)",
		"serving capacity 3 below desired 4", // the autoscaler's instance the decrement took
	}, []string{inv1[0].Detail, inv1[1].Detail})
}

func TestCheckerBaselineCountsNoWriteOfTheAgent(t *testing.T) {
	// An agent's write of desired capacity is a violation, and it is not another actor's: an autoscaler's later
	// decrease lowers the baseline by its own change, not to the desired capacity it set, which still holds
	// the agent's instance.
	a, c := bareGroup(t, sim.Options{})
	_, err := a.AutoScaling().(*sim.AutoScalingClient).SetDesiredCapacity(context.Background(), &autoscaling.SetDesiredCapacityInput{
		AutoScalingGroupName: aws.String("g"), DesiredCapacity: aws.Int32(4)})
	require.NoError(t, err)
	a.Advance(3 * time.Minute)
	c.Check()
	require.Equal(t, int32(3), c.Baseline["g"], "the agent's raise")
	require.NoError(t, a.SetDesiredCapacity("g", 3), "an autoscaler scales in by one")
	a.Advance(time.Minute)
	inv1 := violationsOf(c.Finish(), 1, "g")
	require.Equal(t, int32(2), c.Baseline["g"], "the autoscaler's decrease of one, from the baseline")
	require.Len(t, inv1, 1, "%v", inv1)
	require.Equal(t, "the agent wrote desired capacity: SetDesiredCapacity 3 -> 4", inv1[0].Detail)
}

// refreshAtMin100 runs one instance refresh of the bare group to ImageB at MinHealthyPercentage 100 and
// MaxHealthyPercentage 110 on a model built with opts, and returns the checker once it ended.
func refreshAtMin100(t *testing.T, opts sim.Options) *checker.Checker {
	t.Helper()
	a, c, lt := bareGroupAndTemplate(t, opts)
	require.Equal(t, int64(2), a.CreateLaunchTemplateVersion(lt, testworld.ImageB))
	_, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String("g"),
		DesiredConfiguration: &astypes.DesiredConfiguration{LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(lt), Version: aws.String("2")}},
		Preferences:          &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110), InstanceWarmup: aws.Int32(60)}})
	require.NoError(t, err)
	for range 720 {
		out, err := a.AutoScaling().DescribeInstanceRefreshes(context.Background(), &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String("g")})
		require.NoError(t, err)
		r := out.InstanceRefreshes[0]
		if r.Status != astypes.InstanceRefreshStatusPending && r.Status != astypes.InstanceRefreshStatusInProgress {
			require.Equal(t, astypes.InstanceRefreshStatusSuccessful, r.Status, aws.ToString(r.StatusReason))
			break
		}
		a.Advance(10 * time.Second)
	}
	for _, i := range a.Group("g").Instances {
		if i.LifecycleState == "InService" {
			require.Equal(t, testworld.ImageB, i.ImageID, "the refresh replaced every instance")
		}
	}
	require.Equal(t, 3, servingOf(a, "g"))
	return c
}

func TestCheckerInvariant1RefreshModelThatTerminatesBeforeItLaunches(t *testing.T) {
	// Auto Scaling's refresh at MinHealthyPercentage 100 launches before it terminates: serving capacity never
	// drops. (The bare group has no terminating hook, so its undrained terminations break invariant 2; that is
	// not what this test is about.)
	require.Empty(t, violationsOf(refreshAtMin100(t, sim.Options{}).Finish(), 1, "g"))

	// A model broken on purpose terminates first: each replacement leaves serving capacity one below desired
	// while it boots, and the checker says so at each termination.
	inv1 := violationsOf(refreshAtMin100(t, sim.Options{RefreshTerminatesFirst: true}).Finish(), 1, "g")
	require.NotEmpty(t, inv1)
	for _, v := range inv1 {
		require.Equal(t, "serving capacity 2 below desired 3", v.Detail)
	}
}

// heldScaleOut builds an ECS group "g" of 3 with a launching hook notifying a queue (the agent's), a checker
// holding the agent to healthTimeout, and an AMI that cannot serve: an autoscaler then raises
// desired capacity to desired, and the instances it asks for wait in Pending:Wait. It returns them.
func heldScaleOut(t *testing.T, desired int32, healthTimeout time.Duration) (*sim.Account, *checker.Checker, []string) {
	t.Helper()
	a := sim.New(testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)), sim.Options{})
	q := a.CreateQueue("hooks", 5, "hooks-dlq")
	lt := a.CreateLaunchTemplate("g-lt", testworld.ImageA, "m7g.large")
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "g", Min: 3, Max: 6, Desired: 3, LaunchTemplateID: lt, ECSCluster: "c1",
		Hooks: []sim.HookSpec{{Name: "launch", Transition: sim.TransitionLaunching, HeartbeatTimeout: time.Hour,
			DefaultResult: sim.ResultAbandon, QueueURL: q}}}))
	c := checker.NewChecker(a, map[string]int32{"g": 3})
	c.HealthTimeout, c.Queue = healthTimeout, q
	c.Start()
	old := map[string]bool{}
	for _, i := range a.Group("g").Instances {
		old[i.ID] = true
	}
	a.MarkImageUnhealthy(testworld.ImageA) // the instances already in service booted before
	require.NoError(t, a.SetDesiredCapacity("g", desired), "an autoscaler scales out")
	a.Advance(2 * time.Minute)
	var held []string
	for _, i := range a.Group("g").Instances {
		if !old[i.ID] {
			require.Equal(t, "Pending:Wait", i.LifecycleState)
			held = append(held, i.ID)
		}
	}
	require.Len(t, held, int(desired-3))
	return a, c, held
}

// heldRefreshLaunch is heldScaleOut's group with MaxSize max and no scale out: an instance refresh of the bad
// AMI (MinHealthyPercentage 100, MaxHealthyPercentage 134) launches one instance above desired capacity, which
// waits in Pending:Wait.
func heldRefreshLaunch(t *testing.T, max int32, healthTimeout time.Duration) (*sim.Account, *checker.Checker) {
	t.Helper()
	a := sim.New(testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)), sim.Options{})
	q := a.CreateQueue("hooks", 5, "hooks-dlq")
	lt := a.CreateLaunchTemplate("g-lt", testworld.ImageA, "m7g.large")
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "g", Min: 3, Max: max, Desired: 3, LaunchTemplateID: lt, ECSCluster: "c1",
		Hooks: []sim.HookSpec{{Name: "launch", Transition: sim.TransitionLaunching, HeartbeatTimeout: time.Hour,
			DefaultResult: sim.ResultAbandon, QueueURL: q}}}))
	c := checker.NewChecker(a, map[string]int32{"g": 3})
	c.HealthTimeout, c.Queue = healthTimeout, q
	c.Start()
	a.MarkImageUnhealthy(testworld.ImageA)
	_, err := a.AutoScaling().StartInstanceRefresh(context.Background(), &autoscaling.StartInstanceRefreshInput{
		AutoScalingGroupName: aws.String("g"),
		Preferences:          &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(134)}})
	require.NoError(t, err)
	lookEvery(t, a, c, 2*time.Minute)
	grp := a.Group("g")
	require.Len(t, grp.Instances, 4, "the refresh's launch above desired capacity")
	require.Equal(t, "Pending:Wait", grp.Instances[3].LifecycleState)
	return a, c
}

// abandon completes the launching action of instance id with ABANDON, as the agent does.
func abandon(t *testing.T, a *sim.Account, id string) {
	t.Helper()
	completeLaunch(t, a, id, sim.ResultAbandon)
}

func completeLaunch(t *testing.T, a *sim.Account, id, result string) {
	t.Helper()
	_, err := a.AutoScaling().CompleteLifecycleAction(context.Background(), &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String("launch"), InstanceId: aws.String(id),
		LifecycleActionResult: aws.String(result)})
	require.NoError(t, err)
}

// lookEvery steps the account by checkerTick for d, the checker looking after each step as a world does; at
// each step a launch healthy in its cluster is completed with CONTINUE, as the agent does.
func lookEvery(t *testing.T, a *sim.Account, c *checker.Checker, d time.Duration) {
	t.Helper()
	for end := a.Clock().Now().Add(d); a.Clock().Now().Before(end); {
		a.Advance(testworld.CheckerTick)
		for _, i := range a.Group("g").Instances {
			if i.LifecycleState == "Pending:Wait" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
				completeLaunch(t, a, i.ID, sim.ResultContinue)
			}
		}
		c.Check()
	}
}

func TestCheckerInvariant1OthersLaunchOfABadAMIWaitsForTheAgentsDecisionWithinItsDeadlines(t *testing.T) {
	t.Run("abandoned at the health deadline, the replacement serves", func(t *testing.T) {
		for _, healthTimeout := range []time.Duration{10 * time.Minute, 0} {
			a, c, held := heldScaleOut(t, 4, healthTimeout)
			raisedAt := a.Clock().Now().Add(-2 * time.Minute)
			lookEvery(t, a, c, 8*time.Minute)    // the health deadline of the launch that began waiting at 90 s
			a.MarkImageHealthy(testworld.ImageA) // the rollout halts: the group launches a good AMI again
			abandon(t, a, held[0])
			lookEvery(t, a, c, 3*time.Minute)
			require.Equal(t, 4, servingOf(a, "g"), "the replacement serves")
			inv1 := violationsOf(c.Finish(), 1, "g")
			if healthTimeout == 0 {
				// Without the agent's deadline the checker gives the autoscaler's instance its boot time only.
				require.Len(t, inv1, 1, "%v", inv1)
				require.Equal(t, raisedAt.Add(checker.OthersBootTime), inv1[0].At)
				continue
			}
			require.Empty(t, inv1, "the agent cannot make a bad AMI serve; it decided by its deadline")
		}
	})
	t.Run("the refresh's own launch stands for a raise to MaxSize", func(t *testing.T) {
		// A refresh's launch of the bad AMI above desired capacity waits; an autoscaler raises desired capacity
		// to MaxSize, which that instance already fills: Auto Scaling launches nothing more, and that instance
		// is the one the raise asked for.
		for _, healthTimeout := range []time.Duration{10 * time.Minute, 0} {
			a, c := heldRefreshLaunch(t, 4, healthTimeout)
			raisedAt := a.Clock().Now()
			require.NoError(t, a.SetDesiredCapacity("g", 4), "an autoscaler scales out to MaxSize")
			lookEvery(t, a, c, 8*time.Minute)
			require.Len(t, a.Group("g").Instances, 4, "no room for another launch")
			a.MarkImageHealthy(testworld.ImageA)
			for _, i := range a.Group("g").Instances {
				if i.LifecycleState == "Pending:Wait" {
					abandon(t, a, i.ID) // at its health deadline
				}
			}
			lookEvery(t, a, c, 4*time.Minute)
			require.Equal(t, 4, servingOf(a, "g"), "the replacement serves")
			inv1 := violationsOf(c.Finish(), 1, "g")
			if healthTimeout == 0 {
				require.Len(t, inv1, 1, "%v", inv1)
				require.Equal(t, raisedAt.Add(checker.OthersBootTime).Truncate(testworld.CheckerTick), inv1[0].At.Truncate(testworld.CheckerTick))
				continue
			}
			require.Empty(t, inv1)
		}
	})
	t.Run("the refresh's own launch stands for no ask beyond desired capacity", func(t *testing.T) {
		// The refresh's instance above desired capacity is the agent's: an agent that CONTINUEs the autoscaler's
		// launch of the bad AMI (it goes InService and never serves) is not excused by the refresh's own launch
		// still waiting.
		a, c := heldRefreshLaunch(t, 5, 10*time.Minute)
		raisedAt := a.Clock().Now()
		require.NoError(t, a.SetDesiredCapacity("g", 4), "an autoscaler scales out")
		lookEvery(t, a, c, 2*time.Minute)
		grp := a.Group("g")
		require.Len(t, grp.Instances, 5)
		completeLaunch(t, a, grp.Instances[4].ID, sim.ResultContinue)
		lookEvery(t, a, c, 5*time.Minute)
		inv1 := violationsOf(c.Finish(), 1, "g")
		require.Len(t, inv1, 1, "%v", inv1)
		require.Equal(t, raisedAt.Add(checker.OthersBootTime).Truncate(testworld.CheckerTick), inv1[0].At.Truncate(testworld.CheckerTick))
	})
	t.Run("held past the health deadline counts", func(t *testing.T) {
		a, c, _ := heldScaleOut(t, 4, 10*time.Minute)
		waiting := a.Clock().Now().Add(-30 * time.Second) // Pending for 90 s
		lookEvery(t, a, c, 12*time.Minute)
		inv1 := violationsOf(c.Finish(), 1, "g")
		require.Len(t, inv1, 1, "%v", inv1)
		require.Equal(t, "serving capacity 3 below desired 4", inv1[0].Detail)
		require.WithinRange(t, inv1[0].At, waiting.Add(10*time.Minute+checker.DecisionSlack), waiting.Add(10*time.Minute+checker.DecisionSlack+testworld.CheckerTick))
	})
	t.Run("held past the first ABANDON of the AMI counts", func(t *testing.T) {
		// The first ABANDON halts the rollout: every other launch of the AMI still held is abandoned at once.
		a, c, held := heldScaleOut(t, 5, 10*time.Minute)
		lookEvery(t, a, c, 4*time.Minute)
		first := a.Clock().Now()
		a.MarkImageHealthy(testworld.ImageA)
		abandon(t, a, held[0])
		lookEvery(t, a, c, 5*time.Minute)
		require.Equal(t, 4, servingOf(a, "g"), "the first one's replacement serves")
		inv1 := violationsOf(c.Finish(), 1, "g")
		require.Len(t, inv1, 1, "%v", inv1)
		require.WithinRange(t, inv1[0].At, first.Add(checker.DecisionSlack), first.Add(checker.DecisionSlack+testworld.CheckerTick))
	})
	t.Run("a replacement on the bad AMI again counts once its ask's boot time ran out", func(t *testing.T) {
		// The rollout is not halted: Auto Scaling's replacement of the abandoned launch lands on the bad AMI and
		// the agent abandons each at once, again and again.
		a, c, held := heldScaleOut(t, 4, 10*time.Minute)
		lookEvery(t, a, c, 8*time.Minute)
		first := a.Clock().Now()
		abandon(t, a, held[0])
		for range 12 {
			lookEvery(t, a, c, time.Minute)
			for _, i := range a.Group("g").Instances {
				if i.LifecycleState == "Pending:Wait" {
					abandon(t, a, i.ID)
				}
			}
		}
		inv1 := violationsOf(c.Finish(), 1, "g")
		require.NotEmpty(t, inv1)
		require.WithinRange(t, inv1[0].At, first.Add(checker.OthersBootTime), first.Add(checker.OthersBootTime+testworld.CheckerTick))
	})
}
