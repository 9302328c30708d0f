package lifecycleaction

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

var errClaimedElsewhere = errors.New("lifecycle action claimed by another replica")

// leases is the lease rule of the hooks' TTL.
func (h *Hooks) leases() state.LeaseRule { return state.LeaseRule{TTL: h.LeaseTTL} }

// claim makes this replica the one working on the action (invariant 6, docs/architecture.md): a claim held by
// another replica is respected until its expiry plus the skew margin; this replica's own claim is renewed at
// half-life (state.LeaseRule).
func (h *Hooks) claim(ctx context.Context, rec state.Hook) (state.Hook, error) {
	now := h.Clock.Now()
	if h.leases().HeldByOther(rec.Lease(), h.Owner, now) {
		return rec, errClaimedElsewhere
	}
	if !h.leases().RenewDue(rec.Lease(), h.Owner, now) {
		return rec, nil
	}
	rec = rec.WithLease(h.leases().Claim(h.Owner, now))
	return h.putHook(ctx, rec)
}

// complete sends CompleteLifecycleAction once and records it. Auto Scaling's "No active Lifecycle Action
// found" answer (duplicate delivery, completed elsewhere, timed out) is final: field case C6.
func (h *Hooks) complete(ctx context.Context, a events.LifecycleAction, rec state.Hook, result, note string, log *zap.Logger) (HookOutcome, error) {
	// The claim to complete is written first, conditionally, with the result decided: of two replicas only one
	// calls Auto Scaling. After a crash between this write and the call, the call is made again; Auto Scaling's
	// "no active action" answer then tells that the first one went through, and the record keeps the verdict.
	if rec.State == state.HookCompleting && rec.Decided != "" && rec.Decided != result {
		// A verdict written before an earlier call, and another one now: that call may have gone through
		// before a crash. Only an action still waiting takes the new verdict; one no longer active keeps the
		// verdict its record holds, the one Auto Scaling may have applied.
		switch active, err := h.active(ctx, a); {
		case err != nil:
			return HookInProgress, err
		case !active:
			log.Info("lifecycle action was no longer active; treated as completed with the verdict recorded before",
				zap.String(logging.Result, rec.Decided))
			return HookDone, h.finish(ctx, rec, "", noActionNote(rec.Note))
		}
	}
	if rec.State != state.HookCompleting || rec.Decided != result {
		rec.State, rec.Decided, rec.Note = state.HookCompleting, result, note
		next, err := h.putHook(ctx, rec)
		if errors.Is(err, state.ErrConflict) {
			return HookInProgress, nil
		}
		if err != nil {
			return HookInProgress, fmt.Errorf("claiming completion of lifecycle action %s: %w", a.Token, err)
		}
		rec = next
	}
	if !h.leases().MayAct(rec.Lease(), h.Owner, h.Clock.Now()) {
		// This replica stalled since it claimed the action (less than the skew margin is left): another may
		// have taken it over. The next look re-reads the record and claims it again before completing.
		log.Info("claim on the lifecycle action too close to its expiry to complete it; looking again")
		return HookInProgress, nil
	}
	active, err := h.actions().Complete(ctx, a, result)
	if err != nil {
		return HookInProgress, fmt.Errorf("completing lifecycle action %s with %s: %w", a.Token, result, err)
	}
	if !active {
		log.Info("lifecycle action was no longer active; treated as completed")
		return HookDone, h.finish(ctx, rec, "", noActionNote(rec.Note))
	}
	log.Info("lifecycle action completed", zap.String(logging.Result, result), zap.String(logging.Reason, note))
	return HookDone, h.finish(ctx, rec, result, note)
}

// noActionNote is the note of a record Auto Scaling answered "no active lifecycle action" for: the verdict's
// note, when the record has one, then why nothing was applied.
func noActionNote(verdict string) string {
	const gone = "no active lifecycle action: already completed or timed out"
	if verdict == "" {
		return gone
	}
	return verdict + "; " + gone
}

// active reports whether Auto Scaling has a lifecycle action of a's instance and hook waiting: a heartbeat
// (by instance and hook) is accepted (and restarts its timeout), or answered "No active Lifecycle Action found". For a
// message whose record is completed it tells a late copy (nothing waits) from a later action on the same
// instance and hook.
func (h *Hooks) active(ctx context.Context, a events.LifecycleAction) (bool, error) {
	active, err := h.actions().Heartbeat(ctx, a, false)
	switch {
	case err != nil:
		return false, fmt.Errorf("asking whether lifecycle action %s is still active: %w", a.Token, err)
	case !active:
		return false, nil
	}
	h.beatAccepted(model.ActionKey(a.GroupName, a.InstanceID, a.HookName), h.Clock.Now())
	return true, nil
}

func (h *Hooks) finish(ctx context.Context, rec state.Hook, result, note string) error {
	rec.State, rec.Result, rec.Note, rec.CompletedAt = state.HookCompleted, result, note, h.Clock.Now()
	stored, err := h.putHook(ctx, rec)
	if err != nil {
		return fmt.Errorf("recording completion of lifecycle action %s: %w", rec.Token, err)
	}
	if h.Observer != nil {
		var drain time.Duration
		if rec.Transition == events.TransitionTerminating {
			drain = rec.CompletedAt.Sub(rec.ReceivedAt)
		}
		h.Observer.LifecycleActionCompleted(stored, drain)
	}
	return nil
}
