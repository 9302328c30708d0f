package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// pausedPrefix starts the Reason of a rollout held by a pause lock; sourcePrefix that of a target whose
// source names no usable AMI.
const (
	pausedPrefix = "paused"
	sourcePrefix = "source "
)

// holdIfPaused returns errWait with the pause as the reason when the target is paused: called before every
// new destructive step (invariant 7, docs/architecture.md). Waits already in flight stay as they are.
// With Inputs.PauseRead the pause is read here, at the first destructive step of the call; a failed read
// holds the step (the error is returned).
func (o *Orchestrator) holdIfPaused(r *state.Rollout, before string) error {
	p, err := o.currentPause()
	if err != nil {
		return fmt.Errorf("reading pause locks before the next step (%s), which waits for them: %w", before, err)
	}
	if p == nil {
		return nil
	}
	r.Reason = fmt.Sprintf("%s (%s) by %s since %s: %s; next step: %s", pausedPrefix, p.Scope(), p.Who,
		p.Since.UTC().Format(time.RFC3339), p.Reason, before)
	if !p.Until.IsZero() {
		r.Reason += "; until " + p.Until.UTC().Format(time.RFC3339)
	}
	return errWait
}

// errHeld is the errWait of a guarded write that a pause lock stopped (save, heldByPause).
var errHeld = fmt.Errorf("%w: held by a pause lock", errWait)

// guardIfPaused is holdIfPaused for the steps whose write-ahead carries the pause check (the start of a
// refresh, the Preparing write): a pause already known in this call holds the step as holdIfPaused does; otherwise no lock is
// read and the next write of the step becomes state.Store.PutRolloutUnlessPaused, which checks the global and
// the group's lock in the same transaction (strongly consistent: a pause durable before that write always
// stops the step). A step whose effect no write precedes calls guardEffect right before it.
func (o *Orchestrator) guardIfPaused(r *state.Rollout, before string) error {
	if o.pause != nil {
		return o.holdIfPaused(r, before)
	}
	o.guard = before
	return nil
}

// guardEffect makes sure the destructive effect about to be called (before names it) is checked against the
// pause strongly consistently: by the last write of this call when it was the guarded write-ahead (checked),
// else by reading the two lock items (state.Store.PauseHolding), e.g. for an effect resumed after a crash
// or retried after an error. It returns errWait, r with the pause as its reason, when a pause
// holds; a read error holds the step too (it is returned).
func (o *Orchestrator) guardEffect(ctx context.Context, r *state.Rollout, before string) error {
	o.guard = ""
	if o.checked {
		o.checked = false // one check covers one effect
		return nil
	}
	p, err := o.Store.PauseHolding(ctx, r.Group, o.Clock.Now())
	if err != nil {
		return fmt.Errorf("reading pause locks before the next step (%s), which waits for them: %w", before, err)
	}
	if p == nil {
		return nil
	}
	held, err := o.heldByPause(*p, before)
	*r = held
	return err
}

// heldByPause returns the record as last stored, with the pause l as its reason, and errHeld: the guarded
// write of the step `before` was stopped by l and wrote nothing. Reconcile writes the reason once ("waiting").
func (o *Orchestrator) heldByPause(l state.Lock, before string) (state.Rollout, error) {
	o.pause, o.pauseRead = &l, nil // known now: no lock is read for the reason
	if o.pauseSeen != nil {
		o.pauseSeen(l)
	}
	held := o.lastStored.Clone()
	_ = o.holdIfPaused(&held, before) // errWait, with the reason set
	return held, errHeld
}

// currentPause returns the pause of the target being reconciled, read through Inputs.PauseRead the first
// time it is needed in the call.
func (o *Orchestrator) currentPause() (*state.Lock, error) {
	if o.pauseRead != nil {
		p, err := o.pauseRead()
		if err != nil {
			return nil, err
		}
		o.pause, o.pauseRead = p, nil
	}
	return o.pause, nil
}

// amiRefused reports whether the rollout waits because the AMI gate refused its target.
func amiRefused(r state.Rollout) bool {
	return r.Phase == state.PhaseWaiting && strings.HasPrefix(r.Reason, model.AMIRefusedPrefix)
}

// AMIChecker answers whether an AMI may be rolled to a group: nil when it passes, the refusal otherwise; an
// error when EC2 could not be asked (the rollout holds). providers.AMIGate implements it.
type AMIChecker interface {
	Check(ctx context.Context, req providers.GateRequest) (*model.AMIRejection, error)
}

