package sim

import (
	"container/heap"
	"time"
)

// advanceStep is the largest clock step Advance takes at once. Events are still run at their exact due time;
// the step only bounds how far the fake clock jumps between two wake-ups of timers that other code (the agent)
// registered on the same clock.
const advanceStep = time.Second

// event is one timed piece of simulated AWS behaviour (an instance finishing boot, a task reaching its next
// lastStatus, a lifecycle hook timing out). Events run under the world's lock at their due time, in time order; events
// due at the same instant run in the order they were scheduled.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

// eventQueue is a min-heap of events ordered by (at, seq).
type eventQueue []*event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *eventQueue) Pop() any {
	old := *q
	n := len(old)
	ev := old[n-1]
	old[n-1] = nil
	*q = old[:n-1]
	return ev
}

// scheduler holds the pending timed events of an Account.
type scheduler struct {
	queue eventQueue
	seq   uint64
}

func (s *scheduler) add(at time.Time, fn func()) {
	s.seq++
	heap.Push(&s.queue, &event{at: at, seq: s.seq, fn: fn})
}

// next returns the due time of the earliest event.
func (s *scheduler) next() (time.Time, bool) {
	if len(s.queue) == 0 {
		return time.Time{}, false
	}
	return s.queue[0].at, true
}

func (s *scheduler) pop() *event {
	return heap.Pop(&s.queue).(*event)
}

// after schedules fn to run d after the current simulated time. Callers hold the lock.
func (w *world) after(d time.Duration, fn func()) {
	w.sched.add(w.now().Add(d), fn)
}

// runDueLocked runs every event whose due time is not after the clock's current time, in time order, settling
// the account after each one. Callers hold the lock.
func (w *world) runDueLocked() {
	for {
		at, ok := w.sched.next()
		if !ok || at.After(w.now()) {
			return
		}
		ev := w.sched.pop()
		ev.fn()
		w.settle()
	}
}

// Advance moves the fake clock forward by d, in steps of at most one second, and runs all simulated behaviour
// that falls due on the way: every scheduled event runs with the clock set to its own due time, in time order.
// Timers that other code registered on the same clock fire as the clock passes them. Advance(0) runs whatever is
// already due. Callers alternate agent work and Advance; Advance never runs agent code itself.
func (w *world) Advance(d time.Duration) {
	w.advanceMu.Lock()
	defer w.advanceMu.Unlock()
	if d < 0 {
		d = 0
	}
	target := w.clk.Now().Add(d)
	for {
		step := w.clk.Now().Add(advanceStep)
		if step.After(target) {
			step = target
		}
		for {
			unlock := w.hold()
			at, ok := w.sched.next()
			if !ok || at.After(step) {
				unlock()
				break
			}
			if at.After(w.clk.Now()) {
				// Move the clock to the event's due time without holding the lock: the fake clock runs AfterFunc
				// callbacks synchronously and they may call into the account.
				unlock()
				w.clk.SetTime(at)
				continue
			}
			w.runDueLocked()
			unlock()
		}
		if step.After(w.clk.Now()) {
			w.clk.SetTime(step)
		}
		if !step.Before(target) {
			return
		}
	}
}

// NextEventAt returns when the account's next timed event is due (an instance finishing its boot, an ECS
// agent connecting, a task reaching its next lastStatus, ...); false when none is pending. Event-driven
// drivers move the clock to it instead of by a fixed tick. Not counted.
func (w *world) NextEventAt() (time.Time, bool) {
	defer w.hold()()
	return w.sched.next()
}
