package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/lifecycleaction"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// alertSpy records the alerts it is told.
type alertSpy struct{ alerts []model.Alert }

func (*alertSpy) RolloutTransition(state.Rollout, state.Rollout, string)                          {}
func (*alertSpy) TargetObserved(model.Target, model.GroupView, state.Rollout, *model.ResolvedAMI) {}
func (*alertSpy) LifecycleActionCompleted(state.Hook, time.Duration)                              {}
func (*alertSpy) LifecycleMessageRejected(model.Rejection)                                        {}
func (s *alertSpy) Alert(a model.Alert)                                                           { s.alerts = append(s.alerts, a) }
func (s *alertSpy) count(kind string) (n int) {
	for _, a := range s.alerts {
		if a.Kind == kind {
			n++
		}
	}
	return n
}

// holdWorld is one instance of group prod (simulated account, terminating hook patch-agent-drain with a 300 s
// heartbeat timeout) in Terminating:Wait, and the agent's Hooks over it with a platform whose drain never ends
// (a PodDisruptionBudget refuses every eviction).
type holdWorld struct {
	acct     *sim.Account
	hooks    *lifecycleaction.Hooks
	platform *fakePlatform
	spy      *alertSpy
	store    *state.Memory
	target   model.Target
	action   events.LifecycleAction
}

