package engine

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

// save writes one transition conditionally on the version read, with the history entries that record it in
// the same atomic write (so a replica that loses the race leaves none), and logs it once. A move from the
// record as last read or written to r that the transition table (state.Transitions) does not declare is not
// written: the error wraps state.ErrTransition.
func (o *Orchestrator) save(ctx context.Context, r state.Rollout, what string, history ...state.HistoryEntry) (state.Rollout, error) {
	r.UpdatedAt = o.Clock.Now()
	if r.Active() || r.Phase == state.PhaseHalted {
		r = r.WithLease(o.leases().Claim(o.Owner, r.UpdatedAt))
	} else {
		r = r.WithLease(state.Lease{})
	}
	quiet := what == "lease renewed" // no step of its own: not counted, logged or observed
	if !quiet {
		r.Steps++
	}
	if what != "waiting" && !quiet {
		switch r.Phase {
		case state.PhasePreparing, state.PhaseReplacing, state.PhaseVerifying, state.PhaseCompleted:
			if (r.Refresh == nil || r.Refresh.Cancel == "") && r.Reason == o.lastStored.Reason {
				// A transition happened: whatever held the rollout before no longer does. A reason the step
				// wrote for this transition (the refresh it starts) stays.
				r.Reason = ""
			} // a recorded cancel holds the rollout until its refresh is cancelled: its reason stays
		}
	}
	if err := state.CheckTransition(state.WriterAgent, o.lastStored, r); err != nil {
		return r, fmt.Errorf("writing rollout of %s (%s): %w", r.Group, what, err)
	}
	var next state.Rollout
	var err error
	guard := o.guard
	o.guard, o.checked = "", false
	switch {
	case guard != "":
		// The write-ahead of a destructive step: its own pause check, strongly consistent (guardIfPaused).
		next, err = o.Store.PutRolloutUnlessPaused(ctx, r, history, r.UpdatedAt, nil)
		if l, paused := state.PausedBy(err); paused {
			return o.heldByPause(l, guard)
		}
		o.checked = err == nil
	case len(history) > 0:
		next, err = o.Store.PutRolloutWithHistory(ctx, r, history)
	default:
		next, err = o.Store.PutRollout(ctx, r)
	}
	if err != nil {
		o.writeLost = true // the stored record is not lastStored, or not known to be: read it again (Stored)
		return r, fmt.Errorf("writing rollout of %s (%s): %w", r.Group, what, err)
	}
	if !quiet {
		o.logStep(next, what)
		if o.Observer != nil {
			o.Observer.RolloutTransition(o.lastStored, next, what)
		}
	}
	o.lastStored = next.Clone() // later steps edit next.Current in place; prev must not change with it
	return next, nil
}

func (o *Orchestrator) logStep(r state.Rollout, what string) {
	fields := []zap.Field{zap.String(logging.Group, r.Group), zap.String(logging.RolloutPhase, string(r.Phase)),
		zap.String(logging.AMI, r.TargetImageID)}
	if r.Current != nil {
		fields = append(fields, zap.String(logging.RolloutStep, string(r.Current.Step)), zap.String(logging.InstanceID, r.Current.OldInstanceID))
	}
	if r.Reason != "" {
		fields = append(fields, zap.String(logging.Reason, r.Reason))
	}
	o.Log.Info(what, fields...)
}

func stepOf(r state.Rollout) string {
	if r.Current == nil {
		return "-"
	}
	return string(r.Current.Step)
}
