package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// fixture returns a testdata message with fields replaced (old -> new pairs).
func fixture(t *testing.T, name string, replace ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return strings.NewReplacer(replace...).Replace(string(b))
}

// settle runs the world for d of simulated time.
func settle(t *testing.T, w *testworld.World, d time.Duration) {
	t.Helper()
	_, err := w.RunUntil(context.Background(), tick, d, func() bool { return false })
	require.NoError(t, err)
}

func acceptedCompletions(w *testworld.World) map[string][]sim.Completion {
	out := map[string][]sim.Completion{}
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Accepted && c.Caller != "ecs" {
			out[c.Token] = append(out[c.Token], c)
		}
	}
	return out
}

// Field case C2 (../shared/CASES.md).
func TestC2TwoTerminateNotificationsInOneReceiveAreHandledEachOnItsOwn(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 3}
	spec := oneGroup(&g)
	w := build(t, spec)
	settle(t, w, 30*time.Second) // the agent sees the group Idle on its current AMI
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Account.Advance(time.Second) // both instances enter Terminating:Wait; two hook messages wait on the queue
	visible, _ := w.Account.QueueDepth(w.QueueURL)
	require.Equal(t, 2, visible)

	w.Checker.Baseline[g.Name] = 1
	for range 200 {
		require.NoError(t, w.Agent.RunOnce(context.Background()))
		completed := len(acceptedCompletions(w))
		visible, inFlight := w.Account.QueueDepth(w.QueueURL)
		// A message is deleted only after its own action is completed: never more deleted than completed.
		require.GreaterOrEqual(t, visible+inFlight, 2-completed)
		require.Empty(t, w.Checker.Check())
		if completed == 2 {
			break
		}
		w.Account.Advance(tick)
	}
	done := acceptedCompletions(w)
	require.Len(t, done, 2, "both lifecycle actions completed")
	for token, cs := range done {
		require.Len(t, cs, 1, "token %s completed once", token)
		require.Equal(t, sim.ResultContinue, cs[0].Result)
	}
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "both messages deleted once their own action was completed")
	require.Empty(t, w.Checker.Check(), "each instance drained before its action was completed")
	require.Equal(t, 6, w.Account.ServiceTasks("c1", "web"), "every task of the service still runs")
}

// Field case C3 (../shared/CASES.md).
func TestC3LifecycleActionForAnUnmanagedGroupOrUnknownInstanceIsDeletedAndIgnored(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 2, Desired: 1}
	w := build(t, oneGroup(&g))
	settle(t, w, 10*time.Second)
	ignoredBefore := w.Agent.Consumer.Stats.Ignored.Load()
	// A shared queue: another cluster's group (the fixture's group is not managed here).
	w.Account.SendMessage(w.QueueURL, fixture(t, "asg-hook-direct-terminating.json"))
	// A managed group, but an instance id that does not exist.
	w.Account.SendMessage(w.QueueURL, fixture(t, "asg-hook-direct-terminating.json",
		"ecs-prod-cluster-asg", g.Name, "5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13", "token-unknown-instance"))
	require.NoError(t, w.Agent.RunOnce(context.Background()))

	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "deleted promptly, never left to loop")
	require.Equal(t, ignoredBefore+2, w.Agent.Consumer.Stats.Ignored.Load())
	require.Zero(t, w.Agent.Consumer.Stats.Failed.Load())
	require.Empty(t, w.Account.LifecycleCompletions(), "nothing completed for actions that are not ours")
}

// Field case C4 (../shared/CASES.md).
func TestC4HeartbeatsKeepALongDrainAliveAndStopWhenItEnds(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2, HeartbeatTimeout: 300 * time.Second}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 200 * time.Second // three stop stages: tasks need 600 s to stop
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	done, err := w.RunUntil(context.Background(), tick, 2*time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done)
	settle(t, w, 30*time.Minute)

	var completion sim.Completion
	for _, cs := range acceptedCompletions(w) {
		completion = cs[0]
	}
	require.Equal(t, sim.ResultContinue, completion.Result)
	require.True(t, completion.Drained, "completed only once drained")
	beats := w.Account.Heartbeats()
	require.GreaterOrEqual(t, len(beats), 2, "a 600 s drain under a 300 s heartbeat timeout needs heartbeats")
	var action sim.Termination
	for _, term := range w.Account.Terminations() {
		if term.InstanceID == completion.InstanceID {
			action = term
		}
	}
	last := action.RequestedAt
	for _, b := range beats {
		require.True(t, b.Accepted)
		require.Less(t, b.At.Sub(last), 300*time.Second, "each heartbeat well before the timeout")
		last = b.At
		require.False(t, b.At.After(completion.At), "no heartbeat after the work ended")
	}
	require.Less(t, completion.At.Sub(last), 300*time.Second)
	require.Empty(t, w.Checker.Finish())
}

