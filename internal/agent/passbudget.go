package agent

import (
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultPassBudget is how long a pass hands out targets when Settings.PassBudget is unset: below the
// 10 s issue #21 allows a pass (docs/performance.md), leaving the targets in flight time to finish.
const DefaultPassBudget = 8 * time.Second

// passBudget cuts a pass that has run long: once budget has passed on clk since the pass began, the targets
// not yet handed out are not looked at in it (each worker's first target always is, so every pass makes
// progress); they are woken for a look at once (Run, Step) and the next full pass begins with them, so a
// pass that yields never leaves the same targets out twice. Safe for concurrent use by a pass's workers.
type passBudget struct {
	clk    clock.PassiveClock
	start  time.Time
	budget time.Duration
	free   int // targets looked at whatever the time (the workers' first)

	mu      sync.Mutex
	handed  int
	skipped []string
}

// take tells whether target may be looked at now; a false answer records it as left for the next look.
func (b *passBudget) take(target string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.handed < b.free || b.clk.Since(b.start) < b.budget {
		b.handed++
		return true
	}
	b.skipped = append(b.skipped, target)
	return false
}

// left returns the targets the pass left out, sorted.
func (b *passBudget) left() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]string(nil), b.skipped...)
	sort.Strings(out)
	return out
}

// newPassBudget starts the budget of a pass of workers workers.
func (a *Agent) newPassBudget() *passBudget {
	clk := a.settings.PassClock
	if clk == nil {
		clk = a.clock
	}
	budget := a.settings.PassBudget
	if budget <= 0 {
		budget = DefaultPassBudget
	}
	return &passBudget{clk: clk, start: clk.Now(), budget: budget, free: max(1, a.settings.Workers)}
}

// rotate returns the sorted names of a full pass beginning at the first the last cut pass left out (resume),
// the others after them in order: the next pass is not always the same targets first.
func rotate(names []string, resume string) []string {
	if resume == "" {
		return names
	}
	i := sort.SearchStrings(names, resume)
	return append(append([]string(nil), names[i:]...), names[:i]...)
}

// yielded records what a cut pass left out: the next full pass begins with them and the loop looks at them
// at once (wake-ups). A pass that left nothing out resets the rotation only when it was a full pass.
func (a *Agent) yielded(b *passBudget, full bool) {
	left := b.left()
	a.mu.Lock()
	if len(left) > 0 {
		a.resume = left[0]
	} else if full {
		a.resume = ""
	}
	a.mu.Unlock()
	for _, g := range left {
		a.wakes.add(g, "", "")
	}
}