var _ AMIChecker = (*providers.AMIGate)(nil)

// gateAMI runs the AMI gate on the rollout's target (fresh: on EC2 answers at most providers.AMIGate.FreshTTL old, 10 s
// by default, read again otherwise; the launch template is always read again). A refusal puts the rollout in
// Waiting with the refusal as its reason — written, recorded in history and told to the observer
// once per distinct refusal — and returns (true, errWait): no launch template is changed. An error of EC2
// holds the rollout too: it is returned, and the step is retried next tick. A pass clears an earlier refusal.
func (o *Orchestrator) gateAMI(ctx context.Context, t model.Target, v model.GroupView, r *state.Rollout, fresh bool) (bool, error) {
	if o.AMIGate == nil {
		return false, nil
	}
	rej, err := o.AMIGate.Check(ctx, providers.GateRequest{Target: t, Group: v.Group, View: v, ImageID: r.TargetImageID,
		Parameter: t.Parameter, Fresh: fresh})
	if err != nil {
		return false, fmt.Errorf("AMI gate (the rollout holds until EC2 answers): %w", err)
	}
	if rej == nil {
		if amiRefused(*r) {
			r.Reason = ""
		}
		return false, nil
	}
	reason := rej.StatusReason()
	if r.Phase == state.PhaseWaiting && r.Reason == reason {
		return true, errWait
	}
	r.Phase, r.Reason = state.PhaseWaiting, reason
	if err := o.Store.AppendHistory(ctx, state.HistoryEntry{Group: t.Group, At: o.Clock.Now(), Event: "ami-refused",
		PreviousImage: r.PreviousImageID, NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion, Detail: reason}); err != nil {
		return true, fmt.Errorf("recording history: %w", err)
	}
	next, err := o.save(ctx, *r, "AMI refused by the gate")
	if err != nil {
		return true, err
	}
	*r = next
	o.Log.Warn("target AMI refused; no launch template is changed until the source names an AMI that passes",
		zap.String(logging.Group, t.Group), zap.String(logging.AMI, rej.ImageID), zap.String(logging.Reason, reason))
	if ob, ok := o.Observer.(model.AMIRejectionObserver); ok {
		ob.AMIRejected(t, next, *rej)
	}
	return true, errWait
}

// startGate returns why a detected rollout may not start yet ("" when it may): soak time, approval, then
// the gates that also hold every further replacement (runGate).
func (o *Orchestrator) startGate(ctx context.Context, t model.Target, r state.Rollout) string {
	now := o.Clock.Now()
	p := t.Policy
	if o.source != "" {
		return o.source
	}
	if age := now.Sub(r.SourceModified); p.MinAMIAge > 0 && age < p.MinAMIAge && !soakSkipped(r) && r.Trigger != TriggerMaxInstanceAge {
		return fmt.Sprintf("soak: AMI %s is %s old, minimum %s; may start at %s", r.TargetImageID,
			age.Round(time.Minute), p.MinAMIAge, r.SourceModified.Add(p.MinAMIAge).UTC().Format(time.RFC3339))
	}
	if p.Approval == model.ApprovalManual && (r.ApprovedImage != r.TargetImageID || r.TargetImageID == "") {
		return fmt.Sprintf("approval: waiting for `patch-agent approve %s` (AMI %s)", t.Group, r.TargetImageID)
	}
	return o.runGate(ctx, t)
}

// runGate returns why no new replacement may start now ("" when one may): a closed maintenance window or
// an alarm in ALARM. A replacement already under way finishes.
func (o *Orchestrator) runGate(ctx context.Context, t model.Target) string {
	p := t.Policy
	if o.source != "" {
		return o.source
	}
	if w := p.Window; w != nil {
		if open, at := w.State(o.Clock.Now()); !open {
			return fmt.Sprintf("maintenance window (%s) closed; opens at %s", w.Describe(), at.Format(time.RFC3339))
		}
	}
	if len(p.Alarms) > 0 && o.Alarms != nil {
		firing, err := o.Alarms.InAlarm(ctx, p.Alarms)
		switch {
		case err != nil:
			return "alarm gate: " + err.Error()
		case len(firing) > 0:
			return fmt.Sprintf("alarm(s) %s in ALARM", strings.Join(firing, ", "))
		}
	}
	return ""
}