// Field case C5 (../shared/CASES.md).
func TestC5TerminateNotificationForAnAlreadyTerminatedInstanceIsDone(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2}
	w := build(t, oneGroup(&g))
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	_, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool { return len(w.Account.Group(g.Name).Instances) == 1 })
	require.NoError(t, err)
	settle(t, w, time.Minute)
	gone := w.Account.Terminations()[0].InstanceID
	inst, _ := w.Account.Instance(gone)
	require.Equal(t, "Terminated", inst.LifecycleState)
	before := len(w.Account.LifecycleCompletions())
	processed := w.Agent.Consumer.Stats.Processed.Load()

	// A late duplicate with a new token for the terminated instance.
	w.Account.SendMessage(w.QueueURL, fixture(t, "asg-hook-direct-terminating.json", "ecs-prod-cluster-asg", g.Name,
		"i-0a1b2c3d4e5f60718", gone, "5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13", "token-late"))
	require.NoError(t, w.Agent.RunOnce(context.Background()))
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight)
	require.Equal(t, processed+1, w.Agent.Consumer.Stats.Processed.Load())
	require.Zero(t, w.Agent.Consumer.Stats.Failed.Load())
	require.Len(t, w.Account.LifecycleCompletions(), before, "no completion attempted for a terminated instance")
	h, err := w.Store.GetHook(context.Background(), model.ActionKey(g.Name, gone, testworld.HookName))
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, h.State)
}

// Field case C6 (../shared/CASES.md).
func TestC6NoActiveLifecycleActionIsFinal(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2}
	spec := oneGroup(&g)
	// Auto Scaling's answer for a token that is no longer active (a duplicate delivery, an action completed
	// elsewhere or timed out). ResponseLost: the action is completed in the account as the answer says, so a
	// heartbeat is refused too, as real Auto Scaling would refuse it.
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "autoscaling:CompleteLifecycleAction", Every: 1,
		Codes: []string{"ValidationError"}, Message: "No active Lifecycle Action found with token", ResponseLost: true})
	completes := func() int { return spec.Faults.Stats().Calls["autoscaling:CompleteLifecycleAction"] }
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	w.Account.Advance(time.Second)
	msgs := w.Account.QueueMessages(w.QueueURL)
	require.Len(t, msgs, 1)
	ev, err := events.Parse([]byte(msgs[0]))
	require.NoError(t, err)

	_, err = w.RunUntil(context.Background(), tick, 10*time.Minute, func() bool { return completes() > 0 })
	require.NoError(t, err)
	settle(t, w, 10*time.Minute)
	require.Equal(t, 1, completes(), "the answer is final: no retry loop")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "message deleted")
	require.Zero(t, w.Agent.Consumer.Stats.Failed.Load(), "no error counted")
	h, err := w.Store.GetHook(context.Background(), model.ActionKey(ev.Lifecycle.GroupName, ev.Lifecycle.InstanceID, ev.Lifecycle.HookName))
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, h.State)
	require.Contains(t, h.Note, "no active lifecycle action")
}

