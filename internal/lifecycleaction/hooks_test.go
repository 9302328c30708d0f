package lifecycleaction

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Invariants 2 and 4: a terminating action's instance is set DRAINING first, the action waits while its work
// runs, and only once the drain ends is it completed with CONTINUE, by instance and hook, once.
func TestTerminatingActionIsCompletedWithCONTINUEOnlyAfterItsInstanceIsDrained(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")

	r.handleFor(t, a, 2*time.Minute, 30*time.Second)
	require.Equal(t, []string{"i-1"}, r.platform.started, "set DRAINING once")
	require.Empty(t, r.as.completes, "no CONTINUE while the drain runs")
	rec := r.record(t, "i-1", drainHook)
	require.Equal(t, state.HookDraining, rec.State)
	require.True(t, rec.AgentDrained)

	r.platform.drained["i-1"] = true
	require.Equal(t, HookDone, r.handle(t, a))
	require.Len(t, r.as.completes, 1)
	c := r.as.completes[0]
	require.Equal(t, model.ResultContinue, aws.ToString(c.LifecycleActionResult))
	require.Equal(t, "prod", aws.ToString(c.AutoScalingGroupName))
	require.Equal(t, drainHook, aws.ToString(c.LifecycleHookName))
	require.Equal(t, "i-1", aws.ToString(c.InstanceId))
	rec = r.record(t, "i-1", drainHook)
	require.Equal(t, state.HookCompleted, rec.State)
	require.Equal(t, model.ResultContinue, rec.Result)
	require.Len(t, r.spy.completed, 1)

	// A late copy of the message completes nothing more.
	require.Equal(t, HookDone, r.handle(t, a))
	require.Len(t, r.as.completes, 1)
}

// A launching action whose instance never becomes healthy in its cluster is completed with ABANDON at the
// health deadline, so Auto Scaling replaces it; until then it is heartbeated and left waiting.
func TestLaunchingActionNotHealthyByTheHealthDeadlineIsCompletedWithABANDON(t *testing.T) {
	r := newRig(t)
	r.as.place("i-2", "prod", astypes.LifecycleStatePendingWait)
	r.ec2.run("i-2", "ami-new")
	a := events.LifecycleAction{GroupName: "prod", HookName: launchHook, InstanceID: "i-2", Token: "tok-i-2", Transition: events.TransitionLaunching}

	r.handleFor(t, a, 10*time.Minute, 30*time.Second)
	require.Empty(t, r.as.completes)
	require.NotEmpty(t, r.as.heartbeats, "heartbeated while it waits for health")
	require.Equal(t, HookDone, r.handle(t, a))
	require.Equal(t, []string{model.ResultAbandon}, r.as.results("i-2"))
	rec := r.record(t, "i-2", launchHook)
	require.Equal(t, state.HookCompleted, rec.State)
	require.Equal(t, model.ResultAbandon, rec.Result)
}

// A launching action whose instance is healthy in its cluster is completed with CONTINUE at once.
func TestLaunchingActionHealthyInItsClusterIsCompletedWithCONTINUE(t *testing.T) {
	r := newRig(t)
	r.as.place("i-2", "prod", astypes.LifecycleStatePendingWait)
	r.ec2.run("i-2", "ami-new")
	r.platform.healthy["i-2"] = true
	a := events.LifecycleAction{GroupName: "prod", HookName: launchHook, InstanceID: "i-2", Token: "tok-i-2", Transition: events.TransitionLaunching}

	require.Equal(t, HookDone, r.handle(t, a))
	require.Equal(t, []string{model.ResultContinue}, r.as.results("i-2"))
	require.Equal(t, model.ResultContinue, r.record(t, "i-2", launchHook).Result)
}

