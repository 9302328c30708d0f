package agent_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// failingHookStore fails every read and write of lifecycle action records from from to to: the table is down.
type failingHookStore struct {
	failingHookWrites
}

func (s *failingHookStore) GetHook(ctx context.Context, key string) (state.Hook, error) {
	if now := s.clock.Now(); !s.from.IsZero() && !now.Before(s.from) && now.Before(s.to) {
		return state.Hook{}, errors.New("InternalServerError: injected for the lifecycle action reads")
	}
	return s.Store.GetHook(ctx, key)
}

// Field case C4 through a DynamoDB outage: a terminating action this process confirmed and heartbeats (60 s
// HeartbeatTimeout, a drain of minutes) finds the table down for 5 minutes, reads and writes, longer than its
// claim (2 minutes): once the claim it keeps lapses it can no longer read the record. Auto Scaling confirmed the
// action, and this process remembers it: the heartbeats go on, nothing is completed while the record cannot be
// written, and once the table answers again the action is drained and continued once.
func TestC4LifecycleTableDownLongerThanTheClaimDoesNotStopTheHeartbeats(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 60 * time.Second
	w := build(t, spec)
	clk := w.Account.Clock()
	store := &failingHookStore{failingHookWrites{Store: w.Store, clock: clk}}
	r := w.NewReplicaWith("r", clk, store)
	for range 24 {
		require.NoError(t, r.RunOnce(ctx))
		w.Account.Advance(5 * time.Second)
	}
	instance, start := scaleInOne(t, w, g)
	key := model.ActionKey(g.Name, instance, testworld.HookName)
	for range 200 {
		_ = r.RunOnce(ctx) // failed reads and writes are errors of the poll and the pass: logged, looked at again
		if store.from.IsZero() {
			if rec, err := w.Store.GetHook(ctx, key); err == nil && !rec.LastHeartbeat.IsZero() {
				store.from, store.to = clk.Now(), clk.Now().Add(5*time.Minute)
			}
		}
		w.Account.Advance(5 * time.Second)
	}
	require.False(t, store.from.IsZero(), "the outage began")
	requireKeptAlive(t, w, instance, start, hb, true)
}
