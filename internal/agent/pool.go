package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// DefaultWorkers is how many targets a reconcile pass advances at once when Settings.Workers is unset: enough
// that a pass over 1,000 groups at 40 ms per AWS call stays within seconds, few enough that one pass's calls
// stay inside the client-side rate limits (awsapi.DefaultRateLimits) rather than queueing behind them.
const DefaultWorkers = 8

// targetGuard makes sure one target (an Auto Scaling group or a managed node group key) is advanced by one
// goroutine at a time within this process: the worker pool of a pass, the look a parameter change triggers
// and the look a wake-up triggers may name the same target at once. Across replicas the store's lease
// (state.Leased) does the same. Safe for concurrent use; the zero value is ready. It keeps one slot per target
// ever advanced (a few dozen bytes each).
type targetGuard struct {
	mu    sync.Mutex
	slots map[string]*targetSlot
	// onWait, when set, is told each time a goroutine has to wait for a target another one advances (tests).
	onWait func(target string)
}

// targetSlot is one target's guard: its lock and the sequence number (Agent.steps) of the last step finished
// on the target, which tells a pass whether the record it read before may be stale.
type targetSlot struct {
	mu   sync.Mutex
	last uint64
}

// lock waits until no other goroutine advances target, then returns its slot, held; the caller unlocks
// slot.mu.
func (g *targetGuard) lock(target string) *targetSlot {
	g.mu.Lock()
	if g.slots == nil {
		g.slots = map[string]*targetSlot{}
	}
	s, ok := g.slots[target]
	if !ok {
		s = &targetSlot{}
		g.slots[target] = s
	}
	onWait := g.onWait
	g.mu.Unlock()
	if !s.mu.TryLock() {
		if onWait != nil {
			onWait(target)
		}
		s.mu.Lock()
	}
	return s
}

// forEachTarget calls step for every name with at most workers calls at once, and returns when all have
// returned (or, once ctx is done, when the calls in flight have returned: names not started are skipped; the
// next pass looks at them). workers < 1 runs one at a time. Names are handed out in order.
func forEachTarget(ctx context.Context, workers int, names []string, step func(name string)) {
	workers = max(1, min(workers, len(names)))
	if workers == 1 {
		for _, name := range names {
			if ctx.Err() != nil {
				return
			}
			step(name)
		}
		return
	}
	next := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range next {
				step(name)
			}
		}()
	}
	defer func() { close(next); wg.Wait() }()
	for _, name := range names {
		select {
		case next <- name:
		case <-ctx.Done():
			return
		}
	}
}

// pass is what one reconcile pass read once for all its targets. The records and the cluster views are
// written by its workers; the rest is read only.
type pass struct {
	d        providers.Discovered
	store    state.Store
	readAt   uint64 // Agent.steps when the records were read: a target stepped after it is read again
	pools    map[string]providers.WarmPool
	images   map[string]string
	launched map[string]time.Time
	// epochs are the kept records' epochs when the records were read (records.go)
	epochs map[string]uint64
	// look: a look at a few targets (not a full pass), whose cluster views may describe the known members
	// without listing the cluster (observeCluster)
	look bool
	// locks are the pause locks read with the records at locksAt (locksRead; readRecords), served by
	// pauseLocks for up to passLocksFresh after; clock tells the time
	locks     []state.Lock
	locksRead bool
	locksAt   time.Time
	clock     clock.PassiveClock

	mu      sync.Mutex
	records map[string]state.Rollout
	nodes   map[string]*clusterView // by platform/cluster
}

// pauseLocks returns every pause lock (state.Store.ListLocks), read when a target of the pass needs them —
// right before its first new destructive step (model.Inputs.PauseRead) — and again for every target that
// needs them: a pause taken while a long pass runs (a fleet pass lasts seconds to minutes under the rate
// limits) holds every destructive step the pass has not begun yet, not only those of the next pass. A pass
// whose targets only wait reads none: waiting costs no store read. A failed read holds the target's step; the
// next one reads again. Locks the pass read with its records (readRecords) serve for passLocksFresh after that
// read instead of a ListLocks of their own: the same eventually consistent index read, at most that much older.
func (p *pass) pauseLocks(ctx context.Context) ([]state.Lock, error) {
	if p.locksRead && p.clock != nil && p.clock.Since(p.locksAt) <= passLocksFresh {
		return slices.Clone(p.locks), nil
	}
	locks, err := p.store.ListLocks(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading pause locks: %w", err)
	}
	return locks, nil
}

// passLocksFresh is how long the pause locks a full pass read with its rollout records (one Scan of the index
// that holds both) answer its targets' pause checks: within it the read is as fresh as a ListLocks of its own
// would be, give or take the index's own lag (normally under a second); targets whose checks come later in a
// long pass read the locks again.
const passLocksFresh = time.Second

// clusterView is one cluster's nodes as observed once per pass (model.Platform.Observe), by the first
// target under a rollout that needs them; its lock makes the other targets of the cluster wait for that
// observation instead of repeating it. A failed observation is not kept: the next target tries again.
type clusterView struct {
	mu    sync.Mutex
	seen  bool
	nodes map[string]model.NodeState
}

func (p *pass) record(group string) (state.Rollout, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.records[group]
	return r, ok
}

func (p *pass) setRecord(group string, r state.Rollout) {
	p.mu.Lock()
	p.records[group] = r
	p.mu.Unlock()
}

func (p *pass) cluster(key string) *clusterView {
	p.mu.Lock()
	defer p.mu.Unlock()
	cv, ok := p.nodes[key]
	if !ok {
		cv = &clusterView{}
		p.nodes[key] = cv
	}
	return cv
}