// Invariant 9, field case C19: a lifecycle message DescribeAutoScalingInstances does not confirm (the instance
// is InService, not in Terminating:Wait) drains nothing, completes nothing and is rejected with its reason.
func TestLifecycleMessageAutoScalingDoesNotConfirmDrainsNothingAndIsRejected(t *testing.T) {
	r := newRig(t)
	r.as.place("i-1", "prod", astypes.LifecycleStateInService)
	r.ec2.run("i-1", "ami-old")
	a := events.LifecycleAction{GroupName: "prod", HookName: drainHook, InstanceID: "i-1", Token: "forged", Transition: events.TransitionTerminating}

	require.Equal(t, HookIgnored, r.handle(t, a))
	require.Empty(t, r.platform.started, "nothing set DRAINING")
	require.Empty(t, r.as.completes)
	require.Empty(t, r.as.heartbeats)
	require.Len(t, r.spy.rejected, 1)
	require.Equal(t, model.RejectLifecycleState, r.spy.rejected[0].Reason)

	// An instance in another group is rejected too.
	r.as.place("i-3", "other", astypes.LifecycleStateTerminatingWait)
	b := events.LifecycleAction{GroupName: "prod", HookName: drainHook, InstanceID: "i-3", Token: "forged-2", Transition: events.TransitionTerminating}
	require.Equal(t, HookIgnored, r.handle(t, b))
	require.Empty(t, r.platform.started)
	require.Equal(t, model.RejectInstanceNotInGroup, r.spy.rejected[1].Reason)
}

// Field case C4: a drain longer than the hook's HeartbeatTimeout is kept alive by a heartbeat every third of
// the timeout (300 s: every 100 s), each recorded on the action's record.
func TestLongDrainIsHeartbeatedEveryThirdOfTheHeartbeatTimeout(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")

	r.handleFor(t, a, 9*time.Minute, 10*time.Second)
	// Heartbeats due at 100 s, 200 s, ... 500 s after the action was recorded: 5 in 9 minutes.
	require.Len(t, r.as.heartbeats, 5)
	for _, hb := range r.as.heartbeats {
		require.Equal(t, "i-1", aws.ToString(hb.InstanceId))
		require.Equal(t, drainHook, aws.ToString(hb.LifecycleHookName))
	}
	rec := r.record(t, "i-1", drainHook)
	require.Equal(t, t0.Add(500*time.Second), rec.LastHeartbeat)
	require.Empty(t, r.as.completes)
}

// Field case C19: a message naming a terminating action in progress (its instance and hook) with the LAUNCHING
// transition is confirmed on its own and rejected: the record goes on draining, and the real action is neither
// completed nor undrained for it.
func TestLaunchingMessageForATerminatingActionInProgressIsRejectedAndTheDrainGoesOn(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Equal(t, []string{"i-1"}, r.platform.started)
	r.platform.healthy["i-1"] = true // a launching look would find it healthy and complete the action
	r.clock.Step(30 * time.Second)

	forged := a
	forged.Token, forged.Transition = "forged", events.TransitionLaunching
	require.Equal(t, HookIgnored, r.handle(t, forged))
	require.Empty(t, r.as.completes, "the real action is not completed for the forged message")
	require.Empty(t, r.platform.undrained)
	rec := r.record(t, "i-1", drainHook)
	require.Equal(t, state.HookDraining, rec.State)
	require.Equal(t, events.TransitionTerminating, rec.Transition)
	require.Len(t, r.spy.rejected, 1)

	// The drain goes on and ends with CONTINUE.
	r.platform.drained["i-1"] = true
	require.Equal(t, HookDone, r.handle(t, a))
	require.Equal(t, []string{model.ResultContinue}, r.as.results("i-1"))
}

// Invariant 3: the drains of an instance refresh's terminating actions take slots of the per-cluster budget;
// with a budget of 1 the second instance of the cluster waits undrained (heartbeated) until the first is done.
func TestRefreshTerminationsDrainOneAtATimeUnderAClusterBudgetOfOne(t *testing.T) {
	r := newRig(t)
	r.hooks.Policy.ClusterBudget = 1
	r.refreshing(t)
	a, b := r.terminating("i-1"), r.terminating("i-2")

	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Equal(t, HookInProgress, r.handle(t, b))
	require.Equal(t, []string{"i-1"}, r.platform.started, "i-2 waits for a slot")
	r.clock.Step(2 * time.Minute)
	require.Equal(t, HookInProgress, r.handle(t, b))
	require.Equal(t, []string{"i-1"}, r.platform.started)
	require.False(t, r.record(t, "i-2", drainHook).AgentDrained)

	r.platform.drained["i-1"] = true
	require.Equal(t, HookDone, r.handle(t, a))
	require.Equal(t, HookInProgress, r.handle(t, b))
	require.Equal(t, []string{"i-1"}, r.platform.started, "i-2 was checked less than LookEvery ago")
	r.clock.Step(LookEvery)
	require.Equal(t, HookInProgress, r.handle(t, b))
	require.Equal(t, []string{"i-1", "i-2"}, r.platform.started, "i-2 drains once i-1's slot frees")
}