// Field case C14 (../shared/CASES.md).
func TestC14ReplaceRootVolumeIsDrainedThenContinuedAndTheInstanceIsNotRetired(t *testing.T) {
	g := testworld.GroupSetup{Name: "my-asg", Min: 2, Max: 4, Desired: 2}
	w := build(t, oneGroup(&g))
	settle(t, w, 10*time.Second)
	target := w.Account.Group(g.Name).Instances[0]
	// An instance refresh with the ReplaceRootVolume strategy: the instance waits in ReplacingRootVolume:Wait
	// on the group's terminating hook (the hook's own message goes to the queue too), and EventBridge
	// delivers the action with "Action":"ReplaceRootVolume".
	tokens, err := w.Account.StartRootVolumeReplacement(target.ID)
	require.NoError(t, err)
	require.Len(t, tokens, 1)
	w.Account.SendMessage(w.QueueURL, fixture(t, "eventbridge-lifecycle-terminate-replace-root-volume.json",
		"i-1234567890abcdef0", target.ID, "71514b9d-6a40-4b26-8523-05e7eEXAMPLE", tokens[0],
		"my-terminate-lifecycle-hook", testworld.HookName))
	var calls []sim.Completion
	_, err = w.RunUntil(context.Background(), tick, 10*time.Minute, func() bool {
		calls = nil
		for _, c := range w.Account.LifecycleCompletions() {
			if c.Token == tokens[0] {
				calls = append(calls, c)
			}
		}
		return len(calls) > 0
	})
	require.NoError(t, err)
	require.Len(t, calls, 1, "completed exactly once")
	require.Equal(t, sim.ResultContinue, calls[0].Result)
	require.True(t, calls[0].Drained, "its tasks left before the root volume swap")
	at, ok := w.Account.Instance(target.ID)
	require.True(t, ok)
	require.Equal(t, "DRAINING", at.ContainerInstanceStatus, "its tasks left before the root volume swap")
	settle(t, w, 10*time.Minute)

	after, ok := w.Account.Instance(target.ID)
	require.True(t, ok)
	require.Equal(t, "InService", after.LifecycleState, "the instance is not going away")
	require.Equal(t, "ACTIVE", after.ContainerInstanceStatus, "back with its new root volume, it is put back in service")
	require.NotContains(t, w.Rollout(context.Background(), g.Name).Replaced, target.ID)
	h, err := w.Store.GetHook(context.Background(), model.ActionKey(calls[0].Group, calls[0].InstanceID, calls[0].Hook))
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, h.State)
	require.Len(t, acceptedCompletions(w)[tokens[0]], 1, "and completed exactly once in all")
}

func TestDuplicateDeliveryOfALifecycleActionHasOneEffect(t *testing.T) {
	g := testworld.GroupSetup{Name: "ecs-prod-cluster-asg", Min: 1, Max: 3, Desired: 2}
	w := build(t, oneGroup(&g))
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	w.Account.Advance(time.Second)
	msgs := w.Account.QueueMessages(w.QueueURL)
	require.Len(t, msgs, 1)
	// The same action again, directly and wrapped in SNS, as retries and fan-out deliver it.
	w.Account.SendMessage(w.QueueURL, msgs[0])
	settle(t, w, 20*time.Minute)
	done := acceptedCompletions(w)
	require.Len(t, done, 1)
	calls := 0
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Caller == sim.CallerAPI {
			calls++
		}
	}
	require.Equal(t, 1, calls, "CompleteLifecycleAction called once for the token")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight)
}

func TestPassingAWSFaultsDuringADrainKeepTheMessageHeldNotDeadLettered(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:ListTasks", Every: 1, Max: 12, Codes: []string{sim.FaultThrottlingException}})
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	done, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "the drain finished despite the faults")
	settle(t, w, time.Minute)
	require.Equal(t, 12, spec.Faults.Stats().Injected["ecs:ListTasks"], "the faults happened")
	require.Positive(t, w.Agent.Consumer.Stats.Failed.Load())
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight)
	dlqVisible, _ := w.Account.QueueDepth(strings.Replace(w.QueueURL, testworld.QueueName, testworld.QueueName+"-dlq", 1))
	require.Zero(t, dlqVisible, "a passing fault never walks a lifecycle action to the dead-letter queue")
	require.Empty(t, w.Checker.Finish())
}

func TestGroupWithoutATerminatingHookIsReported(t *testing.T) {
	with := testworld.GroupSetup{Name: "hooked", Cluster: "c1", Parameter: "/golden/x", Min: 1, Max: 2, Desired: 1}
	without := testworld.GroupSetup{Name: "bare", Cluster: "c1", Parameter: "/golden/x", Min: 1, Max: 2, Desired: 1, HeartbeatTimeout: -1}
	w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{with, without}})
	require.NoError(t, w.Agent.RunOnce(context.Background()))
	require.Empty(t, w.Agent.HookProblem("hooked"))
	require.Contains(t, w.Agent.HookProblem("bare"), "no terminating lifecycle hook")
	require.Contains(t, w.Rollout(context.Background(), "bare").Warning, "no terminating lifecycle hook", "status shows it")
	require.Empty(t, withoutDeprecationNote(w.Rollout(context.Background(), "hooked").Warning))
}

// withoutDeprecationNote is a record's warning without the deprecation note of a deprecated patch-agent/strategy,
// which the test world's groups without the launching hook carry (testworld.Build pins their strategy).
func withoutDeprecationNote(warning string) string {
	var kept []string
	for _, w := range strings.Split(warning, "; ") {
		if w != "" && !strings.HasPrefix(w, "tag "+model.TagStrategy+"=") {
			kept = append(kept, w)
		}
	}
	return strings.Join(kept, "; ")
}

