package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/patch-agent/patch-agent/internal/state"
)

// recordCache keeps each group's rollout record as this process last read it from the store or wrote it
// (engine.Orchestrator.Stored), so that a look at a few targets (a wake-up, a parameter change, the end
// of a timed wait) reads no rollout record instead of one listing of every rollout record per look.
// It is safe because every write is conditional on the record's version and made before its effect
// (docs/architecture.md, "Crash safety"): a record changed by someone else since makes that write fail with
// state.ErrConflict, never an AWS call, and the entry is then dropped so the next look reads the store. While
// this replica holds a rollout's lease it is that rollout's only writer; the other writers are:
//
//   - other replicas: only on a record whose lease has lapsed or that carries none (Idle, Completed,
//     RolledBack), which the version condition covers; a record whose lease another replica holds is never
//     kept, so a takeover always starts from the store;
//   - the operator commands (approve, approve --skip-soak, rollback: internal/operator) and `eks upgrade`
//     (node group records, which are never kept): each is followed by an operator wake-up, whose look must
//     read the store (Agent.Reread drops the entry first);
//   - nobody else: the safety poll (every full pass) lists every record again and replaces the entries.
//
// Safe for concurrent use. Entries carry an epoch: an entry dropped while a look was stepping its target is
// not put back by that look (its record was chosen before the drop).
type recordCache struct {
	mu      sync.Mutex
	entries map[string]state.Rollout
	epoch   map[string]uint64
}

// get returns the kept record of group (ok false when none is kept) and the group's epoch, which put needs.
func (c *recordCache) get(group string) (r state.Rollout, ok bool, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok = c.entries[group]
	return r.Clone(), ok, c.epoch[group]
}

// put keeps r as group's record unless the entry was dropped since get returned epoch.
func (c *recordCache) put(group string, r state.Rollout, epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch[group] != epoch {
		return
	}
	if c.entries == nil {
		c.entries = map[string]state.Rollout{}
	}
	c.entries[group] = r.Clone()
}

// drop forgets group's record: the next look reads it from the store.
func (c *recordCache) drop(group string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch == nil {
		c.epoch = map[string]uint64{}
	}
	c.epoch[group]++
	delete(c.entries, group)
}

// listed keeps the records of a full listing (state.Store.ListRollouts) taken when the epochs were epochs
// (snapshot): a kept record of a higher version is newer (an index read may be a write behind, docs/state.md)
// and stays; a group dropped since the snapshot is left out; a kept record the listing lacks is forgotten
// (the next look at it reads the store), so the entries stay bounded by the records stored. It returns the
// records by group, the newest known.
func (c *recordCache) listed(list []state.Rollout, epochs map[string]uint64) map[string]state.Rollout {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]state.Rollout, len(list))
	kept := c.entries
	c.entries = make(map[string]state.Rollout, len(list))
	for _, r := range list {
		out[r.Group] = r
		if c.epoch[r.Group] != epochs[r.Group] {
			continue
		}
		if k, ok := kept[r.Group]; ok && k.Version > r.Version {
			out[r.Group], c.entries[r.Group] = k.Clone(), k
			continue
		}
		c.entries[r.Group] = r.Clone()
	}
	return out
}

// snapshot returns every group's epoch now.
func (c *recordCache) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.epoch))
	for g, e := range c.epoch {
		out[g] = e
	}
	return out
}

// Reread makes the next look at each group read its rollout record from the store instead of the one this
// process kept, and the next pause check read the pause locks instead of the shared listing (pool.go): for a
// look caused by an operator wake-up (approve, rollback, pause, resume: someone else wrote the record or a
// lock; the operator wake-up's handler calls it before it wakes the target). Without it such a write is seen
// at the safety poll (a lock: once the shared listing is lockShareMaxAge old), or when this process's next
// write on the record fails its version condition.
func (a *Agent) Reread(groups ...string) {
	for _, g := range groups {
		a.records.drop(g)
	}
	a.pauseLocks.forget() // pause and resume send an operator wake-up: the look it causes reads the locks (pool.go)
}

// readRecords returns the rollout records a pass needs, by group. A full pass (only nil: the safety poll,
// a tick) lists every record (one Query of kind-index, state.Store.ListRollouts) and keeps them; with a store
// that lists the pause locks in the same read (state.RolloutsAndLocksLister: one Scan of kind-index) it
// returns those too (locks, read true), which the pass's first pause checks use (pass.pauseLocks). A look at
// some targets uses the kept record of each named target and reads the others (one consistent GetItem each,
// state.Store.GetRollout; ErrNotFound: no record yet). It also returns the epochs of the kept records before
// the read, which reconcileTarget compares to tell a record dropped since (Reread, a lost write). Errors are
// the store's, wrapped.
func (a *Agent) readRecords(ctx context.Context, only map[string]bool) (records map[string]state.Rollout, epochs map[string]uint64, locks []state.Lock, read bool, err error) {
	epochs = a.records.snapshot()
	if only == nil {
		if lister, ok := a.store.(state.RolloutsAndLocksLister); ok {
			list, locks, err := lister.ListRolloutsAndLocks(ctx)
			if err != nil {
				return nil, nil, nil, false, fmt.Errorf("reading rollouts and pause locks: %w", err)
			}
			return a.records.listed(list, epochs), epochs, locks, true, nil
		}
		list, err := a.store.ListRollouts(ctx)
		if err != nil {
			return nil, nil, nil, false, fmt.Errorf("reading rollouts: %w", err)
		}
		return a.records.listed(list, epochs), epochs, nil, false, nil
	}
	records = make(map[string]state.Rollout, len(only))
	for name := range only {
		if r, ok, epoch := a.records.get(name); ok && epoch == epochs[name] {
			records[name] = r
			continue
		}
		r, err := a.store.GetRollout(ctx, name)
		switch {
		case err == nil:
			records[name] = r
		case !errors.Is(err, state.ErrNotFound):
			return nil, nil, nil, false, fmt.Errorf("reading rollout of %s: %w", name, err)
		}
	}
	return records, epochs, nil, false, nil
}

// recordFor returns the record reconcileTarget steps name from: the one pass p read, unless the kept record
// was dropped since the pass read it (read from the store again), or this process wrote a newer one since
// (stepped by a pass beside this one: the kept one), or a pass beside stepped it and kept none (read from the
// store again). It returns the group's epoch for keep. Errors are the store's.
func (a *Agent) recordFor(ctx context.Context, p *pass, name string, steppedSince bool) (state.Rollout, bool, uint64, error) {
	rec, known := p.record(name)
	kept, ok, epoch := a.records.get(name)
	reread := false
	switch {
	case epoch != p.epochs[name]:
		reread = true
	case ok && (!known || kept.Version >= rec.Version):
		return kept, true, epoch, nil
	case steppedSince:
		reread = true
	}
	if reread {
		stored, err := a.store.GetRollout(ctx, name)
		switch {
		case err == nil:
			return stored, true, epoch, nil
		case !errors.Is(err, state.ErrNotFound):
			return rec, known, epoch, err
		}
		known = false
	}
	return rec, known, epoch, nil
}

// keep records the outcome of a target's step: the record as stored (engine.Orchestrator.Stored) is kept
// for the next look, unless a write of the step failed (lost race or unknown outcome) or another replica
// holds the record's lease, in which case the next look reads the store.
func (a *Agent) keep(name string, stored state.Rollout, ok bool, epoch uint64) {
	if !ok || stored.Group != name || (stored.LeaseOwner != "" && stored.LeaseOwner != a.orchestrator.Owner) {
		a.records.drop(name)
		return
	}
	a.records.put(name, stored, epoch)
}