// A held action's message comes back on every receive of the queue: its drain is checked at most every
// LookEvery, and the heartbeat that falls due between two checks is sent on the handling that sees it due (C4).
func TestADrainIsCheckedAtMostEveryLookEveryAndHeartbeatedWhenDueBetweenChecks(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Equal(t, []string{"i-1"}, r.platform.started)
	checks := r.platform.statuses
	for range 14 {
		r.clock.Step(time.Second)
		require.Equal(t, HookInProgress, r.handle(t, a))
	}
	require.Equal(t, checks, r.platform.statuses, "no drain check within LookEvery of the last")
	r.clock.Step(time.Second)
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Equal(t, checks+1, r.platform.statuses, "checked again LookEvery after the last")

	// The heartbeat is due 100 s (a third of 300 s) after the action began; the check before it was at 90 s.
	r.clock.SetTime(t0.Add(90 * time.Second))
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Empty(t, r.as.heartbeats)
	r.clock.SetTime(t0.Add(101 * time.Second))
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Len(t, r.as.heartbeats, 1, "due between two checks: sent without a check")
	require.Equal(t, checks+2, r.platform.statuses)

	// A drain that finished is found at the next check, not before.
	r.platform.drained["i-1"] = true
	r.clock.SetTime(t0.Add(104 * time.Second))
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Empty(t, r.as.completes)
	r.clock.SetTime(t0.Add(105 * time.Second))
	require.Equal(t, HookDone, r.handle(t, a))
	require.Equal(t, []string{model.ResultContinue}, r.as.results("i-1"))
}

// Auto Scaling's confirmation of an action (its instance in the wait state) counts as the first look at its
// instance: EC2 is asked whether the instance went away (C3, C5) a minute after it, not at the next look.
func TestTheConfirmationOfAnActionIsItsFirstInstanceCheck(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")
	require.Equal(t, HookInProgress, r.handle(t, a))
	r.clock.Step(LookEvery)
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Zero(t, r.ec2.describes, "confirmed by Auto Scaling less than a minute ago")
	r.clock.Step(instanceCheckEvery - LookEvery)
	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Equal(t, 1, r.ec2.describes, "a minute after the confirmation")

	// An instance gone since the confirmation is found at that check: the action is closed, nothing drained on.
	b := r.terminating("i-2")
	require.Equal(t, HookInProgress, r.handle(t, b))
	delete(r.ec2.instances, "i-2")
	r.clock.Step(instanceCheckEvery)
	require.Equal(t, HookIgnored, r.handle(t, b))
}

// Field case C9: a drain of the agent's instance refresh undrained at its deadline is held, not continued: the
// instance is put back in service, the hold recorded, one DrainDeadline alert sent, and no CONTINUE sent.
func TestDrainOfTheRefreshUndrainedAtItsDeadlineIsHeldNotContinued(t *testing.T) {
	r := newRig(t)
	r.refreshing(t)
	a := r.terminating("i-1")

	r.handleFor(t, a, 10*time.Minute, 30*time.Second)
	require.Empty(t, r.platform.undrained)
	require.Equal(t, HookInProgress, r.handle(t, a), "held at the deadline")
	require.Empty(t, r.as.completes, "no CONTINUE")
	require.Equal(t, []string{"i-1"}, r.platform.undrained, "back in service")
	rec := r.record(t, "i-1", drainHook)
	require.False(t, rec.DrainHeldAt.IsZero())
	require.NotEqual(t, state.HookCompleted, rec.State)
	require.Len(t, r.spy.alerts, 1)
	require.Equal(t, model.AlertDrainDeadline, r.spy.alerts[0].Kind)
	require.Contains(t, r.spy.alerts[0].Detail, "i-1: held:")
}

