package agent

import (
	"sort"
	"time"

	"github.com/patch-agent/patch-agent/internal/providers"
)

// DefaultHookChecksPerPass is how many managed groups' lifecycle hooks one pass reads at most when
// Settings.HookChecksPerPass is unset, so that bursts of DescribeLifecycleHooks spread out. At 40 ms a
// call on DefaultWorkers goroutines, 25 reads take about 0.13 s of a pass's 8 s budget.
const DefaultHookChecksPerPass = 25

// HookCheckBudget is how long the hook check of one pass may read (on the pass clock, Settings.PassClock):
// its DescribeLifecycleHooks calls take the fleet's lane of the Auto Scaling limiter and run before the pass
// hands out targets, so behind a busy fleet's Auto Scaling calls they could hold the pass past its budget
// (at 1,000 x 20: 54 s of limiter wait on 52 calls in one pass). Once it is spent the requests not yet sent
// are not (awsapi.WithPassBudget); the groups left stay due and are checked first in the next pass.
const HookCheckBudget = time.Second

// hookCheckSpent returns the budget of one hook check, begun now: it answers true once HookCheckBudget has
// passed.
func (a *Agent) hookCheckSpent() func() bool {
	clk := a.passClock()
	start := clk.Now()
	return func() bool { return clk.Since(start) >= HookCheckBudget }
}

// hookChecksPerPass returns how many groups a pass checks at most, of n managed groups: the setting (default
// DefaultHookChecksPerPass), raised to ceil(n × ReconcileInterval / PollInterval) so that, with a pass at
// least every ReconcileInterval, every group is checked again within about PollInterval + ReconcileInterval
// of its last check.
func (a *Agent) hookChecksPerPass(n int) int {
	k := a.settings.HookChecksPerPass
	if k <= 0 {
		k = DefaultHookChecksPerPass
	}
	if a.settings.ReconcileInterval > 0 {
		ticks := max(1, int64(a.settings.PollInterval/a.settings.ReconcileInterval)) // passes per poll interval
		k = max(k, int((int64(n)+ticks-1)/ticks))
	}
	return k
}

// hooksDueLocked picks the managed groups of d whose lifecycle hooks this pass checks: those never checked or
// checked at least PollInterval ago, never-checked first and then the longest unchecked, at most
// hookChecksPerPass of them (a group whose check failed stays due and comes first next pass). It forgets
// groups no longer discovered. The caller holds a.mu.
func (a *Agent) hooksDueLocked(d providers.Discovered, now time.Time) []string {
	if a.hookChecked == nil {
		a.hookChecked = map[string]time.Time{}
	}
	names := d.Names()
	for name := range a.hookChecked {
		if _, ok := d.Targets[name]; !ok {
			delete(a.hookChecked, name)
		}
	}
	var due []string
	for _, name := range names {
		if at, ok := a.hookChecked[name]; !ok || now.Sub(at) >= a.settings.PollInterval {
			due = append(due, name)
		}
	}
	sort.SliceStable(due, func(i, j int) bool { return a.hookChecked[due[i]].Before(a.hookChecked[due[j]]) })
	return due[:min(len(due), a.hookChecksPerPass(len(names)))]
}
