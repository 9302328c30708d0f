package agent

import (
	"context"
	"errors"
	"time"
)

// Step is one turn of Run's loop without waiting, for drivers on a simulated clock (the demo's
// event-driven scenarios, the bench): it receives the queue once without waiting, then the wake-up queue
// when there is one (Settings.WakeUpQueueURL), (wake-up events are
// recorded, lifecycle actions handled first, held ones looked at again), then reconciles every target when
// the safety poll (ReconcileInterval since the last full pass) is due or a scheduled tick asked for it, else only the targets that wake-up
// events named or whose timed wait ended (ReconcileWoken), and runs the lifecycle sweep when it is due (SweepLifecycle). It returns when the loop looks next without an
// event: the next safety poll, the end of the earliest timed wait or the next lifecycle sweep, whichever comes first. Errors of the
// receive and of a full pass are returned joined; the targets are reconciled either way.
func (a *Agent) Step(ctx context.Context) (next time.Time, err error) {
	pollErr := a.pollQueues(ctx)
	now := a.clock.Now()
	var recErr error
	if last := a.LastTick(); last.IsZero() || !now.Before(last.Add(a.settings.ReconcileInterval)) || a.ticks.pending() {
		recErr = a.Reconcile(ctx)
	} else {
		a.wakeTimedWaits()
		a.ReconcileWoken(ctx)
		a.sweepIfDue(ctx) // lifecycle actions between the polls (hooksweep.go)
	}
	next = a.LastTick().Add(a.settings.ReconcileInterval)
	if at, ok := a.waits.next(); ok && at.Before(next) {
		next = at
	}
	if at, ok := a.sweepAt(); ok && at.Before(next) {
		next = at
	}
	return next, errors.Join(pollErr, recErr)
}
