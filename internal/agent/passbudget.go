package agent

import (
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// DefaultPassBudget is how long a pass hands out targets when Settings.PassBudget is unset: below the
// 10 s goal for the longest pass (docs/performance.md), leaving the targets in flight time to finish.
const DefaultPassBudget = 8 * time.Second

// passBudget cuts a pass that has run long: once budget has passed on clk since the pass began (before its
// discovery: newPassBudget), the targets
// not yet handed out are not looked at in it (each worker's first target always is, so every pass makes
// progress), and a target handed out after the workers' first that is still in flight stops at its next
// call to a rate-limited AWS service (awsapi.WithPassBudget: the request is not sent) instead of holding the
// pass open for the rest of its step. Both are woken for a look at once (Run, Step); the next full pass
// begins with the targets cut in flight, then with those left out, so a pass that yields never leaves the
// same targets out twice. A pass therefore ends within its budget plus one call's latency, or when its
// workers' first targets finish their steps. Safe for concurrent use by a pass's workers.
type passBudget struct {
	clk    clock.PassiveClock
	start  time.Time
	budget time.Duration
	free   int // targets looked at whatever the time (the workers' first)
	// from is the target the pass's rotation began at (passOrder.resume when it began; "" the first): the next
	// pass resumes at the first target left out after it in that order, not at the first by name
	from string

	mu      sync.Mutex
	handed  int
	skipped []string
	cut     []string // stopped in flight (awsapi.ErrPassBudgetSpent)
	done    []string // looked at to the end of their step
}

// take tells whether target may be looked at now (ok) and whether it is one of the workers' first targets,
// whose step the budget never cuts (free); a false ok records it as left for the next look.
func (b *passBudget) take(target string) (ok, free bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.handed < b.free || b.clk.Since(b.start) < b.budget {
		b.handed++
		return true, b.handed <= b.free
	}
	b.skipped = append(b.skipped, target)
	return false, false
}

// spent tells whether the pass has run its budget (the test awsapi.WithPassBudget asks before each request).
func (b *passBudget) spent() bool { return b.clk.Since(b.start) >= b.budget }

// finished records how target's step ended: cut in flight by the budget (err is awsapi.ErrPassBudgetSpent:
// it is looked at first in the next pass) or looked at to its end, whatever else the error.
func (b *passBudget) finished(target string, err error) (cut bool) {
	cut = awsapi.IsPassBudgetSpent(err)
	b.mu.Lock()
	defer b.mu.Unlock()
	if cut {
		b.cut = append(b.cut, target)
	} else {
		b.done = append(b.done, target)
	}
	return cut
}

// left returns the targets the pass left out or cut in flight, sorted.
func (b *passBudget) left() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append(append([]string(nil), b.skipped...), b.cut...)
	sort.Strings(out)
	return out
}

// passClock is the clock that measures the pass budget (Settings.PassClock, else the agent's).
func (a *Agent) passClock() clock.PassiveClock {
	if a.settings.PassClock != nil {
		return a.settings.PassClock
	}
	return a.clock
}

// newPassBudget starts the budget of a pass of workers workers that began at start (passClock): the time
// the pass spent before it hands out targets (discovery, the parameter poll, the hook check, the records and
// the instances' AMIs) counts against it, so those reads cannot push the pass past its budget.
func (a *Agent) newPassBudget(start time.Time) *passBudget {
	budget := a.settings.PassBudget
	if budget <= 0 {
		budget = DefaultPassBudget
	}
	return &passBudget{clk: a.passClock(), start: start, budget: budget, free: max(1, a.settings.Workers)}
}

// passOrder is the order the next full pass looks at the targets in, as the budget of the last cut pass left
// it: the targets cut in flight first, then from the first one left out.
type passOrder struct {
	mu     sync.Mutex
	resume string          // the first target the last cut pass left out: the next pass begins with it
	cut    map[string]bool // the targets a pass's budget stopped in flight, not looked at to their end since
}

// next returns names (sorted) in the order a pass looks at them, and the target the rotation begins at.
func (o *passOrder) next(names []string) (ordered []string, from string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return inFlightFirst(rotate(names, o.resume), o.cut), o.resume
}

// yielded records what a pass left: the rotation begins next at the first of skipped in the order of a
// rotation that began at from; a full pass that skipped and cut nothing begins at the start again; the
// targets cut in flight come first until a pass finishes them (done).
func (o *passOrder) yielded(skipped, cut, done []string, from string, full bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(skipped) > 0 {
		o.resume = firstFrom(skipped, from)
	} else if full && len(cut) == 0 {
		o.resume = ""
	}
	if o.cut == nil {
		o.cut = map[string]bool{}
	}
	for _, g := range done {
		delete(o.cut, g)
	}
	for _, g := range cut {
		o.cut[g] = true
	}
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

// inFlightFirst returns names with the targets a budget cut in flight (cut, those among names, in their
// order) moved to the front: their step stopped halfway, so they go before the targets a pass only left out.
func inFlightFirst(names []string, cut map[string]bool) []string {
	if len(cut) == 0 {
		return names
	}
	out := make([]string, 0, len(names))
	for _, n := range names {
		if cut[n] {
			out = append(out, n)
		}
	}
	for _, n := range names {
		if !cut[n] {
			out = append(out, n)
		}
	}
	return out
}

// firstFrom returns the first of names (not empty) in the order of a rotation that began at from: the
// smallest name at or after from, else the smallest. A pass that began mid-fleet and wrapped round leaves out
// the targets after its last one and those before from; resuming at the smallest by name would send the next
// pass back over the fleet's first targets, and a fleet whose every pass is cut would never reach its last
// ones (at 1,000 x 20, resuming by name leaves the groups past about the 280th never looked at).
func firstFrom(names []string, from string) string {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	if i := sort.SearchStrings(sorted, from); i < len(sorted) {
		return sorted[i]
	}
	return sorted[0]
}

// yielded records what a cut pass left out: the next full pass begins with the targets cut in flight, then
// with the first left out in the order of this pass's rotation (firstFrom), and the loop looks at all of them
// at once (wake-ups). A pass that left nothing out resets the rotation only when it was a full pass.
func (a *Agent) yielded(b *passBudget, full bool) {
	left := b.left()
	b.mu.Lock()
	cut, done, skipped := append([]string(nil), b.cut...), append([]string(nil), b.done...), append([]string(nil), b.skipped...)
	b.mu.Unlock()
	a.order.yielded(skipped, cut, done, b.from, full)
	for _, g := range left {
		a.wakes.add(g, "", "")
	}
}
