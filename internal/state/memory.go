package state

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Memory is an in-process Store. It keeps the same conditional-write semantics as the DynamoDB store so that
// code tested against it behaves the same in production. The zero value is not usable: call NewMemory.
type Memory struct {
	mu       sync.Mutex
	rollouts map[string]Rollout
	hooks    map[string]Hook
	history  map[string][]HistoryEntry
	locks    map[string]Lock
	events   map[string]time.Time
	marks    map[string]DrainMark
	budgets  map[string]ClusterBudget // per-cluster budgets (memory_budget.go), made on first write
	// Writes counts successful conditional writes (rollouts and hooks), for tests and benchmarks.
	Writes int
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{rollouts: map[string]Rollout{}, hooks: map[string]Hook{}, history: map[string][]HistoryEntry{},
		locks: map[string]Lock{}, events: map[string]time.Time{}, marks: map[string]DrainMark{}}
}

// GetRollout implements Store.
func (m *Memory) GetRollout(_ context.Context, group string) (Rollout, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rollouts[group]
	if !ok {
		return Rollout{}, fmt.Errorf("rollout of %s: %w", group, ErrNotFound)
	}
	return clone(r), nil
}

// PutRollout implements Store.
func (m *Memory) PutRollout(_ context.Context, r Rollout) (Rollout, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.rollouts[r.Group]
	if (!ok && r.Version != 0) || (ok && cur.Version != r.Version) {
		return Rollout{}, fmt.Errorf("rollout of %s at version %d: %w", r.Group, r.Version, ErrConflict)
	}
	r.Version++
	m.rollouts[r.Group] = clone(r)
	m.Writes++
	return clone(r), nil
}