// Outside a refresh (a scale in) the drain deadline continues the action with CONTINUE and an alert.
func TestDrainOutsideARefreshIsCompletedWithCONTINUEAtItsDeadline(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")

	r.handleFor(t, a, 10*time.Minute, 30*time.Second)
	require.Equal(t, HookDone, r.handle(t, a))
	require.Equal(t, []string{model.ResultContinue}, r.as.results("i-1"))
	require.Empty(t, r.platform.undrained)
	require.Len(t, r.spy.alerts, 1)
	require.Equal(t, model.AlertDrainDeadline, r.spy.alerts[0].Kind)
}

// Hook ownership (C17, C19): an action on another tool's hook (it notifies another queue) is left waiting for
// that tool: nothing drained, heartbeated or completed, rejected as ForeignHook; the agent's own hook still drains.
func TestActionOfAnotherToolsHookIsLeftWaitingAndTheAgentsOwnHookStillDrains(t *testing.T) {
	r := newRig(t)
	r.as.hook("prod", "nth-drain", events.TransitionTerminating, 300, "arn:aws:sqs:eu-west-1:111122223333:nth-queue")
	a := r.terminating("i-1")
	foreign := a
	foreign.HookName, foreign.Token = "nth-drain", "tok-nth"

	require.Equal(t, HookIgnored, r.handle(t, foreign))
	require.Empty(t, r.platform.started)
	require.Empty(t, r.as.completes)
	require.Empty(t, r.as.heartbeats)
	require.Len(t, r.spy.rejected, 1)
	require.Equal(t, model.RejectForeignHook, r.spy.rejected[0].Reason)

	require.Equal(t, HookInProgress, r.handle(t, a))
	require.Equal(t, []string{"i-1"}, r.platform.started)
}

// discovered is the tick's view of prod: its instances in the given lifecycle states.
func (r *rig) discovered(states map[string]astypes.LifecycleState) providers.Discovered {
	g := astypes.AutoScalingGroup{AutoScalingGroupName: aws.String("prod"), MinSize: aws.Int32(0), MaxSize: aws.Int32(3), DesiredCapacity: aws.Int32(int32(len(states)))}
	for id, st := range states {
		g.Instances = append(g.Instances, astypes.Instance{InstanceId: aws.String(id), LifecycleState: st})
	}
	return providers.Discovered{Targets: map[string]model.Target{"prod": r.target}, Groups: map[string]astypes.AutoScalingGroup{"prod": g}}
}

// Invariants 2 and 4: a terminating action whose message was lost is taken up by the reconcile loop once seen
// waiting for AdoptAfter (a third of the 300 s timeout, at most a minute): drained, heartbeated at once, and
// completed with CONTINUE once drained; its late message drains nothing more.
func TestLifecycleActionWaitingWithoutItsMessageIsTakenUpDrainedAndCompleted(t *testing.T) {
	r := newRig(t)
	a := r.terminating("i-1")
	d := r.discovered(map[string]astypes.LifecycleState{"i-1": astypes.LifecycleStateTerminatingWait})
	ctx := context.Background()

	r.hooks.AdoptWaiting(ctx, d)
	require.Empty(t, r.platform.started, "first sighting: its message may still come")
	r.clock.Step(61 * time.Second)
	r.hooks.AdoptWaiting(ctx, d)
	require.Equal(t, []string{"i-1"}, r.platform.started, "taken up and set DRAINING")
	rec := r.record(t, "i-1", drainHook)
	require.True(t, rec.Adopted)
	require.True(t, rec.Confirmed)
	require.NotEmpty(t, r.as.heartbeats, "an adopted action is heartbeated at once")

	r.platform.drained["i-1"] = true
	r.clock.Step(30 * time.Second)
	r.hooks.AdoptWaiting(ctx, d)
	require.Equal(t, []string{model.ResultContinue}, r.as.results("i-1"))
	require.Equal(t, state.HookCompleted, r.record(t, "i-1", drainHook).State)

	require.Equal(t, HookDone, r.handle(t, a), "the late message")
	require.Equal(t, []string{"i-1"}, r.platform.started)
	require.Len(t, r.as.completes, 1)
}

