package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/state"
)

// The pause checks of passes and looks share the agent's last listing of the pause locks for lockShareMaxAge:
// a pause taken after it is read once the listing is older, or at once after an operator wake-up forgot it
// (Agent.Reread); a pass that finds no fresh listing reads one and shares it.
func TestPauseChecksShareTheLastListingOfThePauseLocksForATick(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC))
	store := state.NewMemory()
	share := &lockShare{}
	p := &pass{store: store, locks: share, clock: clk}
	locks, err := p.pauseLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks)
	require.NoError(t, store.PutLock(ctx, state.Lock{Group: "g", Reason: "freeze", Who: "alice", Since: clk.Now()}))

	clk.SetTime(clk.Now().Add(lockShareMaxAge))
	later := &pass{store: store, locks: share, clock: clk}
	locks, err = later.pauseLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks, "another pass within lockShareMaxAge of the listing: the shared listing")

	clk.SetTime(clk.Now().Add(time.Millisecond))
	locks, err = later.pauseLocks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1, "older: read again")

	require.NoError(t, store.DeleteLock(ctx, "g"))
	share.forget() // an operator wake-up (resume)
	locks, err = p.pauseLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks, "forgotten: read again at once")

	// A listing read with the records of a full pass is shared too; an older one never replaces a newer one.
	share.offer([]state.Lock{{Group: "h"}}, clk.Now().Add(-time.Second), share.generation())
	locks, err = p.pauseLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks, "the newer listing stays")
}

// racingStore is a store whose next ListLocks runs during between its read and its answer: a pause and its
// operator wake-up landing while a listing is in flight.
type racingStore struct {
	state.Store
	during func()
}

func (s *racingStore) ListLocks(ctx context.Context) ([]state.Lock, error) {
	locks, err := s.Store.ListLocks(ctx)
	if s.during != nil {
		s.during()
		s.during = nil
	}
	return locks, err
}

// A listing in flight while an operator wake-up forgets the shared one may predate the pause the wake-up
// announces: it answers its own reader, but is not shared, so the look the wake-up causes reads the pause.
func TestAListingInFlightAcrossAnOperatorWakeUpIsNotShared(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC))
	mem := state.NewMemory()
	share := &lockShare{}
	store := &racingStore{Store: mem, during: func() {
		require.NoError(t, mem.PutLock(ctx, state.Lock{Group: "g", Reason: "freeze", Who: "alice", Since: clk.Now()}))
		share.forget() // the pause's operator wake-up (Agent.Reread)
	}}
	locks, err := (&pass{store: store, locks: share, clock: clk}).pauseLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks, "read before the pause")
	clk.SetTime(clk.Now().Add(time.Second))
	locks, err = (&pass{store: mem, locks: share, clock: clk}).pauseLocks(ctx) // the wake-up's look
	require.NoError(t, err)
	require.Len(t, locks, 1)
}
