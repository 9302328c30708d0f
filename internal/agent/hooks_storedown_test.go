package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Field case C4 with the store failing from the moment a terminating action's message arrives (or, its message
// lost, the moment the reconcile loop finds it waiting): every lifecycle
// record write fails for 90 s, longer than the hook's 60 s HeartbeatTimeout, so the action Auto Scaling
// confirmed cannot be recorded. Its heartbeats go on all the same (as for a claim that cannot be renewed), and
// once the store writes again the action is recorded, drained and continued once: the instance is never left
// to time out and terminate undrained because the table was throttled.
func TestC4StoreFailingWhenTheActionArrivesDoesNotStopItsHeartbeats(t *testing.T) {
	for _, c := range []struct {
		outage time.Duration
		lost   bool
	}{{50 * time.Second, false}, {90 * time.Second, false}, {90 * time.Second, true}} {
		outage := c.outage
		name := fmt.Sprintf("writes failing for %s", outage)
		if c.lost {
			name += ", the message lost"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			hb := 60 * time.Second
			g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
			spec := oneGroup(&g)
			spec.Sim.TaskStopStageDelay = 30 * time.Second
			w := build(t, spec)
			clk := w.Account.Clock()
			store := &failingHookWrites{Store: w.Store, clock: clk}
			r := w.NewReplicaWith("r", clk, store)
			for range 24 {
				require.NoError(t, r.RunOnce(ctx))
				w.Account.Advance(5 * time.Second)
			}
			instance, start := scaleInOne(t, w, g)
			store.from, store.to = start, start.Add(outage)
			if c.lost {
				loseTheMessage(t, w) // the reconcile loop takes it up: its first record write fails the same way
			}
			for range 200 {
				_ = r.RunOnce(ctx) // failed writes are errors of the poll and the pass: logged, looked at again
				w.Account.Advance(5 * time.Second)
			}
			requireKeptAlive(t, w, instance, start, hb, true)
		})
	}
}

// The message path alone, with no reconcile pass to take the action up (adoption would heartbeat it too): a
// terminating action Auto Scaling confirms while every lifecycle record write fails for 90 s, longer than the
// hook's 60 s HeartbeatTimeout, is heartbeated by the handling of its message, and is still waiting when the
// store writes again.
func TestC4StoreFailingWhenTheActionArrivesTheMessageHeartbeatsItWithoutTheReconcileLoop(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
	spec := oneGroup(&g)
	w := build(t, spec)
	clk := w.Account.Clock()
	store := &failingHookWrites{Store: w.Store, clock: clk}
	r := w.NewReplicaWith("r", clk, store)
	for range 24 {
		require.NoError(t, r.RunOnce(ctx))
		w.Account.Advance(5 * time.Second)
	}
	instance, start := scaleInOne(t, w, g)
	store.from, store.to = start, start.Add(90*time.Second)
	var act sim.LifecycleAction
	w.Account.Observe(func(v *sim.View) {
		for _, a := range v.LifecycleActions() {
			if a.InstanceID == instance && a.Active {
				act = a
			}
		}
	})
	require.NotEmpty(t, act.Token)
	ev := events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{GroupName: act.Group, HookName: act.Hook,
		InstanceID: act.InstanceID, Token: act.Token, Transition: events.TransitionTerminating}}
	for clk.Now().Before(store.to) {
		disp, _ := r.Handle(ctx, ev) // each failed write is an error: the message is held
		require.Equal(t, events.Hold, disp)
		w.Account.Advance(5 * time.Second)
	}
	beats := 0
	for _, h := range w.Account.Heartbeats() {
		if h.InstanceID == instance && h.Accepted {
			beats++
		}
	}
	require.Positive(t, beats, "heartbeated while unrecorded")
	w.Account.Observe(func(v *sim.View) {
		for _, a := range v.LifecycleActions() {
			if a.Token == act.Token {
				require.True(t, a.Active, "the action is still waiting after 90 s of a 60 s HeartbeatTimeout")
			}
		}
	})
}
