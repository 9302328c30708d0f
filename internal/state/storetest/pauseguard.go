package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// testGuardedWrite is the contract of PutRolloutUnlessPaused and PauseHolding (invariant 7): with no lock,
// with an expired one, or with another group's lock the write behaves as PutRolloutWithHistory; the global
// lock or the group's own that holds at now stops it with an error wrapping ErrPaused that carries the lock
// as stored, and writes neither the record nor its history entry; a lost version race with no lock is
// ErrConflict, not ErrPaused; a lock whose Until is at a fractional second or in another zone is judged as a
// time (a string comparison would misjudge "…:00.5Z" against "…:00Z").
func testGuardedWrite(t *testing.T, s state.Store) {
	c := ctx(t)
	v1, err := s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseReplacing})
	require.NoError(t, err)
	now := at.Add(time.Hour)
	write := func(r state.Rollout, event string) (state.Rollout, error) {
		return s.PutRolloutUnlessPaused(c, r, []state.HistoryEntry{{Group: "g", At: now, Event: event}}, now, nil)
	}

	// No lock; another group's lock; an expired global lock (Until half a second before now, in UTC+2).
	require.NoError(t, s.PutLock(c, state.Lock{Group: "other", Reason: "not g", Who: "bob", Since: at}))
	zone := time.FixedZone("UTC+2", 2*3600)
	require.NoError(t, s.PutLock(c, state.Lock{Group: state.GlobalScope, Reason: "over", Who: "bob", Since: at,
		Until: now.Add(-500 * time.Millisecond).In(zone)}))
	held, err := s.PauseHolding(c, "g", now)
	require.NoError(t, err)
	require.Nil(t, held, "no lock of g holds: an expired global lock and another group's lock")
	v2, err := write(v1, "unpaused")
	require.NoError(t, err)
	require.Equal(t, int64(2), v2.Version)

	// A lost version race is a conflict, not a pause.
	_, err = write(v1, "stale")
	require.ErrorIs(t, err, state.ErrConflict)
	require.NotErrorIs(t, err, state.ErrPaused)

	for _, lock := range []state.Lock{
		{Group: "g", Reason: "incident", Who: "alice", Since: at},
		{Group: "g", Reason: "ends in half a second", Who: "alice", Since: at, Until: now.Add(500 * time.Millisecond).In(zone)},
		{Group: state.GlobalScope, Reason: "freeze", Who: "carol", Since: at, Until: now.Add(time.Hour)},
	} {
		require.NoError(t, s.PutLock(c, lock))
		held, err := s.PauseHolding(c, "g", now)
		require.NoError(t, err)
		require.NotNil(t, held, "%s lock holds", lock.Scope())
		require.Equal(t, lock.Reason, held.Reason)

		_, err = write(v2, "paused")
		require.ErrorIs(t, err, state.ErrPaused, "%s lock (%s)", lock.Scope(), lock.Reason)
		require.NotErrorIs(t, err, state.ErrConflict)
		got, ok := state.PausedBy(err)
		require.True(t, ok, "the error carries the lock: %v", err)
		require.Equal(t, lock.Group, got.Group)
		require.Equal(t, lock.Reason, got.Reason)
		require.Equal(t, lock.Who, got.Who)

		stored, err := s.GetRollout(c, "g")
		require.NoError(t, err)
		require.Equal(t, int64(2), stored.Version, "nothing written while paused")
		require.NoError(t, s.DeleteLock(c, lock.Group))
	}
	hist, err := s.History(c, "g")
	require.NoError(t, err)
	require.Equal(t, []string{"unpaused"}, events(hist), "a stopped write leaves no history entry")

	// Paused and raced at once: the pause is told (the step waits either way).
	require.NoError(t, s.PutLock(c, state.Lock{Group: "g", Reason: "both", Who: "alice", Since: at}))
	_, err = write(v1, "stale and paused")
	require.ErrorIs(t, err, state.ErrPaused)
	require.NoError(t, s.DeleteLock(c, "g"))

	// Resumed: the write goes through at the version it read.
	v3, err := write(v2, "resumed")
	require.NoError(t, err)
	require.Equal(t, int64(3), v3.Version)
}