// A refresh whose drains can never be checked (ListTasks never answers again): the terminating action of the
// first old instance is heartbeaten while its drain is unknown and held at the drain deadline (30m, field case
// C9), not kept draining until Auto Scaling's global timeout and not retried forever: the instance is back in
// service, the action heartbeated and never completed, one alert says held, and the rollout halts without a
// rollback within a tick or two.
func TestDrainDeadlineHoldsWhenTheDrainCannotBeCheckedAnyMore(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:ListTasks", Every: 1, Codes: []string{sim.FaultThrottlingException}}) // never answers again
	w := buildAlerting(t, spec, g)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	r := runTo(t, w.World, 2*time.Hour, "the rollout halts instead of retrying forever", func(r state.Rollout) bool { return r.Phase == state.PhaseHalted }, g.Name)
	haltedAt := w.Account.Clock().Now()
	require.Contains(t, r.Reason, "drain status unknown")
	require.Positive(t, spec.Faults.Stats().Injected["ecs:ListTasks"], "the drain checks failed")

	rec := requireDrainHeld(t, w, 30*time.Minute)
	var requested time.Time
	for _, tm := range w.Account.Terminations() {
		if tm.InstanceID == rec.InstanceID {
			requested = tm.RequestedAt
		}
	}
	require.False(t, requested.IsZero(), rec.InstanceID)
	held := rec.DrainHeldAt.Sub(requested)
	t.Logf("%s held %s after its termination, rollout halted %s later", rec.InstanceID, held, haltedAt.Sub(rec.DrainHeldAt))
	require.GreaterOrEqual(t, held, 30*time.Minute, "%s: drained until the drain deadline, the drain being unknown", rec.InstanceID)
	require.LessOrEqual(t, held, 30*time.Minute+2*tick, "%s: held at the drain deadline", rec.InstanceID)
	require.LessOrEqual(t, haltedAt.Sub(rec.DrainHeldAt), 2*tick, "the rollout halts at the hold")
	require.NotEmpty(t, heartbeatsOf(w.World, rec.InstanceID, requested, rec.DrainHeldAt), "heartbeats kept the action alive until then")
	requireNoCapacityWrites(t, w.World, g.Name)
}

func TestMisconfiguredGroupsLifecycleActionsAreStillDrained(t *testing.T) {
	// A tag typo makes the group impossible to roll, but scale-in must still drain before terminating.
	g := testworld.GroupSetup{Name: "typo", Min: 1, Max: 3, Desired: 2, Tags: map[string]string{model.TagMinAMIAge: "7d"}}
	w := build(t, oneGroup(&g))
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	done, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "the action was completed, not dropped")
	for _, cs := range acceptedCompletions(w) {
		require.True(t, cs[0].Drained, "completed only once drained")
	}
	require.Empty(t, w.Checker.Finish())
}

func TestAStepThatKeepsFailingShowsItsErrorOnTheStatus(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	// A task role without the permission.
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "autoscaling:StartInstanceRefresh", Every: 1, Codes: []string{"AccessDenied"},
		Message: "User is not authorized to perform: autoscaling:StartInstanceRefresh"})
	w := build(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	settle(t, w, 10*time.Minute)
	r := w.Rollout(ctx, g.Name)
	require.Contains(t, r.Reason, "retrying after an error")
	require.Contains(t, r.Reason, "not authorized to perform: autoscaling:StartInstanceRefresh")
	require.Less(t, r.Steps, 10, "written once, not every tick")
	require.Equal(t, 2, w.Account.LaunchedInstances(g.Name), "nothing launched")
}

func TestHookDrainDeadlineHoldsWhenTheDrainCannotBeChecked(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:ListTasks", Every: 1, Codes: []string{sim.FaultThrottlingException}}) // never answers again
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	done, err := w.RunUntil(context.Background(), tick, 2*time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "completed at the drain deadline, not held until Auto Scaling's global timeout")
	for _, cs := range acceptedCompletions(w) {
		require.Equal(t, sim.ResultContinue, cs[0].Result)
		require.Less(t, cs[0].At.Sub(w.Account.Terminations()[0].RequestedAt), 40*time.Minute)
	}
	require.NotEmpty(t, w.Account.Heartbeats(), "heartbeats kept the action alive until then")
}