// Invariant 6: the reconcile loop never takes over a message-driven action while another replica's claim on it
// is live and its heartbeat not overdue: nothing drained, heartbeated, completed or written.
func TestLiveOwnersLifecycleActionIsNeverTakenOverByTheReconcileLoop(t *testing.T) {
	r := newRig(t)
	r.terminating("i-1")
	ctx := context.Background()
	rec := state.Hook{Token: model.ActionKey("prod", "i-1", drainHook), Group: "prod", HookName: drainHook, InstanceID: "i-1",
		Transition: events.TransitionTerminating, State: state.HookDraining, ReceivedAt: t0, Confirmed: true,
		WaitState: string(astypes.LifecycleStateTerminatingWait)}
	rec = rec.WithLease(state.LeaseRule{}.Claim("other", t0))
	rec, err := r.store.PutHook(ctx, rec)
	require.NoError(t, err)
	d := r.discovered(map[string]astypes.LifecycleState{"i-1": astypes.LifecycleStateTerminatingWait})

	for range 3 {
		r.hooks.AdoptWaiting(ctx, d)
		r.clock.Step(30 * time.Second)
	}
	require.Empty(t, r.platform.started)
	require.Empty(t, r.as.heartbeats)
	require.Empty(t, r.as.completes)
	got := r.record(t, "i-1", drainHook)
	require.Equal(t, "other", got.Owner)
	require.False(t, got.Adopted)
	require.Equal(t, rec.Version, got.Version)
}

// failCompletedWrite fails the first write of a completed lifecycle action record: the agent dies between
// Auto Scaling's acceptance of CompleteLifecycleAction and the record of it.
type failCompletedWrite struct {
	state.Store
	failed bool
}

func (s *failCompletedWrite) PutHook(ctx context.Context, h state.Hook) (state.Hook, error) {
	if h.State == state.HookCompleted && !s.failed {
		s.failed = true
		return h, errors.New("the agent died before this write")
	}
	return s.Store.PutHook(ctx, h)
}

// launchLosingItsCompletionRecord is a rig whose store fails the first write of a completed record (the agent
// dies right after Auto Scaling accepted the completion), and the launching action of i-2 waiting in it.
func launchLosingItsCompletionRecord(t *testing.T) (*rig, events.LifecycleAction) {
	r := newRig(t)
	r.hooks.Store = &failCompletedWrite{Store: r.store}
	r.as.place("i-2", "prod", astypes.LifecycleStatePendingWait)
	r.ec2.run("i-2", "ami-new")
	return r, events.LifecycleAction{GroupName: "prod", HookName: launchHook, InstanceID: "i-2", Token: "tok-i-2", Transition: events.TransitionLaunching}
}

// A launch ABANDONed at its health deadline whose completion record is lost (the agent died right after Auto
// Scaling accepted the ABANDON): the next incarnation's call is answered "no active lifecycle action", and the
// record still says what the agent decided and why — the verdict the instance refresh halts on — though its
// Result stays empty (this incarnation's call applied nothing).
func TestLaunchABANDONedJustBeforeACrashKeepsItsVerdictInTheRecord(t *testing.T) {
	r, a := launchLosingItsCompletionRecord(t)
	r.handleFor(t, a, 10*time.Minute, 30*time.Second)
	_, err := r.hooks.Handle(context.Background(), r.target, a)
	require.Error(t, err, "the completion's record was not written")
	require.Equal(t, []string{model.ResultAbandon}, r.as.results("i-2"), "Auto Scaling accepted the ABANDON")

	r.restart()
	require.Equal(t, HookDone, r.handle(t, a))
	require.Len(t, r.as.completes, 1, "nothing more applied")
	rec := r.record(t, "i-2", launchHook)
	require.Equal(t, state.HookCompleted, rec.State)
	require.Empty(t, rec.Result, "this incarnation's call applied nothing")
	require.Equal(t, model.ResultAbandon, rec.Decided)
	require.Contains(t, rec.Note, "not healthy")
}

// setHook changes prod's hook name in the fake account after the agent read it.
func (r *rig) setHook(name string, change func(*astypes.LifecycleHook)) {
	for i := range r.as.hooks["prod"] {
		if aws.ToString(r.as.hooks["prod"][i].LifecycleHookName) == name {
			change(&r.as.hooks["prod"][i])
		}
	}
}