// PutRolloutWithHistory implements Store: the version check, the write and the appends under one lock.
func (m *Memory) PutRolloutWithHistory(_ context.Context, r Rollout, history []HistoryEntry) (Rollout, error) {
	if err := checkHistoryOf(r, history); err != nil {
		return Rollout{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.putWithHistoryLocked(r, history)
}

// putWithHistoryLocked writes r conditionally on its version and appends history. The caller holds m.mu.
func (m *Memory) putWithHistoryLocked(r Rollout, history []HistoryEntry) (Rollout, error) {
	cur, ok := m.rollouts[r.Group]
	if (!ok && r.Version != 0) || (ok && cur.Version != r.Version) {
		return Rollout{}, fmt.Errorf("rollout of %s at version %d: %w", r.Group, r.Version, ErrConflict)
	}
	r.Version++
	m.rollouts[r.Group] = clone(r)
	m.history[r.Group] = append(m.history[r.Group], history...)
	m.Writes++
	return clone(r), nil
}

// PutRolloutUnlessPaused implements Store: the locks, the version checks, the writes and the appends under one
// lock, so a pause put before the call always stops it, and the claim is written with the record or not at
// all.
func (m *Memory) PutRolloutUnlessPaused(_ context.Context, r Rollout, history []HistoryEntry, now time.Time, claim *ClusterBudget) (Rollout, error) {
	if len(history) > MaxHistoryPerGuardedWrite {
		return Rollout{}, fmt.Errorf("writing rollout of %s with %d history entries: at most %d in one guarded write", r.Group, len(history), MaxHistoryPerGuardedWrite)
	}
	if err := checkHistoryOf(r, history); err != nil {
		return Rollout{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, scope := range []string{GlobalScope, r.Group} { // a pause is told before a lost race, as DynamoDB's is
		if l, ok := m.locks[scope]; ok && lockHolds(l, now) {
			return Rollout{}, fmt.Errorf("writing rollout of %s at version %d: %w", r.Group, r.Version, &PausedError{Lock: l})
		}
	}
	if claim == nil {
		return m.putWithHistoryLocked(r, history)
	}
	if claim.Cluster == "" {
		return Rollout{}, fmt.Errorf("writing rollout of %s with a drain slot claim: cluster is empty", r.Group)
	}
	if cur, ok := m.rollouts[r.Group]; (!ok && r.Version != 0) || (ok && cur.Version != r.Version) {
		return Rollout{}, fmt.Errorf("rollout of %s at version %d: %w", r.Group, r.Version, ErrConflict) // told before the budget, as DynamoDB's is
	}
	if cur, ok := m.budgets[claim.Cluster]; (!ok && claim.Version != 0) || (ok && cur.Version != claim.Version) {
		return Rollout{}, fmt.Errorf("writing rollout of %s with the budget of cluster %s at version %d: %w", r.Group, claim.Cluster, claim.Version, ErrBudgetChanged)
	}
	out, err := m.putWithHistoryLocked(r, history)
	if err != nil {
		return Rollout{}, err
	}
	m.putBudgetLocked(*claim)
	return out, nil
}

// PauseHolding implements Store.
func (m *Memory) PauseHolding(_ context.Context, group string, now time.Time) (*Lock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, scope := range []string{GlobalScope, group} {
		if l, ok := m.locks[scope]; ok && lockHolds(l, now) {
			return &l, nil
		}
	}
	return nil, nil
}

// ListRollouts implements Store.
func (m *Memory) ListRollouts(_ context.Context) ([]Rollout, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Rollout, 0, len(m.rollouts))
	for _, r := range m.rollouts {
		out = append(out, clone(r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// ListRolloutsAndLocks implements RolloutsAndLocksLister: ListRollouts and ListLocks at one moment.
func (m *Memory) ListRolloutsAndLocks(ctx context.Context) ([]Rollout, []Lock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rollouts := make([]Rollout, 0, len(m.rollouts))
	for _, r := range m.rollouts {
		rollouts = append(rollouts, clone(r))
	}
	sort.Slice(rollouts, func(i, j int) bool { return rollouts[i].Group < rollouts[j].Group })
	locks := make([]Lock, 0, len(m.locks))
	for _, l := range m.locks {
		locks = append(locks, l)
	}
	sort.Slice(locks, func(i, j int) bool { return locks[i].Group < locks[j].Group })
	return rollouts, locks, nil
}

// GetHook implements Store.
func (m *Memory) GetHook(_ context.Context, token string) (Hook, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.hooks[token]
	if !ok {
		return Hook{}, fmt.Errorf("lifecycle action %s: %w", token, ErrNotFound)
	}
	return h, nil
}

// PutHook implements Store.
func (m *Memory) PutHook(_ context.Context, h Hook) (Hook, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.hooks[h.Token]
	if (!ok && h.Version != 0) || (ok && cur.Version != h.Version) {
		return Hook{}, fmt.Errorf("lifecycle action %s at version %d: %w", h.Token, h.Version, ErrConflict)
	}
	h.Version++
	m.hooks[h.Token] = h
	m.Writes++
	return h, nil
}

// AppendHistory implements Store.
func (m *Memory) AppendHistory(_ context.Context, e HistoryEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.history[e.Group] = append(m.history[e.Group], e)
	return nil
}

// History implements Store: entries sorted by time, entries of the same instant in append order (like the
// DynamoDB store's time-then-sequence sort keys).
func (m *Memory) History(_ context.Context, group string) ([]HistoryEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]HistoryEntry(nil), m.history[group]...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}

// Clone returns a deep copy of r: its Current replacement, template reference and slices are not shared.
func (r Rollout) Clone() Rollout { return clone(r) }

// clone deep-copies the slices and pointers of a rollout so callers never share memory with the store.
func clone(r Rollout) Rollout {
	if r.PreviousTemplate != nil {
		t := *r.PreviousTemplate
		r.PreviousTemplate = &t
	}
	if r.Current != nil {
		c := *r.Current
		r.Current = &c
	}
	r.Replaced = append([]string(nil), r.Replaced...)
	r.Nodegroup = cloneNodegroup(r.Nodegroup)
	r.Refresh = cloneRefresh(r.Refresh)
	return r
}

// PutLock implements Store.
func (m *Memory) PutLock(_ context.Context, l Lock) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.locks[l.Group] = l
	return nil
}

// PutLockIfAbsent implements Store.
func (m *Memory) PutLockIfAbsent(_ context.Context, l Lock, now time.Time) (Lock, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if held, ok := m.locks[l.Group]; ok && held.Active(now) {
		return held, false, nil
	}
	m.locks[l.Group] = l
	return Lock{}, true, nil
}

// DeleteLock implements Store.
func (m *Memory) DeleteLock(_ context.Context, group string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.locks, group)
	return nil
}

// LiftLock implements Store.
func (m *Memory) LiftLock(_ context.Context, group string) (Lock, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[group]
	delete(m.locks, group)
	return l, ok, nil
}

// ListLocks implements Store.
func (m *Memory) ListLocks(_ context.Context) ([]Lock, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Lock, 0, len(m.locks))
	for _, l := range m.locks {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out, nil
}

// MarkEvent implements Store. Expired records are kept (like DynamoDB TTL, removal is best effort).
func (m *Memory) MarkEvent(_ context.Context, id string, expires time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.events[id]; ok {
		return false, nil
	}
	m.events[id] = expires
	return true, nil
}

// EventSeen implements Store.
func (m *Memory) EventSeen(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.events[id]
	return ok, nil
}

// PutDrainMark implements Store.
func (m *Memory) PutDrainMark(_ context.Context, d DrainMark) error {
	if d.InstanceID == "" {
		return fmt.Errorf("writing drain mark: instance id is empty")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.marks[d.InstanceID] = d
	return nil
}

// DeleteDrainMark implements Store.
func (m *Memory) DeleteDrainMark(_ context.Context, instanceID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.marks, instanceID)
	return nil
}

// ListDrainMarks implements Store.
func (m *Memory) ListDrainMarks(_ context.Context) ([]DrainMark, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]DrainMark, 0, len(m.marks))
	for _, d := range m.marks {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].InstanceID < out[j].InstanceID })
	return out, nil
}
