package agent

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// timedWaits holds, per target (its group), when the next wait the agent set itself ends: a soak, a lease
// renewal, the end of a pause, the retry of a step that failed. The loop wakes the target at that time (Run), so that with wake-up events on and the safety poll
// at minutes those waits still end on time. Safe for concurrent use; the zero value is ready.
type timedWaits struct {
	mu  sync.Mutex
	due map[string]time.Time
	ch  chan struct{}
}

// changedSignal returns the channel that receives a value when the earliest time may have changed.
func (w *timedWaits) changedSignal() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	return w.ch
}

// set records when group's next timed wait ends; zero forgets it. A time earlier than every other one
// signals the loop to set its timer again.
func (w *timedWaits) set(group string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.IsZero() {
		delete(w.due, group)
		return
	}
	if w.due == nil {
		w.due = map[string]time.Time{}
	}
	earliest := true
	for _, other := range w.due {
		if other.Before(at) {
			earliest = false
			break
		}
	}
	w.due[group] = at
	if !earliest {
		return
	}
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// next returns the earliest recorded time; false when none is.
func (w *timedWaits) next() (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for _, at := range w.due {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// takeDue returns and forgets the groups whose time is not after now.
func (w *timedWaits) takeDue(now time.Time) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for g, at := range w.due {
		if !at.After(now) {
			out = append(out, g)
			delete(w.due, g)
		}
	}
	return out
}

// pauseEnds holds, per target, the end of the pause (state.Lock.Until of `pause --until`) the agent read
// last for it, so that the target is woken when the pause ends (lookAgainAt) instead of at the next safety
// poll. Safe for concurrent use; the zero value is ready.
type pauseEnds struct {
	mu  sync.Mutex
	end map[string]time.Time
}

// note records that group was found paused until until (a lock with an end time, read right before a
// destructive step); a zero until (a pause without end, or none) forgets the group.
func (p *pauseEnds) note(group string, until time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until.IsZero() {
		delete(p.end, group)
		return
	}
	if p.end == nil {
		p.end = map[string]time.Time{}
	}
	p.end[group] = until
}

// at returns when group's pause ends as last read (zero when none), and forgets an end that is not after now.
func (p *pauseEnds) at(group string, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	end := p.end[group]
	if !end.IsZero() && !end.After(now) {
		delete(p.end, group)
		return time.Time{}
	}
	return end
}

// waitsObserver records each observed target's next timed wait (Agent.lookAgainAt) before passing the
// observation on.
// It stands in for Settings.Observer only where the agent itself reports (the orchestrator and the hooks keep
// the configured observer), and passes alerts and AMI refusals on.
type waitsObserver struct {
	model.Observer
	a *Agent
}

// Alert passes alerts on (model.SendAlert): the wrapped observer may count and announce them.
func (o waitsObserver) Alert(al model.Alert) { model.SendAlert(o.Observer, al) }

// AMIRejected passes refusals of the AMI gate on when the wrapped observer takes them.
func (o waitsObserver) AMIRejected(t model.Target, r state.Rollout, rej model.AMIRejection) {
	if ro, ok := o.Observer.(model.AMIRejectionObserver); ok {
		ro.AMIRejected(t, r, rej)
	}
}

func (o waitsObserver) TargetObserved(t model.Target, v model.GroupView, r state.Rollout, ami *model.ResolvedAMI) {
	o.a.waits.set(t.Group, o.a.lookAgainAt(t, r))
	o.Observer.TargetObserved(t, v, r, ami)
}

// lookAgainAt returns when t must be looked at again whatever the events, as of its record r: the earliest
// still ahead of its lease renewal (model.LookAgainBy), the end of its soak (t.Policy.MinAMIAge after the
// source's LastModifiedDate, while the rollout waits to start), the retry of its failed step, and the end of the pause that holds it (`pause
// --until`, as read before its last destructive step: pauseEnds), so that the rollout goes on at that time.
// Zero when none is ahead (the safety poll looks
// anyway); a time already passed is left out, since the look that recorded it has just seen the target.
func (a *Agent) lookAgainAt(t model.Target, r state.Rollout) time.Time {
	now := a.clock.Now()
	var by time.Time
	for _, at := range []time.Time{model.LookAgainBy(r), soakEnd(t, r), a.retries.NextAt(t.Group), a.pauseEnds.at(t.Group, now)} {
		if at.After(now) && (by.IsZero() || at.Before(by)) {
			by = at
		}
	}
	return by
}

// soakEnd is when a detected rollout's soak ends (zero when it has none).
func soakEnd(t model.Target, r state.Rollout) time.Time {
	if (r.Phase != state.PhaseDetected && r.Phase != state.PhaseWaiting) || t.Policy.MinAMIAge <= 0 || r.SourceModified.IsZero() {
		return time.Time{}
	}
	return r.SourceModified.Add(t.Policy.MinAMIAge)
}

// waitTimer returns a timer that fires when the earliest timed wait ends (never, when none is recorded).
func (a *Agent) waitTimer() clock.Timer {
	at, ok := a.waits.next()
	if !ok {
		t := a.clock.NewTimer(time.Hour)
		t.Stop() // nothing to wait for: a stopped timer never fires
		return t
	}
	return a.clock.NewTimer(max(at.Sub(a.clock.Now()), 0))
}

// wakeTimedWaits hands the targets whose timed wait ended to the woken set; Run looks at them at once.
func (a *Agent) wakeTimedWaits() {
	for _, g := range a.waits.takeDue(a.clock.Now()) {
		a.wakes.add(g, "", "")
	}
}