// The first look at a new lifecycle action reads the group's hooks afresh, even a minute after the hook check
// read them: the agent's hook pointed at another tool's queue since is left to that tool (not drained), and
// another tool's hook pointed at the agent since is the agent's.
func TestFirstLookAtAnActionReadsWhoseItsHookIsAfresh(t *testing.T) {
	own := model.HookOwnership{QueueURL: agentQueue}
	t.Run("handed to another tool", func(t *testing.T) {
		r := newRig(t)
		_, err := r.hooks.CheckOwnedHooks(context.Background(), "prod", 10*time.Minute, own)
		require.NoError(t, err)
		r.setHook(drainHook, func(h *astypes.LifecycleHook) {
			h.NotificationTargetARN = aws.String("arn:aws:sqs:eu-west-1:111122223333:nth-queue")
		})
		r.clock.Step(time.Minute)
		require.Equal(t, HookIgnored, r.handle(t, r.terminating("i-1")))
		require.Empty(t, r.platform.started, "another tool's action drained")
	})
	t.Run("handed to the agent", func(t *testing.T) {
		r := newRig(t)
		r.setHook(drainHook, func(h *astypes.LifecycleHook) {
			h.NotificationTargetARN = aws.String("arn:aws:sqs:eu-west-1:111122223333:nth-queue")
		})
		_, err := r.hooks.CheckOwnedHooks(context.Background(), "prod", 10*time.Minute, own)
		require.NoError(t, err)
		r.setHook(drainHook, func(h *astypes.LifecycleHook) { h.NotificationTargetARN = nil })
		r.clock.Step(time.Minute)
		require.Equal(t, HookInProgress, r.handle(t, r.terminating("i-1")))
		require.Equal(t, []string{"i-1"}, r.platform.started)
	})
}

// Field case C4 on the message path: a stack update lowers the hook's HeartbeatTimeout from 3600 s to 60 s a
// minute after the hook check read it; the new action's heartbeats follow the 60 s (a third of it apart), not
// the cached hour, so Auto Scaling's timeout never runs out on an undrained instance.
func TestC4HeartbeatTimeoutLoweredAfterTheHookCheckIsReadOnTheActionsFirstLook(t *testing.T) {
	r := newRig(t)
	r.as.hooks["prod"] = nil
	r.as.hook("prod", drainHook, events.TransitionTerminating, 3600, "")
	r.as.hook("prod", launchHook, events.TransitionLaunching, 300, "")
	_, err := r.hooks.CheckOwnedHooks(context.Background(), "prod", 10*time.Minute, model.HookOwnership{QueueURL: agentQueue})
	require.NoError(t, err)
	r.setHook(drainHook, func(h *astypes.LifecycleHook) { h.HeartbeatTimeout = aws.Int32(60) })
	r.clock.Step(time.Minute)
	r.handleFor(t, r.terminating("i-1"), 3*time.Minute, 10*time.Second)
	require.GreaterOrEqual(t, len(r.as.heartbeats), 3, "heartbeated at the 60 s timeout's cadence")
}

// A launch CONTINUEd while healthy whose completion record is lost (the agent died right after Auto Scaling
// accepted the CONTINUE), and whose instance is not healthy when the next incarnation looks after the health
// deadline: Auto Scaling applied CONTINUE, so the record must not say the agent ABANDONed it.
func TestLaunchCONTINUEdJustBeforeACrashIsNotRecordedAsAbandoned(t *testing.T) {
	r, a := launchLosingItsCompletionRecord(t)
	r.handleFor(t, a, 9*time.Minute, 30*time.Second)
	r.platform.healthy["i-2"] = true
	_, err := r.hooks.Handle(context.Background(), r.target, a)
	require.Error(t, err, "the completion's record was not written")
	require.Equal(t, []string{model.ResultContinue}, r.as.results("i-2"), "Auto Scaling accepted the CONTINUE")

	// The agent is away past the health deadline; the instance's ECS agent disconnects meanwhile.
	r.clock.Step(2 * time.Minute)
	r.platform.healthy["i-2"] = false
	r.restart()
	require.Equal(t, HookDone, r.handle(t, a))
	rec := r.record(t, "i-2", launchHook)
	require.Equal(t, state.HookCompleted, rec.State)
	require.NotEqual(t, model.ResultAbandon, rec.Decided, "note: %s", rec.Note)
}
