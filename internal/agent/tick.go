package agent

import (
	"context"
	"sync"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
)

// tickRequests are the scheduled ticks (and AMI announcements) waiting for a whole-fleet pass: their
// handler resolves every tracked parameter, asks the loop for a full pass and holds the message until a pass
// that began after the resolve has finished — so the message is deleted only once its effect (every target
// looked at with the new AMIs, their rollouts written) is durable, and the consumer never runs a fleet pass
// inside a message's handling (a golden-AMI change received beside a tick is handled at once). Safe for
// concurrent use; the zero value is ready.
type tickRequests struct {
	mu       sync.Mutex
	started  uint64            // full passes begun
	finished uint64            // the sequence number of the last full pass that finished
	lastErr  error             // its error
	want     map[string]uint64 // event id -> the first pass that serves it
	ch       chan struct{}
}

// signal returns the channel that receives a value when a tick asked for a full pass.
func (r *tickRequests) signal() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{}, 1)
	}
	return r.ch
}

// pending tells whether a tick waits for a full pass that has not begun yet.
func (r *tickRequests) pending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.want {
		if w > r.started {
			return true
		}
	}
	return false
}

// begin records that a full pass begins and returns its sequence number; the caller holds Agent.pass.
func (r *tickRequests) begin() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started++
	return r.started
}

// end records that full pass seq finished with err.
func (r *tickRequests) end(seq uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finished, r.lastErr = seq, err
}

// ask records that tick id needs the next full pass and signals the loop.
func (r *tickRequests) ask(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.want == nil {
		r.want = map[string]uint64{}
	}
	r.want[id] = r.started + 1
	if r.ch == nil {
		r.ch = make(chan struct{}, 1)
	}
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

// served returns whether tick id asked for a pass (asked), whether a pass serving it has finished (served,
// then forgotten) and that pass's error.
func (r *tickRequests) served(id string) (asked, served bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, asked := r.want[id]
	if !asked || r.finished < w {
		return asked, false, nil
	}
	delete(r.want, id)
	return true, true, r.lastErr
}

// handleScheduledTick resolves every tracked parameter (GetParameters, 10 per call) and asks the loop for a
// whole-fleet pass (Run and Step start one at once), holding the message; handled again while held, it is
// done once a pass that began after the resolve has finished. A pass that failed with a passing AWS fault asks
// again and keeps holding; another failure leaves the message for redelivery (and, at last, the DLQ).
func (a *Agent) handleScheduledTick(ctx context.Context, ev events.Event) (events.Disposition, error) {
	asked, served, err := a.ticks.served(ev.ID)
	switch {
	case served && err != nil && awsapi.IsTransient(err):
		a.ticks.ask(ev.ID)
		return events.Hold, err
	case served:
		return events.Done, err
	case asked:
		return events.Hold, nil // the pass has not finished yet
	}
	if err := a.resolve(ctx, a.fleet.parameters()); err != nil {
		return doneOrHold(err)
	}
	a.fleet.polled(a.clock.Now())
	a.ticks.ask(ev.ID)
	return events.Hold, nil
}
