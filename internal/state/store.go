// Package state holds the agent's durable records — one rollout record per target, lifecycle action
// progress, processed-event markers and AMI history — behind the Store interface. Every rollout step
// transition is one conditional write (PutRollout with the version read), so a crash or a second replica can
// never repeat or skip a step. memory.go is the in-process implementation used by tests and the demo; the
// DynamoDB implementation drops in behind the same interface.
package state

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("record not found")

// ErrConflict is returned by a conditional write whose expected version no longer matches the stored one:
// someone else (another replica, or this agent before a crash) moved the record first. Re-read and re-decide.
var ErrConflict = errors.New("conditional write failed: record changed since it was read")

// MaxHistoryPerWrite bounds the history entries of one PutRolloutWithHistory: a DynamoDB transaction holds
// at most 100 items (Amazon DynamoDB API Reference, TransactWriteItems), one of them the rollout record.
const MaxHistoryPerWrite = 99

// checkHistoryOf returns an error when history cannot be written with r: too many entries, or an entry of
// another group.
func checkHistoryOf(r Rollout, history []HistoryEntry) error {
	if len(history) > MaxHistoryPerWrite {
		return fmt.Errorf("writing rollout of %s with %d history entries: at most %d in one write", r.Group, len(history), MaxHistoryPerWrite)
	}
	for _, e := range history {
		if e.Group != r.Group {
			return fmt.Errorf("writing rollout of %s: history entry %q is of group %q", r.Group, e.Event, e.Group)
		}
	}
	return nil
}

// RolloutsAndLocksLister is implemented by a Store that lists every rollout record and every pause lock in one
// read (the DynamoDB store: one Scan page of the index IndexKind, which holds only those two kinds, instead
// of a Query of each). The answer is what ListRollouts and ListLocks would return at that moment, as
// (eventually) consistent as they are.
type RolloutsAndLocksLister interface {
	ListRolloutsAndLocks(ctx context.Context) ([]Rollout, []Lock, error)
}

