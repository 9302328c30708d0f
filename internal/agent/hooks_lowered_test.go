package agent_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Lost lifecycle messages under a HeartbeatTimeout lowered by a stack update and under DynamoDB write outages.

// Field case C4: a stack update lowers the agent's hook's HeartbeatTimeout from 180 s to 30 s; the lifecycle
// sweep still runs on the 180 s the hook check read (every 20 s). A scale-in's message is lost, at six phases
// of the sweep. The first sighting finds the sweep ran on a longer timeout than the hook's: the action is taken
// up at once (the first heartbeat within one 20 s sweep interval of its start, a third of the timeout to spare)
// and the sweep runs every 5 s from then on. Waiting AdoptAfter after a sighting up to 20 s late would leave 4
// of the 6 phases timed out undrained.
func TestC4HeartbeatTimeoutLoweredTo30sBeforeTheHookCheckSawItIsHeldForALostMessage(t *testing.T) {
	for _, off := range []time.Duration{0, 3 * time.Second, 7 * time.Second, 11 * time.Second, 15 * time.Second, 19 * time.Second} {
		t.Run(fmt.Sprintf("phase %s", off), func(t *testing.T) {
			w, g := eventDrivenWorld(t, 180*time.Second, nil)
			require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: testworld.HookName, Transition: sim.TransitionTerminating,
				HeartbeatTimeout: 30 * time.Second, QueueURL: w.QueueURL}))
			_, err := w.RunEvents(context.Background(), 2*time.Second+off, func() bool { return false })
			require.NoError(t, err)
			instance, start := scaleInOne(t, w, g)
			loseTheMessage(t, w)
			_, err = w.RunEvents(context.Background(), 15*time.Minute, func() bool { return false })
			require.NoError(t, err)
			requireKeptAlive(t, w, instance, start, 30*time.Second, true)
			var first time.Duration
			for _, h := range w.Account.Heartbeats() {
				if h.InstanceID == instance && h.Accepted {
					first = h.At.Sub(start)
					break
				}
			}
			// Taken up at its first sighting, not AdoptAfter later: within one sweep interval (20 s) of its start.
			require.LessOrEqual(t, first, 20*time.Second, "first heartbeat")
		})
	}
}

// failingHookWrites fails every PutHook between from and to (DynamoDB throttling writes): reads still work.
type failingHookWrites struct {
	state.Store
	clock    interface{ Now() time.Time }
	from, to time.Time
}

func (s *failingHookWrites) PutHook(ctx context.Context, h state.Hook) (state.Hook, error) {
	if now := s.clock.Now(); !s.from.IsZero() && !now.Before(s.from) && now.Before(s.to) {
		return h, errors.New("ProvisionedThroughputExceededException: injected for the lifecycle action writes")
	}
	return s.Store.PutHook(ctx, h)
}

// Field case C4 with the store failing: an action taken up without its message (60 s HeartbeatTimeout, a drain
// of a few minutes) loses every lifecycle record write for 70 s, then for 150 s (longer than the claim), right
// after its first recorded heartbeat. Heartbeats go on all the same — this process remembers the ones Auto
// Scaling accepted, so the record is not taken for one whose action ended, and a failed claim renewal still
// sends the heartbeat that is due — and the action is drained, then continued once. The record is not closed at
// 70 s as "ended without the agent" and taken up again (its drain deadline restarted), and the heartbeats do
// not stop with the claim renewal at 150 s (the action would time out mid-drain).
func TestC4LifecycleRecordWritesFailingForLongerThanTheTimeoutDoNotStopTheHeartbeats(t *testing.T) {
	for _, outage := range []time.Duration{70 * time.Second, 150 * time.Second} {
		t.Run(fmt.Sprintf("writes failing for %s", outage), func(t *testing.T) {
			ctx := context.Background()
			hb := 60 * time.Second
			g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
			spec := oneGroup(&g)
			spec.Sim.TaskStopStageDelay = 60 * time.Second
			w := build(t, spec)
			clk := w.Account.Clock()
			store := &failingHookWrites{Store: w.Store, clock: clk}
			r := w.NewReplicaWith("r", clk, store)
			for range 24 {
				require.NoError(t, r.RunOnce(ctx))
				w.Account.Advance(5 * time.Second)
			}
			drains := w.Account.Calls()["ecs:UpdateContainerInstancesState"]
			instance, start := scaleInOne(t, w, g)
			loseTheMessage(t, w)
			key := model.ActionKey(g.Name, instance, testworld.HookName)
			for range 200 {
				_ = r.RunOnce(ctx) // failed writes are errors of the pass: logged, looked at again
				if store.from.IsZero() {
					if rec, err := w.Store.GetHook(ctx, key); err == nil && !rec.LastHeartbeat.IsZero() {
						store.from, store.to = clk.Now(), clk.Now().Add(outage)
					}
				}
				w.Account.Advance(5 * time.Second)
			}
			require.False(t, store.from.IsZero(), "the outage began")
			requireKeptAlive(t, w, instance, start, hb, true)
			rec, err := w.Store.GetHook(ctx, key)
			require.NoError(t, err)
			require.Equal(t, start, rec.ReceivedAt, "the record it was taken up with, never closed and taken up again")
			require.Equal(t, 1, w.Account.Calls()["ecs:UpdateContainerInstancesState"]-drains, "one drain")
		})
	}
}
