package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// testClusterBudget proves the per-cluster budget on a store (issue #20 item 10): a missing record is
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
	held, err := state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "a", InstanceID: "i-1", At: at}, 1, live)
	require.NoError(t, err)
	require.Len(t, held, 1)
	_, err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "a", InstanceID: "i-1", At: at}, 1, live)
	require.NoError(t, err, "a repeat of a held claim")
	_, err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, live)
	require.ErrorIs(t, err, state.ErrBudgetFull)
	require.Contains(t, err.Error(), "i-1 (a)")
	_, err = state.ClaimDrainSlot(c, s, "eks/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, live)
	require.NoError(t, err, "another cluster has its own budget")

	b, err := s.GetClusterBudget(c, "ecs/prod")
	require.NoError(t, err)
	require.True(t, b.HoldsDrainSlot("a", "i-1"))
	require.True(t, b.Slots[0].At.Equal(at))

	gone := func(h state.DrainSlot) (bool, error) { return h.InstanceID == "i-1", nil }
	_, err = state.ClaimDrainSlot(c, s, "ecs/prod", state.DrainSlot{Group: "b", InstanceID: "i-2", At: at}, 1, gone)
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
			_, err := state.ClaimDrainSlot(c, s, "ecs/race", state.DrainSlot{Group: fmt.Sprintf("g%d", i), InstanceID: fmt.Sprintf("i-%d", i), At: at}, 2, live)
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
