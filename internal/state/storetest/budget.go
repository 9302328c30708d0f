package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// testClusterBudget proves the per-cluster budget on a store: a missing record is
// ErrNotFound, a stale version conflicts, claims stop at the budget with ErrBudgetFull naming the holders, a
// repeated claim of a held slot claims nothing twice, a stale slot is dropped, and eight claimers racing for a
// budget of 2 end with exactly 2 slots held — and the rollout listing never sees a budget record.
func testClusterBudget(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.GetClusterBudget(c, "ecs/prod")
	require.ErrorIs(t, err, state.ErrNotFound)
	_, err = s.PutClusterBudget(c, state.ClusterBudget{Cluster: "ecs/prod", Version: 3})
	require.ErrorIs(t, err, state.ErrConflict, "a record that does not exist is not at version 3")

	live := func(state.DrainSlot) (bool, error) { return false, nil }
	err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "a", InstanceID: "i-1", At: at}, 1, live)
	require.NoError(t, err)
	planned, held, err := state.PlanDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "a", InstanceID: "i-1", At: at.Add(time.Hour)}, 1, live)
	require.NoError(t, err)
	require.True(t, held)
	require.NotNil(t, planned, "a held slot plans a write that confirms it")
	require.Len(t, planned.Slots, 1, "and claims nothing twice")
	require.True(t, planned.Slots[0].At.Equal(at), "the slot keeps the time it was claimed")
	err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "a", InstanceID: "i-1", At: at}, 1, live)
	require.NoError(t, err, "a repeat of a held claim")

	// A writer that judged a's slot stale on an older read (a's record was not draining then) loses to a's
	// confirmation of it: never two drains on a budget of 1.
	stale := func(h state.DrainSlot) (bool, error) { return h.Group == "a", nil }
	beside, held, err := state.PlanDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, stale)
	require.NoError(t, err)
	require.False(t, held)
	require.Equal(t, []string{"b/i-2"}, slotNames(beside.Slots), "b planned over a's slot")
	confirm, _, err := state.PlanDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "a", InstanceID: "i-1", At: at}, 1, live)
	require.NoError(t, err)
	_, err = s.PutClusterBudget(c, *confirm)
	require.NoError(t, err)
	_, err = s.PutClusterBudget(c, *beside)
	require.ErrorIs(t, err, state.ErrConflict, "b's claim was planned on a read that a's confirmation moved")
	err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, live)
	require.ErrorIs(t, err, state.ErrBudgetFull)
	require.Contains(t, err.Error(), "i-1 (a)")
	err = state.ClaimDrainSlot(c, s, "eks/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, live)
	require.NoError(t, err, "another cluster has its own budget")

	b, err := s.GetClusterBudget(c, "ecs/prod")
	require.NoError(t, err)
	require.True(t, b.HoldsDrainSlot("a", "i-1"))
	require.True(t, b.Slots[0].At.Equal(at))

	gone := func(h state.DrainSlot) (bool, error) { return h.InstanceID == "i-1", nil }
	err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, gone)
	require.NoError(t, err, "the stale slot of i-1 is dropped")
	b, err = s.GetClusterBudget(c, "ecs/prod")
	require.NoError(t, err)
	require.False(t, b.HoldsDrainSlot("a", "i-1"))
	require.True(t, b.HoldsDrainSlot("b", "i-2"))

	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := state.ClaimDrainSlot(c, s, "ecs/race", state.DrainSlot{Group: fmt.Sprintf("g%d", i), InstanceID: fmt.Sprintf("i-%d", i), At: at}, 2, live)
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
				return
			}
			if !errors.Is(err, state.ErrBudgetFull) && !errors.Is(err, state.ErrConflict) {
				t.Errorf("claim %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	b, err = s.GetClusterBudget(c, "ecs/race")
	require.NoError(t, err)
	require.Len(t, b.Slots, 2, "never more slots than the budget")
	require.LessOrEqual(t, wins, 2)

	rollouts, err := s.ListRollouts(c)
	require.NoError(t, err)
	require.Empty(t, rollouts, "budget records are not rollouts")
}

// testGuardedWriteWithClaim is the contract of a drain's write-ahead that carries its drain slot
// (PutRolloutUnlessPaused with a claim): the record, its history entry and the slot are written together; a
// holding pause, a lost race on the record (ErrConflict) or on the budget (ErrBudgetChanged, not ErrConflict)
// writes none of them. A slot's give-back fenced by a rollout record's version (ClusterBudget.Fence) writes
// only while the record is at that version.
func testGuardedWriteWithClaim(t *testing.T, s state.Store) {
	c := ctx(t)
	live := func(state.DrainSlot) (bool, error) { return false, nil }
	plan := func(group, instance string) *state.ClusterBudget {
		b, held, err := state.PlanDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: group, InstanceID: instance, At: at}, 2, live)
		require.NoError(t, err)
		require.False(t, held)
		require.NotNil(t, b, "a slot to claim for %s", instance)
		return b
	}
	write := func(r state.Rollout, claim *state.ClusterBudget) (state.Rollout, error) {
		return s.PutRolloutUnlessPaused(c, r, []state.HistoryEntry{{Group: r.Group, At: at, Event: "drain-" + claim.Slots[len(claim.Slots)-1].InstanceID}}, at, claim)
	}
	slots := func() []string { return SlotsHeld(t, s, "ecs/prod") }
	a1, err := s.PutRollout(c, state.Rollout{Group: "a", Phase: state.PhaseReplacing})
	require.NoError(t, err)
	b1, err := s.PutRollout(c, state.Rollout{Group: "b", Phase: state.PhaseReplacing})
	require.NoError(t, err)

	// Paused: nothing written, no slot left behind to give back.
	require.NoError(t, s.PutLock(c, state.Lock{Group: "a", Reason: "incident", Who: "alice", Since: at}))
	_, err = write(a1, plan("a", "i-1"))
	require.ErrorIs(t, err, state.ErrPaused)
	require.Empty(t, slots(), "a paused write-ahead claims no slot")
	require.NoError(t, s.DeleteLock(c, "a"))

	// Two claims planned from one read: the first wins, the second's budget moved (its record did not).
	claimA, claimB := plan("a", "i-1"), plan("b", "i-2")
	a2, err := write(a1, claimA)
	require.NoError(t, err)
	require.Equal(t, a1.Version+1, a2.Version)
	require.Equal(t, []string{"a/i-1"}, slots())
	_, err = write(b1, claimB)
	require.ErrorIs(t, err, state.ErrBudgetChanged)
	require.NotErrorIs(t, err, state.ErrConflict, "b's record was not raced")
	got, err := s.GetRollout(c, "b")
	require.NoError(t, err)
	require.Equal(t, b1.Version, got.Version, "nothing of b written")
	h, err := s.History(c, "b")
	require.NoError(t, err)
	require.Empty(t, h)

	// A lost race on the record: ErrConflict, and the (fresh) claim is not written either.
	_, err = write(a1, plan("a", "i-3"))
	require.ErrorIs(t, err, state.ErrConflict)
	require.Equal(t, []string{"a/i-1"}, slots())

	b2, err := write(b1, plan("b", "i-2"))
	require.NoError(t, err, "planned again on a fresh read")
	require.Equal(t, b1.Version+1, b2.Version)
	require.Equal(t, []string{"a/i-1", "b/i-2"}, slots())
	h, err = s.History(c, "b")
	require.NoError(t, err)
	require.Len(t, h, 1)
	require.Equal(t, "drain-i-2", h[0].Event)

	// A give-back fenced by b's record as it was before its last write (a replica that stalled past its lease
	// while another moved the record) writes nothing: ErrFenceMoved, and ErrConflict for the caller's re-read.
	err = state.ReleaseDrainSlot(c, s, "ecs/prod", "b", "i-2", &state.RolloutFence{Group: "b", Version: b1.Version})
	require.ErrorIs(t, err, state.ErrFenceMoved)
	require.ErrorIs(t, err, state.ErrConflict)
	require.Equal(t, []string{"a/i-1", "b/i-2"}, slots(), "a fenced give-back of a moved record releases nothing")
	require.NoError(t, state.ReleaseDrainSlot(c, s, "ecs/prod", "b", "i-2", &state.RolloutFence{Group: "b", Version: b2.Version}))
	require.Equal(t, []string{"a/i-1"}, slots(), "fenced by the record as stored: released")
	budget, err := s.GetClusterBudget(c, "ecs/prod")
	require.NoError(t, err)
	require.Nil(t, budget.Fence, "a fence is never stored")
}

// SlotsHeld lists the slots of cluster's budget as "group/instance", in the order stored; none when the cluster
// has no budget record.
func SlotsHeld(t *testing.T, s state.Store, cluster string) []string {
	t.Helper()
	b, err := s.GetClusterBudget(context.Background(), cluster)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return slotNames(b.Slots)
}

// slotNames names slots "<group>/<instance>", in order.
func slotNames(slots []state.DrainSlot) []string {
	var out []string
	for _, h := range slots {
		out = append(out, h.Group+"/"+h.InstanceID)
	}
	return out
}
