package agent

import (
	"sort"
	"sync"
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

// hookChecks holds what the hook check found per managed group: what the group lacks for drained
// terminations ("" when nothing) and when its hooks were last read.
type hookChecks struct {
	mu       sync.Mutex
	problems map[string]string    // group -> what it lacks for drained terminations (HookCheck.Note)
	checked  map[string]time.Time // group -> when its hooks were last read
}

// due picks the managed groups of d whose lifecycle hooks a pass checks at now: those never checked or
// checked at least interval ago, never-checked first and then the longest unchecked, at most limit of them
// (a group whose check failed stays due and comes first next pass). It forgets groups no longer discovered,
// with what they lacked.
func (h *hookChecks) due(d providers.Discovered, now time.Time, interval time.Duration, limit int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checked == nil {
		h.checked = map[string]time.Time{}
	}
	for name := range h.checked {
		if _, ok := d.Targets[name]; !ok {
			delete(h.checked, name)
			delete(h.problems, name)
		}
	}
	var due []string
	for _, name := range d.Names() {
		if at, ok := h.checked[name]; !ok || now.Sub(at) >= interval {
			due = append(due, name)
		}
	}
	sort.SliceStable(due, func(i, j int) bool { return h.checked[due[i]].Before(h.checked[due[j]]) })
	return due[:min(len(due), limit)]
}

// record records that group's hooks were read at at and what it lacks (note, "" when nothing), and returns
// what it lacked before.
func (h *hookChecks) record(group string, at time.Time, note string) (before string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.checked == nil {
		h.checked = map[string]time.Time{}
	}
	if h.problems == nil {
		h.problems = map[string]string{}
	}
	before = h.problems[group]
	h.checked[group], h.problems[group] = at, note
	return before
}

// problem returns what group lacks for drained terminations, as of its last check ("" when nothing).
func (h *hookChecks) problem(group string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.problems[group]
}

// unchecked returns the names, in their order, whose hooks were never read since the agent started.
func (h *hookChecks) unchecked(names []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, name := range names {
		if _, ok := h.checked[name]; !ok {
			out = append(out, name)
		}
	}
	return out
}
