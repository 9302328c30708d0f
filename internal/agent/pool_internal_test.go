package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/state"
)

// The pause locks a pass read with its records answer its pause checks for passLocksFresh; a check later in
// a long pass reads them again, so a pause taken after the pass's read holds the steps it has not begun.
func TestAPassReadsThePauseLocksAgainOnceItsListingIsOlderThanASecond(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC))
	store := state.NewMemory()
	p := &pass{store: store, locksRead: true, locksAt: clk.Now(), clock: clk}
	require.NoError(t, store.PutLock(ctx, state.Lock{Group: "g", Reason: "freeze", Who: "alice", Since: clk.Now()}))
	locks, err := p.pauseLocks(ctx)
	require.NoError(t, err)
	require.Empty(t, locks, "within a second of the pass's listing: its locks")
	clk.SetTime(clk.Now().Add(passLocksFresh + time.Millisecond))
	locks, err = p.pauseLocks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1, "later: read again")
	p = &pass{store: store, clock: clk}
	locks, err = p.pauseLocks(ctx)
	require.NoError(t, err)
	require.Len(t, locks, 1, "a pass that read no locks with its records reads them")
}
