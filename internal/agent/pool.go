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
	// locks is the agent's last listing of the pause locks (lockShare), which pauseLocks serves while it is
	// fresh; clock tells the time
	locks *lockShare
	clock clock.PassiveClock

	mu      sync.Mutex
	records map[string]state.Rollout
	nodes   map[string]*clusterView // by platform/cluster
}

// pauseLocks returns every pause lock (state.Store.ListLocks), read when a target needs them — right before
// its first new destructive step, or to see whether a pause cancels its refresh under way
// (model.Inputs.PauseRead) — or the agent's last listing while it is fresh (lockShare, at most lockShareMaxAge
// old: passes and looks share it, and a full pass's listing read with the records counts). A pass whose
// targets only wait reads none. A failed read holds the target's step; the next one reads again. Every new
// destructive step is guarded besides by its own strongly consistent pause check (its write-ahead's
// state.Store.PutRolloutUnlessPaused, or PauseHolding right before the effect), so a listing up to lockShareMaxAge old only delays the cancel of a refresh
// under way, never lets a new step past a pause (invariant 7, docs/architecture.md).
func (p *pass) pauseLocks(ctx context.Context) ([]state.Lock, error) {
	now, gen := p.clock.Now(), p.locks.generation()
	if locks, ok := p.locks.fresh(now); ok {
		return locks, nil
	}
	locks, err := p.store.ListLocks(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading pause locks: %w", err)
	}
	p.locks.offer(locks, now, gen)
	return locks, nil
}

// lockShareMaxAge is how old a listing of the pause locks may be for a target's pause check to use it: the
// 15 s of a reconcile tick, the bound invariant 7 gives a pause (docs/architecture.md).
const lockShareMaxAge = 15 * time.Second

// lockShare is the agent's last listing of the pause locks and when it was read (zero: none), shared by its
// passes and looks (pass.pauseLocks). An operator wake-up (Agent.Reread: pause and resume send one after their
// write) forgets it, so the look it causes reads the pause it announces. Safe for concurrent use.
type lockShare struct {
	mu    sync.Mutex
	locks []state.Lock
	at    time.Time
	// gen counts the forgets: a listing begun before one (its reader took generation before it) may predate
	// the pause the forget announces, and is not recorded
	gen uint64
}

// generation returns the count of forgets so far, to be taken before a listing that is offered later.
func (s *lockShare) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// offer records locks, listed at at by a reader that took generation gen before it, unless a forget came
// since (the listing may predate what it announced) or a later listing is recorded already.
func (s *lockShare) offer(locks []state.Lock, at time.Time, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || s.at.After(at) {
		return
	}
	s.locks, s.at = slices.Clone(locks), at
}

// fresh returns the recorded listing when it was read within lockShareMaxAge before now.
func (s *lockShare) fresh(now time.Time) ([]state.Lock, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || now.Before(s.at) || now.Sub(s.at) > lockShareMaxAge {
		return nil, false
	}
	return slices.Clone(s.locks), true
}

// forget drops the recorded listing: the next pause check reads the locks.
func (s *lockShare) forget() {
	s.mu.Lock()
	s.locks, s.at = nil, time.Time{}
	s.gen++
	s.mu.Unlock()
}

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