// Store persists the agent's records. Implementations must be safe for concurrent use.
type Store interface {
	// GetRollout returns the rollout record of a target (an Auto Scaling group name), or ErrNotFound.
	GetRollout(ctx context.Context, group string) (Rollout, error)
	// PutRollout writes r if the stored record's Version equals r.Version (0 = must not exist yet), and
	// returns the record as stored with Version incremented. ErrConflict otherwise.
	PutRollout(ctx context.Context, r Rollout) (Rollout, error)
	// PutRolloutWithHistory writes r exactly like PutRollout and appends the history entries that record the
	// transition in the same atomic write: both happen or neither does, so a writer that loses the race
	// (ErrConflict) leaves no history entry behind. Every entry's Group must be r.Group; at most
	// MaxHistoryPerWrite entries. No entries is PutRollout.
	PutRolloutWithHistory(ctx context.Context, r Rollout, history []HistoryEntry) (Rollout, error)
	// PutRolloutUnlessPaused writes r and history exactly like PutRolloutWithHistory, in one atomic write
	// that also checks, strongly consistently, that neither the global pause lock nor r.Group's lock holds at
	// now (absent, or with Until set and not after now): the write-ahead of a destructive step carries its own
	// pause check (invariant 7, docs/architecture.md). A holding lock writes nothing and returns an error
	// wrapping ErrPaused (a *PausedError: PausedBy gives the lock); a lost version race is ErrConflict, as
	// always. At most MaxHistoryPerGuardedWrite entries. A non-nil claim (a drain slot taken, PlanDrainSlot)
	// is written in the same atomic write, conditionally on claim.Version as PutClusterBudget does: the
	// drain's write-ahead and its slot are durable together or not at all, so a pause or a lost race leaves
	// no slot to give back; a budget moved since it was read writes nothing and returns an error wrapping
	// ErrBudgetChanged (not ErrConflict: the rollout record was not raced).
	PutRolloutUnlessPaused(ctx context.Context, r Rollout, history []HistoryEntry, now time.Time, claim *ClusterBudget) (Rollout, error)
	// PauseHolding reads the global pause lock and group's lock with strongly consistent reads (unlike
	// ListLocks) and returns the one that holds at now (Lock.Active; the global one first), nil when none:
	// the pause check of a destructive step that no guarded write precedes (a step resumed after a crash or
	// retried after an error).
	PauseHolding(ctx context.Context, group string, now time.Time) (*Lock, error)
	// ListRollouts returns every rollout record, sorted by group name.
	ListRollouts(ctx context.Context) ([]Rollout, error)

	// GetHook returns the progress record of a lifecycle action by its key (Hook.Token), or ErrNotFound.
	GetHook(ctx context.Context, token string) (Hook, error)
	// PutHook writes h conditionally on h.Version exactly like PutRollout.
	PutHook(ctx context.Context, h Hook) (Hook, error)

	// AppendHistory records one AMI change or rollout outcome of a target.
	AppendHistory(ctx context.Context, e HistoryEntry) error
	// History returns a target's entries, oldest first.
	History(ctx context.Context, group string) ([]HistoryEntry, error)

	// PutLock writes (creates or replaces) the pause lock of l.Group (GlobalScope for all targets).
	PutLock(ctx context.Context, l Lock) error
	// PutLockIfAbsent writes l only when its scope has no lock that holds at now (none, or one whose Until is
	// not after now), in one strongly consistent conditional write: two operators pausing at once never
	// overwrite each other, and a lock lifted a moment before is never mistaken for one in place, as an
	// eventually consistent ListLocks could. When a holding lock stops the write it returns that lock and
	// written false, and writes nothing.
	PutLockIfAbsent(ctx context.Context, l Lock, now time.Time) (held Lock, written bool, err error)
	// DeleteLock removes the pause lock of a scope; deleting a lock that does not exist is not an error.
	DeleteLock(ctx context.Context, group string) error
	// LiftLock removes the pause lock of a scope and returns the lock it removed (false: there was none), as
	// of the removal itself, read strongly consistently, so a pause taken a moment before is lifted and
	// reported, not missed by a lagging listing, and a removal whose answer was lost and retried is still
	// reported (patch-agent resume).
	LiftLock(ctx context.Context, group string) (Lock, bool, error)
	// ListLocks returns every pause lock, the global one first, expired ones included.
	ListLocks(ctx context.Context) ([]Lock, error)

	// MarkEvent records that the event with this id was processed, to give duplicate deliveries (SQS
	// at-least-once, EventBridge retries) one effect. It returns false when the id was already recorded.
	// Records may be dropped after expires (DynamoDB TTL).
	MarkEvent(ctx context.Context, id string, expires time.Time) (first bool, err error)
	// EventSeen reports whether MarkEvent recorded the id (and the record was not dropped yet).
	EventSeen(ctx context.Context, id string) (bool, error)

	// PutDrainMark writes (creates or replaces) the drain mark of m.InstanceID.
	PutDrainMark(ctx context.Context, m DrainMark) error
	// DeleteDrainMark removes the drain mark of an instance; deleting a missing mark is not an error.
	DeleteDrainMark(ctx context.Context, instanceID string) error
	// ListDrainMarks returns every drain mark, sorted by instance id. It reads only the marks (one DynamoDB
	// Query), so the reconcile tick may call it every time.
	ListDrainMarks(ctx context.Context) ([]DrainMark, error)

	// GetClusterBudget returns the per-cluster budget record of cluster ("<platform>/<name>"), or ErrNotFound.
	GetClusterBudget(ctx context.Context, cluster string) (ClusterBudget, error)
	// PutClusterBudget writes b conditionally on b.Version exactly like PutRollout (budget.go: ClaimDrainSlot;
	// a drain's claim rides on its write-ahead instead, PutRolloutUnlessPaused).
	PutClusterBudget(ctx context.Context, b ClusterBudget) (ClusterBudget, error)
}
