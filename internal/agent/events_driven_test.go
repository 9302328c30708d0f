package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/state"
)

// eventDrivenRollout rolls a 3-instance group to a new AMI with the agent at the production safety poll
// (2 minutes), driven as Run drives it (demo.World.RunEvents), and returns how long the rollout took and
// how many wake-up events the account sent.
func eventDrivenRollout(t *testing.T, spec demo.Spec) (time.Duration, int) {
	t.Helper()
	ctx := context.Background()
	spec.Groups = []demo.GroupSetup{{Name: "roll", Cluster: "c", Parameter: "/golden-ami/roll", Min: 3, Max: 4, Desired: 3}}
	spec.Services = map[string]int{"web": 6}
	w, err := demo.Build(spec)
	require.NoError(t, err)
	_, err = w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	start := w.Account.Clock().Now()
	w.PublishAMI("/golden-ami/roll", demo.ImageB)
	done, err := w.RunEvents(ctx, 3*time.Hour, func() bool { return w.Rollout(ctx, "roll").Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the rollout completes: %+v", w.Rollout(ctx, "roll"))
	require.Empty(t, w.Checker.Finish())
	sent := 0
	for _, n := range w.Account.WakeUpEventsSent() {
		sent += n
	}
	return w.Rollout(ctx, "roll").UpdatedAt.Sub(start), sent
}

// TestLostWakeUpEventsOnlyDelayARolloutTheSafetyPollCompletesIt: with the reconcile interval at the production
// safety poll (2 minutes), a rollout driven by wake-up events completes within 3 % of its physical floor (each
// woken look reads AWS afresh); with every wake-up event lost it still completes, on the slow poll, only later;
// and every invariant holds in both.
func TestLostWakeUpEventsOnlyDelayARolloutTheSafetyPollCompletesIt(t *testing.T) {
	withEvents, sent := eventDrivenRollout(t, demo.Spec{WakeUpEvents: true})
	require.Positive(t, sent, "the account sent wake-up events")
	// The physical floor of three replacements: boot, agent connect, a task start and three stop stages each
	// (the simulated account's defaults). Each woken look re-reads AWS, so each wait ends with its event.
	floor := 3 * (90*time.Second + 20*time.Second + 10*time.Second + 3*10*time.Second)
	require.LessOrEqual(t, withEvents.Seconds(), 1.03*floor.Seconds(), "with events the rollout takes its physical floor (goal: <= 1.03)")
	lost, none := eventDrivenRollout(t, demo.Spec{LoseWakeUpEvents: true})
	require.Zero(t, none, "every wake-up event is lost")
	t.Logf("rollout with events %s, every event lost %s", withEvents, lost)
	require.Greater(t, lost, withEvents, "lost events delay the rollout")
}

// transitionTimes records when each rollout transition was written.
type transitionTimes struct {
	lifecycle.NopObserver
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
// at the 2-minute safety poll, a replacement that never becomes healthy sends no event after its launch; the
// rollout still leaves ReplacementHealthy within two seconds of its health deadline (--health-timeout), because
// the agent wakes the target at the end of the timed wait it set itself, not at the next poll.
func TestTimedWaitOfTheAgentEndsAtItsTimeNotAtTheNextSafetyPoll(t *testing.T) {
	ctx := context.Background()
	obs := &transitionTimes{}
	policy := lifecycle.DefaultPolicy()
	policy.HealthTimeout = 5*time.Minute + 7*time.Second // off the poll's cadence
	w, err := demo.Build(demo.Spec{WakeUpEvents: true, Observer: obs, Policy: policy,
		Groups:   []demo.GroupSetup{{Name: "roll", Cluster: "c", Parameter: "/golden-ami/roll", Min: 2, Max: 3, Desired: 2}},
		Services: map[string]int{"web": 4}})
	require.NoError(t, err)
	_, err = w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	w.Account.MarkImageUnhealthy(demo.ImageB)
	w.PublishAMI("/golden-ami/roll", demo.ImageB)
	done, err := w.RunEvents(ctx, time.Hour, func() bool {
		p := w.Rollout(ctx, "roll").Phase
		return p == state.PhaseRolledBack || p == state.PhaseHalted
	})
	require.NoError(t, err)
	require.True(t, done, "the unhealthy replacement ends the rollout: %+v", w.Rollout(ctx, "roll"))
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for i, next := range obs.moves {
		prev := obs.prev[i]
		if prev.Current == nil || prev.Current.Step != state.StepReplacementHealthy || next.Phase == state.PhaseReplacing {
			continue
		}
		late := next.UpdatedAt.Sub(prev.Current.StepStartedAt) - policy.HealthTimeout
		require.GreaterOrEqual(t, late, time.Duration(0), "never before the deadline")
		require.LessOrEqual(t, late, 2*time.Second, "the health deadline ends the wait at its time, not at the next safety poll")
		return
	}
	t.Fatal("no transition out of ReplacementHealthy")
}
