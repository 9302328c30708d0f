package state

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrPaused is wrapped by the error of PutRolloutUnlessPaused when a pause lock holds: the global lock or the
// group's own (Lock.Active at the write's now). Nothing was written; the step the write preceded must wait.
var ErrPaused = errors.New("paused: a pause lock holds")

// PausedError is the error of a guarded write that a pause lock stopped. Lock is the lock as the store read
// it in the same atomic write (or, when the store could not return it, read right after with a strongly
// consistent read); its Group is GlobalScope for the global lock.
type PausedError struct {
	Lock Lock
}

func (e *PausedError) Error() string {
	return fmt.Sprintf("%s: %s lock by %s", ErrPaused, e.Lock.Scope(), e.Lock.Who)
}

// Unwrap makes errors.Is(err, ErrPaused) true.
func (e *PausedError) Unwrap() error { return ErrPaused }

// PausedBy returns the lock that stopped a guarded write (PutRolloutUnlessPaused), and true; false when err
// is not such a stop.
func PausedBy(err error) (Lock, bool) {
	var pe *PausedError
	if errors.As(err, &pe) {
		return pe.Lock, true
	}
	return Lock{}, false
}

// MaxHistoryPerGuardedWrite bounds the history entries of one PutRolloutUnlessPaused: a DynamoDB transaction
// holds at most 100 items (Amazon DynamoDB API Reference, TransactWriteItems), one of them the rollout record,
// two the ConditionChecks of the global and the group's pause lock, and one the cluster budget a drain claims.
const MaxHistoryPerGuardedWrite = MaxHistoryPerWrite - 3

// AttrUntilNanos is the attribute of a pause lock item that holds Lock.Until as a Number of nanoseconds since
// the Unix epoch (absent when the lock has no end). The guard of PutRolloutUnlessPaused compares it, not the
// RFC 3339 string of Until: DynamoDB compares strings byte by byte, and time.RFC3339Nano trims trailing zeros
// ("…:00.5Z" sorts before "…:00Z") and keeps the writer's zone offset, so a string comparison can misjudge an
// expiry; Numbers compare as numbers (Amazon DynamoDB Developer Guide, "Comparison operator and function
// reference"). A lock written without it (by an earlier version of the agent or CLI) holds for the guard
// until its Until has passed; then the guarded write that it stopped adds the attribute (conditionally on
// the lock being unchanged) and is tried again, so an earlier version's `pause --until` still ends on time.
const AttrUntilNanos = "untilNanos"

// untilNanos is the AttrUntilNanos of a lock ending at until: its Unix time in nanoseconds, clamped to the int64
// range. time.Time.UnixNano is undefined past 2262-04-11 (it wraps round to a negative number), and a
// `pause --until 2300-01-01T00:00:00Z` stored that way would pass every guarded write while status shows the
// pause; clamped, such a lock holds as long as any int64 time can tell.
func untilNanos(until time.Time) int64 {
	switch {
	case until.After(maxNanosTime):
		return math.MaxInt64
	case until.Before(minNanosTime):
		return math.MinInt64
	}
	return until.UnixNano()
}

var (
	maxNanosTime = time.Unix(0, math.MaxInt64)
	minNanosTime = time.Unix(0, math.MinInt64)
)

// lockHolds reports whether l, stored, stops a guarded write at now: the memory store's reading of the guard,
// the same as the DynamoDB condition (absent, or untilNanos <= now).
func lockHolds(l Lock, now time.Time) bool { return l.Active(now) }
