package demo

import (
	"context"
	"time"
)

// consumerLongPoll is how long the agent's consumer waits on one receive (events.Consumer.Run): held
// lifecycle actions are looked at again at least this often, so RunEvents never moves the clock further in
// one step.
const consumerLongPoll = 20 * time.Second

// sameInstantSteps bounds how many steps RunEvents takes without moving the clock while messages arrive.
const sameInstantSteps = 10

// RunEvents drives the agent as Run does when wake-up events end its waits (Spec.WakeUpEvents): each step
// is one agent.Agent.Step (receive, then the safety poll when due, else the woken targets); while the queue
// has visible messages (a long poll would return them at once) the next step follows at the same instant,
// otherwise the clock moves to the first of: the account's next timed event (a boot, an agent connecting, a task's next
// lastStatus — which may send a wake-up event), the agent's next look (safety poll, end of a timed wait),
// and one long poll later. It stops when done returns true or limit has passed, and reports whether done.
// The checker judges every step, and a crashed incarnation (a blown Fuse) is replaced, as in Step.
func (w *World) RunEvents(ctx context.Context, limit time.Duration, done func() bool) (bool, error) {
	clk := w.Account.Clock()
	end := clk.Now().Add(limit)
	same := 0 // steps at the same instant
	for clk.Now().Before(end) {
		if done() {
			return true, nil
		}
		next, err := w.Agent.Step(ctx)
		if w.fuse != nil && w.fuse.Blown() {
			w.Restart(nil) // the incarnation crashed: a fresh, unfused one resumes from the store (as Step)
			err = nil
		}
		if err != nil {
			return false, err
		}
		w.Checker.Check()
		// A long poll returns as soon as a message is visible: look again at once, a few times at most (a
		// message the agent leaves visible must not stop time).
		if w.queuesVisible() > 0 && same < sameInstantSteps {
			same++
			continue
		}
		same = 0
		now := clk.Now()
		to := now.Add(consumerLongPoll)
		if end.Before(to) {
			to = end
		}
		if next.After(now) && next.Before(to) {
			to = next
		}
		if at, ok := w.Account.NextEventAt(); ok && at.After(now) && at.Before(to) {
			to = at
		}
		if !to.After(now) {
			to = now.Add(time.Millisecond) // the agent looked already: let the world move on
		}
		w.Account.Advance(to.Sub(now))
		if err := w.syncKube(ctx); err != nil {
			return false, err
		}
		w.Checker.Check()
	}
	return done(), nil
}

// queuesVisible returns how many messages are visible on the agent's queue and its wake-up queue.
func (w *World) queuesVisible() int {
	visible, _ := w.Account.QueueDepth(w.QueueURL)
	if w.WakeUpQueueURL != "" {
		wake, _ := w.Account.QueueDepth(w.WakeUpQueueURL)
		visible += wake
	}
	return visible
}
