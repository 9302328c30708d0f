package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// rollGroup is the group of the wake-up scenarios: 3 instances with room for one more, rolled by instance
// refresh.
func rollGroup() testworld.GroupSetup {
	return testworld.GroupSetup{Name: "roll", Cluster: "c", Parameter: "/golden-ami/roll", Min: 3, Max: 4, Desired: 3}
}

// eventDrivenRollout rolls rollGroup to a new AMI with the agent at the production safety poll (2 minutes),
// driven as Run drives it (testworld.World.RunEvents), and returns how long the rollout took and how many wake-up
// events the account sent.
func eventDrivenRollout(t *testing.T, spec testworld.Spec) (time.Duration, int) {
	t.Helper()
	ctx := context.Background()
	spec.Groups = []testworld.GroupSetup{rollGroup()}
	spec.Services = map[string]int{"web": 6}
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	_, err = w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	start := w.Account.Clock().Now()
	w.PublishAMI("/golden-ami/roll", testworld.ImageB)
	done, err := w.RunEvents(ctx, 3*time.Hour, func() bool { return w.Rollout(ctx, "roll").Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the rollout completes: %+v", w.Rollout(ctx, "roll"))
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	require.Empty(t, w.Checker.Finish())
	sent := 0
	for _, n := range w.Account.WakeUpEventsSent() {
		sent += n
	}
	return w.Rollout(ctx, "roll").UpdatedAt.Sub(start), sent
}

// physicalFloor rolls rollGroup to a new AMI with the agent looking every second, and returns how long the
// rollout took: the time the refresh, the boots, the drains and the agent's own steps take, each wait ended
// within a second of its end.
func physicalFloor(t *testing.T) time.Duration {
	t.Helper()
	ctx := context.Background()
	g := rollGroup()
	w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{g}, Services: map[string]int{"web": 6}})
	settle(t, w, 5*time.Minute)
	start := w.Account.Clock().Now()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, time.Second, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the rollout completes: %+v", w.Rollout(ctx, g.Name))
	return w.Rollout(ctx, g.Name).UpdatedAt.Sub(start)
}

// TestLostWakeUpEventsOnlyDelayARolloutTheSafetyPollCompletesIt: with the reconcile interval at the production
// safety poll (2 minutes), a refresh rollout driven by wake-up events completes within 3 % of its physical
// floor (each woken look reads AWS afresh); with every wake-up event lost it still completes, on the slow poll,
// only later; and every invariant holds in both.
func TestLostWakeUpEventsOnlyDelayARolloutTheSafetyPollCompletesIt(t *testing.T) {
	withEvents, sent := eventDrivenRollout(t, testworld.Spec{WakeUpEvents: true})
	require.Positive(t, sent, "the account sent wake-up events")
	floor := physicalFloor(t)
	require.LessOrEqual(t, withEvents.Seconds(), 1.03*floor.Seconds(), "with events the rollout takes its physical floor (goal: <= 1.03)")
	lost, none := eventDrivenRollout(t, testworld.Spec{LoseWakeUpEvents: true})
	require.Zero(t, none, "every wake-up event is lost")
	t.Logf("rollout with events %s, every event lost %s, physical floor %s", withEvents, lost, floor)
	require.Greater(t, lost, withEvents, "lost events delay the rollout")
}

// transitionTimes records when each rollout transition was written.
type transitionTimes struct {
	model.NopObserver
	mu    sync.Mutex
	moves []state.Rollout // next, in order
	prev  []state.Rollout
}

func (o *transitionTimes) RolloutTransition(prev, next state.Rollout, _ string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.prev, o.moves = append(o.prev, prev), append(o.moves, next)
}

// TestTimedWaitOfTheAgentEndsAtItsTimeNotAtTheNextSafetyPoll: with wake-up events on and the reconcile interval
// at the 2-minute safety poll, the waits of a rollout of a bad AMI end at their time, though no event comes
// then. The soak of the AMI (patch-agent/min-ami-age, off the poll's cadence) is a wait the agent set itself: the
// rollout starts preparing within two seconds of its end, because the agent wakes the target at that time. The
// new instance of the bad AMI never becomes healthy and sends no event after its launch while the launching
// lifecycle action holds it in Pending:Wait: the agent, which looks at the action it holds at every receive,
// ABANDONs it within one long poll (20 s) of its health deadline (--health-timeout after the agent recorded
// the action), not at the next safety poll.
func TestTimedWaitOfTheAgentEndsAtItsTimeNotAtTheNextSafetyPoll(t *testing.T) {
	ctx := context.Background()
	obs := &transitionTimes{}
	policy := model.DefaultPolicy()
	policy.HealthTimeout = 5*time.Minute + 7*time.Second // off the poll's cadence
	soak := 4*time.Minute + 13*time.Second
	w, err := testworld.Build(testworld.Spec{WakeUpEvents: true, Policy: policy, Observer: obs,
		Groups: []testworld.GroupSetup{{Name: "roll", Cluster: "c", Parameter: "/golden-ami/roll", Min: 2, Max: 3, Desired: 2,
			Tags: map[string]string{model.TagMinAMIAge: soak.String()}}},
		Services: map[string]int{"web": 4}})
	require.NoError(t, err)
	_, err = w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	w.Account.MarkImageUnhealthy(testworld.ImageB)
	w.PublishAMI("/golden-ami/roll", testworld.ImageB)
	done, err := w.RunEvents(ctx, time.Hour, func() bool {
		p := w.Rollout(ctx, "roll").Phase
		return p == state.PhaseRolledBack || p == state.PhaseHalted
	})
	require.NoError(t, err)
	require.True(t, done, "the unhealthy launch ends the rollout: %+v", w.Rollout(ctx, "roll"))

	obs.mu.Lock()
	prepared := false
	for i, next := range obs.moves {
		if prev := obs.prev[i]; prev.TargetImageID != testworld.ImageB || next.Phase != state.PhasePreparing {
			continue
		}
		late := next.UpdatedAt.Sub(next.SourceModified) - soak
		t.Logf("preparing %s after the soak's end", late)
		require.GreaterOrEqual(t, late, time.Duration(0), "never before the soak ends")
		require.LessOrEqual(t, late, 2*time.Second, "the soak ends at its time, not at the next safety poll")
		prepared = true
		break
	}
	obs.mu.Unlock()
	require.True(t, prepared, "no transition to Preparing")

	for _, c := range w.Account.LifecycleCompletions() {
		if !c.Accepted || c.Caller != sim.CallerAPI || c.Transition != sim.TransitionLaunching || c.Result != sim.ResultAbandon {
			continue
		}
		rec, err := w.Store.GetHook(ctx, model.ActionKey(c.Group, c.InstanceID, c.Hook))
		require.NoError(t, err)
		late := c.At.Sub(rec.ReceivedAt) - policy.HealthTimeout
		t.Logf("%s abandoned %s after its health deadline", c.InstanceID, late)
		require.GreaterOrEqual(t, late, time.Duration(0), "never before the deadline")
		require.LessOrEqual(t, late, 20*time.Second, "the health deadline ends the hold within one long poll, not at the next safety poll")
		return
	}
	t.Fatal("no launching lifecycle action abandoned")
}