func newHoldWorld(t *testing.T) *holdWorld {
	t.Helper()
	acct := sim.New(clocktesting.NewFakeClock(now0), sim.Options{})
	lt := acct.CreateLaunchTemplate("prod", amiOld, "m5.large")
	require.NoError(t, acct.CreateGroup(sim.GroupSpec{Name: "prod", Min: 0, Max: 2, Desired: 1, LaunchTemplateID: lt,
		Hooks: []sim.HookSpec{{Name: "patch-agent-drain", Transition: sim.TransitionTerminating, HeartbeatTimeout: 300 * time.Second}}}))
	acct.Advance(5 * time.Minute)
	g := acct.Group("prod")
	require.Len(t, g.Instances, 1)
	id := g.Instances[0].ID
	_, err := acct.AutoScaling().(*sim.AutoScalingClient).TerminateInstanceInAutoScalingGroup(context.Background(), &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(id), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	require.NoError(t, err)
	inst, _ := acct.Instance(id)
	require.Equal(t, string(astypes.LifecycleStateTerminatingWait), inst.LifecycleState)
	w := &holdWorld{acct: acct, platform: &fakePlatform{}, spy: &alertSpy{}, store: state.NewMemory(),
		target: model.Target{Group: "prod", Platform: model.PlatformECS, Cluster: "c1", Parameter: "/golden/ecs"},
		action: events.LifecycleAction{GroupName: "prod", HookName: "patch-agent-drain", InstanceID: id, Token: "tok-1",
			Transition: events.TransitionTerminating}}
	policy := model.DefaultPolicy()
	policy.DrainTimeout = 10 * time.Minute
	w.hooks = &lifecycleaction.Hooks{Owner: "me", Store: w.store, AutoScaling: acct.AutoScaling(), EC2: acct.EC2(),
		Platforms: model.Platforms{model.PlatformECS: w.platform}, Clock: acct.Clock(), Log: zap.NewNop(), Policy: policy, Observer: w.spy}
	return w
}

// seed writes the group's rollout record.
func (w *holdWorld) seed(t *testing.T, r state.Rollout) {
	t.Helper()
	if cur, err := w.store.GetRollout(context.Background(), r.Group); err == nil {
		r.Version = cur.Version
	}
	_, err := w.store.PutRollout(context.Background(), r)
	require.NoError(t, err)
}

// look takes one look at the action, then lets d pass.
func (w *holdWorld) look(t *testing.T, d time.Duration) lifecycleaction.HookOutcome {
	t.Helper()
	out, err := w.hooks.Handle(context.Background(), w.target, w.action)
	require.NoError(t, err)
	w.acct.Advance(d)
	return out
}

// lookFor looks every 30 s for d and fails on any outcome but HookInProgress.
func (w *holdWorld) lookFor(t *testing.T, d time.Duration) {
	t.Helper()
	for end := w.acct.Clock().Now().Add(d); w.acct.Clock().Now().Before(end); {
		require.Equal(t, lifecycleaction.HookInProgress, w.look(t, 30*time.Second))
	}
}

func (w *holdWorld) record(t *testing.T) state.Hook {
	t.Helper()
	rec, err := w.store.GetHook(context.Background(), model.ActionKey("prod", w.action.InstanceID, "patch-agent-drain"))
	require.NoError(t, err)
	return rec
}

func (w *holdWorld) instanceState(t *testing.T) string {
	t.Helper()
	inst, ok := w.acct.Instance(w.action.InstanceID)
	require.True(t, ok)
	return inst.LifecycleState
}

// refreshRecord is group prod's rollout by the agent's instance refresh ir-1, Replacing.
func refreshRecord() state.Rollout {
	r := refreshing("ir-1")
	r.Group, r.Platform = "prod", model.PlatformECS
	r.Refresh.TerminatingHook = "patch-agent-drain"
	return r
}

// Field case C9 at the lifecycle hook: a drain of the agent's refresh that reaches its deadline undrained is held
// (the instance back in service, one DrainDeadline alert saying held, the action heartbeated and never
// completed while the rollout is halted); an operator's retry starts the drain again with a fresh deadline.
func TestC9DrainOfTheRefreshHeldAtItsDeadlineUntilARetryStartsItAgain(t *testing.T) {
	w := newHoldWorld(t)
	w.seed(t, refreshRecord())
	w.lookFor(t, 10*time.Minute)
	require.NotEmpty(t, w.platform.started, "drained")
	require.Empty(t, w.platform.undrained)
	require.Zero(t, w.spy.count(model.AlertDrainDeadline))

	// The deadline: held, not completed.
	require.Equal(t, lifecycleaction.HookInProgress, w.look(t, 30*time.Second))
	rec := w.record(t)
	require.False(t, rec.DrainHeldAt.IsZero(), "the hold is recorded")
	require.NotEqual(t, state.HookCompleted, rec.State)
	require.Equal(t, []string{w.action.InstanceID}, w.platform.undrained, "back in service")
	require.Equal(t, 1, w.spy.count(model.AlertDrainDeadline))
	require.Contains(t, w.spy.alerts[0].Detail, w.action.InstanceID+": held: drain did not finish within 10m0s (drained=false)")
	require.Contains(t, rec.Note, "stays in Terminating:Wait")
	require.Contains(t, rec.Note, "global timeout")

	// The rollout halts; the held action is heartbeated (the hook's 300 s timeout would otherwise end it), never
	// drained again, never completed, and alerted once.
	halted := refreshRecord()
	halted.Phase, halted.Reason = state.PhaseHalted, "failed: "+model.HeldDrainHalt("prod", w.action.InstanceID, "patch-agent-drain", rec.Note)
	halted.Refresh.Halt = model.HeldDrainHalt("prod", w.action.InstanceID, "patch-agent-drain", rec.Note)
	w.seed(t, halted)
	beats, drains := w.acct.Calls()["autoscaling:RecordLifecycleActionHeartbeat"], len(w.platform.started)
	w.lookFor(t, 30*time.Minute)
	require.Equal(t, string(astypes.LifecycleStateTerminatingWait), w.instanceState(t), "kept waiting by heartbeats")
	require.Greater(t, w.acct.Calls()["autoscaling:RecordLifecycleActionHeartbeat"], beats)
	require.Zero(t, w.acct.Calls()["autoscaling:CompleteLifecycleAction"])
	require.Len(t, w.platform.started, drains, "not drained again while halted")
	require.Equal(t, 1, w.spy.count(model.AlertDrainDeadline))

	// An operator's retry (the record Detected again): the drain starts again with a fresh deadline.
	retried := halted
	retried.Phase, retried.Current, retried.Strategy, retried.Reason = state.PhaseDetected, nil, "", "retry requested by alice"
	w.seed(t, retried)
	restartAt := w.acct.Clock().Now()
	w.lookFor(t, 30*time.Second)
	rec = w.record(t)
	require.True(t, rec.DrainHeldAt.IsZero(), "the hold is cleared")
	require.True(t, rec.DrainFrom.Equal(restartAt), "the deadline runs from the restart")
	require.Greater(t, len(w.platform.started), drains, "drained again")
	// The rollout replaces again by a new refresh: the fresh deadline, 10 minutes on, holds again.
	again := refreshRecord()
	again.Refresh.StartedAt = restartAt.Add(time.Minute)
	w.seed(t, again)
	w.lookFor(t, 9*time.Minute)
	require.Equal(t, 1, w.spy.count(model.AlertDrainDeadline), "no deadline before 10 minutes from the restart")
	require.True(t, w.record(t).DrainHeldAt.IsZero())
	w.lookFor(t, time.Minute)
	require.False(t, w.record(t).DrainHeldAt.IsZero(), "held again at the fresh deadline")
	require.Equal(t, 2, w.spy.count(model.AlertDrainDeadline))
	require.Zero(t, w.acct.Calls()["autoscaling:CompleteLifecycleAction"])
}

// A termination that is not the agent's refresh (no rollout replaces the group: a scale in, a person's) still
// continues at the drain deadline, with the alert.
func TestDrainOfATerminationOutsideARefreshContinuesAtItsDeadline(t *testing.T) {
	w := newHoldWorld(t)
	done := refreshRecord()
	done.Phase, done.Current = state.PhaseCompleted, nil
	w.seed(t, done)
	w.lookFor(t, 10*time.Minute)
	require.Equal(t, lifecycleaction.HookDone, w.look(t, 30*time.Second))
	rec := w.record(t)
	require.Equal(t, state.HookCompleted, rec.State)
	require.Equal(t, model.ResultContinue, rec.Result)
	require.True(t, rec.DrainHeldAt.IsZero())
	require.Empty(t, w.platform.undrained)
	require.Equal(t, 1, w.spy.count(model.AlertDrainDeadline))
	require.Contains(t, w.spy.alerts[0].Detail, "continuing")
}

// An instance Auto Scaling reports unhealthy (its health check fails: Auto Scaling's health check replacement,
// or while the refresh's termination of it waits) is never put back in service: its drain continues at the
// deadline though the rollout replaces by refresh, with the alert, and nothing is held.
func TestDrainOfAnUnhealthyInstanceContinuesAtItsDeadlineDuringARefresh(t *testing.T) {
	w := newHoldWorld(t)
	w.seed(t, refreshRecord())
	require.True(t, w.acct.MarkInstanceUnhealthy(w.action.InstanceID))
	w.lookFor(t, 10*time.Minute)
	require.Equal(t, lifecycleaction.HookDone, w.look(t, 30*time.Second))
	rec := w.record(t)
	require.Equal(t, state.HookCompleted, rec.State)
	require.Equal(t, model.ResultContinue, rec.Result)
	require.True(t, rec.DrainHeldAt.IsZero(), "not held")
	require.Empty(t, w.platform.undrained, "never back in service")
	require.Equal(t, 1, w.spy.count(model.AlertDrainDeadline))
	require.Contains(t, w.spy.alerts[0].Detail, "continuing")
}

// The refresh step halts on a drain held during its refresh: the refresh is cancelled without waiting for the
// held termination, and the rollout halts without a rollback (though the policy rolls back on failure), with a
// reason naming the instance, what blocked the drain, that it serves in Terminating:Wait, and the way forward.
func TestC9HeldDrainHaltsTheRefreshWithoutARollback(t *testing.T) {
	rg, f := refreshRig()
	rg.o.Policy.RollbackOnFailure = true
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rg.seed0(refreshRecord())
	ctx := context.Background()
	note := "drain did not finish within 10m0s (eviction refused by a PodDisruptionBudget (429)); i-3 is back in service but stays in Terminating:Wait"
	_, err := rg.store.PutHook(ctx, state.Hook{Token: model.ActionKey("prod", "i-3", "patch-agent-drain"), Group: "prod", HookName: "patch-agent-drain",
		InstanceID: "i-3", Transition: model.TransitionTerminating, State: state.HookDraining, Note: note, DrainHeldAt: now0})
	require.NoError(t, err)
	v := view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-4", amiNew))
	v.Instances = append(v.Instances, model.InstanceView{ID: "i-3", LifecycleState: string(astypes.LifecycleStateTerminatingWait), ImageID: amiOld})
	_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Equal(t, 1, f.cancels)
	require.Equal(t, []bool{false}, f.cancelWaits, "the cancel does not wait for the held termination")
	f.refreshes[0].Status = astypes.InstanceRefreshStatusCancelled
	_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Zero(t, f.rollbacks)
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseHalted, stored.Phase, stored.Reason)
	require.Contains(t, stored.Reason, "failed: drain of i-3 on lifecycle hook patch-agent-drain held: "+note)
	require.Contains(t, stored.Reason, "fix what blocks the drain, then `patch-agent retry prod`")
	require.Contains(t, stored.Reason, "`patch-agent rollback prod`")
	require.Len(t, f.starts, 0)
}

