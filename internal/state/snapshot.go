package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"
)

// Snapshot format identifiers: Save writes them, LoadMemory accepts only them.
const (
	SnapshotFormat  = "patch-agent/state-snapshot"
	SnapshotVersion = 1
)

// snapshot is the JSON document of a memory store: every record, versions included, in a stable order
// (rollouts and history by group, hooks by token, locks with the global one first, events by id).
type snapshot struct {
	Format   string           `json:"format"`
	Version  int              `json:"version"`
	Rollouts []Rollout        `json:"rollouts"`
	Hooks    []Hook           `json:"hooks"`
	History  []HistoryEntry   `json:"history"`
	Locks    []Lock           `json:"locks"`
	Events   []snapshotMarker `json:"events"`
	// Workflows are the EKS upgrade workflow records (workflow.go), by cluster; absent when there are none.
	Workflows []Workflow `json:"workflows,omitempty"`
}

// snapshotMarker is one processed-event marker; a zero Expires means the marker never expires.
type snapshotMarker struct {
	ID      string    `json:"id"`
	Expires time.Time `json:"expires,omitzero"`
}

// Save writes every record of the store — rollouts, lifecycle actions, history, pause locks and processed
// events, with their versions — to w as one indented JSON document that LoadMemory reads back. It is how a
// demo's store outlives the demo (`patch-agent demo --state-file`). History entries keep their append order.
// The Writes counter is not saved. Errors are those of encoding or of w.
func (m *Memory) Save(w io.Writer) error {
	m.mu.Lock()
	s := snapshot{Format: SnapshotFormat, Version: SnapshotVersion, Rollouts: []Rollout{}, Hooks: []Hook{},
		History: []HistoryEntry{}, Locks: []Lock{}, Events: []snapshotMarker{}}
	for _, r := range m.rollouts {
		s.Rollouts = append(s.Rollouts, clone(r))
	}
	for _, h := range m.hooks {
		s.Hooks = append(s.Hooks, h)
	}
	groups := make([]string, 0, len(m.history))
	for g := range m.history {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		s.History = append(s.History, m.history[g]...)
	}
	for _, l := range m.locks {
		s.Locks = append(s.Locks, l)
	}
	for id, exp := range m.events {
		s.Events = append(s.Events, snapshotMarker{ID: id, Expires: exp})
	}
	s.Workflows = m.snapshotWorkflowsLocked()
	m.mu.Unlock()

	sort.Slice(s.Rollouts, func(i, j int) bool { return s.Rollouts[i].Group < s.Rollouts[j].Group })
	sort.Slice(s.Hooks, func(i, j int) bool { return s.Hooks[i].Token < s.Hooks[j].Token })
	sort.Slice(s.Locks, func(i, j int) bool { return s.Locks[i].Group < s.Locks[j].Group })
	sort.Slice(s.Events, func(i, j int) bool { return s.Events[i].ID < s.Events[j].ID })
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("writing state snapshot: %w", err)
	}
	return nil
}

// LoadMemory reads a snapshot written by Save into a new memory store. Records keep their versions, so
// conditional writes continue from them. It returns an error when r is not a snapshot of this format and
// version, or when a record lacks its key (rollout or history entry without group, hook without token,
// event without id) or appears twice.
func LoadMemory(r io.Reader) (*Memory, error) {
	var s snapshot
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("reading state snapshot: %w", err)
	}
	if s.Format != SnapshotFormat {
		return nil, fmt.Errorf("reading state snapshot: format %q, want %q (a file written by `patch-agent demo --state-file`)", s.Format, SnapshotFormat)
	}
	if s.Version != SnapshotVersion {
		return nil, fmt.Errorf("reading state snapshot: version %d, this patch-agent reads version %d", s.Version, SnapshotVersion)
	}
	m := NewMemory()
	var errs []error
	for i, ro := range s.Rollouts {
		switch _, dup := m.rollouts[ro.Group]; {
		case ro.Group == "":
			errs = append(errs, fmt.Errorf("rollout %d has no group", i))
		case dup:
			errs = append(errs, fmt.Errorf("rollout of %s appears twice", ro.Group))
		default:
			m.rollouts[ro.Group] = clone(ro)
		}
	}
	for i, h := range s.Hooks {
		switch _, dup := m.hooks[h.Token]; {
		case h.Token == "":
			errs = append(errs, fmt.Errorf("lifecycle action %d has no token", i))
		case dup:
			errs = append(errs, fmt.Errorf("lifecycle action %s appears twice", h.Token))
		default:
			m.hooks[h.Token] = h
		}
	}
	for i, e := range s.History {
		if e.Group == "" {
			errs = append(errs, fmt.Errorf("history entry %d has no group", i))
			continue
		}
		m.history[e.Group] = append(m.history[e.Group], e)
	}
	for _, l := range s.Locks {
		if _, dup := m.locks[l.Group]; dup {
			errs = append(errs, fmt.Errorf("%s lock appears twice", l.Scope()))
			continue
		}
		m.locks[l.Group] = l
	}
	for i, ev := range s.Events {
		switch _, dup := m.events[ev.ID]; {
		case ev.ID == "":
			errs = append(errs, fmt.Errorf("event marker %d has no id", i))
		case dup:
			errs = append(errs, fmt.Errorf("event marker %s appears twice", ev.ID))
		default:
			m.events[ev.ID] = ev.Expires
		}
	}
	errs = append(errs, m.loadWorkflows(s.Workflows)...)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("reading state snapshot: %w", err)
	}
	return m, nil
}

// ReplaceSnapshotRecords replaces every record of m that a snapshot holds — rollouts, lifecycle actions,
// history, pause locks, processed events and upgrade workflows, versions included — with from's, as if m had
// been loaded from a snapshot of from. The records a snapshot does not hold (drain marks, cluster budgets) and
// the Writes counter stay m's. It is how a store that others hold (an agent's, in a simulated world) takes the
// changes an operator command made to its snapshot file. from is left as it was; m and from must differ.
func (m *Memory) ReplaceSnapshotRecords(from *Memory) {
	from.mu.Lock()
	rollouts := make(map[string]Rollout, len(from.rollouts))
	for k, r := range from.rollouts {
		rollouts[k] = clone(r)
	}
	hooks := make(map[string]Hook, len(from.hooks))
	for k, h := range from.hooks {
		hooks[k] = h
	}
	history := make(map[string][]HistoryEntry, len(from.history))
	for k, es := range from.history {
		history[k] = append([]HistoryEntry(nil), es...)
	}
	locks := make(map[string]Lock, len(from.locks))
	for k, l := range from.locks {
		locks[k] = l
	}
	events := make(map[string]time.Time, len(from.events))
	for k, e := range from.events {
		events[k] = e
	}
	workflows := from.snapshotWorkflowsLocked()
	from.mu.Unlock()

	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollouts, m.hooks, m.history, m.locks, m.events = rollouts, hooks, history, locks, events
	table := m.workflowsLocked()
	clear(table)
	for _, w := range workflows {
		table[w.Cluster] = w
	}
}