// The look for a held drain takes the terminating action's record from the lifecycle actions of this process
// while they hold its claim (Orchestrator.HookKept), without reading the store; without a kept record it reads
// the store.
func TestHeldDrainIsSeenOnTheRecordTheLifecycleActionsKeep(t *testing.T) {
	for _, kept := range []bool{true, false} {
		rg, f := refreshRig()
		f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
		rg.seed0(refreshRecord())
		ctx := context.Background()
		key := model.ActionKey("prod", "i-3", "patch-agent-drain")
		held := state.Hook{Token: key, Group: "prod", HookName: "patch-agent-drain", InstanceID: "i-3", Transition: model.TransitionTerminating,
			State: state.HookDraining, Note: "drain did not finish within 10m0s", DrainHeldAt: now0}
		asked := 0
		if kept {
			rg.o.HookKept = func(k string) (state.Hook, bool) {
				asked++
				return held, k == key
			}
		} else {
			_, err := rg.store.PutHook(ctx, held)
			require.NoError(t, err)
			rg.o.HookKept = func(string) (state.Hook, bool) { asked++; return state.Hook{}, false }
		}
		v := view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-4", amiNew))
		v.Instances = append(v.Instances, model.InstanceView{ID: "i-3", LifecycleState: string(astypes.LifecycleStateTerminatingWait), ImageID: amiOld})
		_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: v, AMI: newAMI()})
		require.NoError(t, err)
		require.Equal(t, 1, asked, "kept %v", kept)
		require.Equal(t, 1, f.cancels, "the held drain halts the refresh (kept %v)", kept)
	}
}
