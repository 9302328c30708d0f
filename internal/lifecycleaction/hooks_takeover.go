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

// staleVerdict is what the reconcile loop (AdoptWaiting) does with the record of a lifecycle action that its
// message drives (state.Hook not Adopted, not completed) when Auto Scaling's group description shows the
// instance still waiting on the hook.
type staleVerdict int

const (
	// staleLive: the action's owner is alive as far as the record tells; its message drives it.
	staleLive staleVerdict = iota
	// staleRescue: the owner's claim is still live but its heartbeat is overdue (the owner died or stalled
	// after recording the action): heartbeat the action so it does not time out, and nothing else.
	staleRescue
	// staleTakeOver: nobody holds the action (the owner's claim expired, or it is this replica's own claim
	// left by an earlier incarnation): take it over.
	staleTakeOver
)

// heartbeatOverdue is the part of a hook's HeartbeatTimeout after which a live owner's heartbeat is overdue:
// a live owner heartbeats once a third has passed (heartbeat) at its next look, so half the timeout without
// one means its owner has stopped; the reconcile loop that notices it (every sweep: at most a third of the
// timeout apart) still heartbeats before five sixths of the timeout, before Auto Scaling applies the
// DefaultResult.
func heartbeatOverdue(heartbeat time.Duration) time.Duration { return heartbeat / 2 }

// staleRule is the rule for taking over a message-driven lifecycle action record rec (its key, its hook's
// HeartbeatTimeout heartbeat) at now, written down in docs/state.md "Lifecycle action records":
//
//   - a record this process drove through its message within the claim's TTL is live (its consumer looks
//     at it at every poll);
//   - a record whose owner's claim is held by another replica (state.LeaseRule.HeldByOther: its expiry plus
//     the skew margin is ahead) is never taken over: the owner may be alive. When its last heartbeat (or,
//     without one, when it was recorded; or this replica's own rescue heartbeat) is older than
//     heartbeatOverdue, the owner has stopped heartbeating and the action would time out before its message
//     (invisible for the dead receive's visibility timeout, 2 minutes) comes back: it is rescued — heartbeated
//     by InstanceId, nothing drained, nothing completed, nothing written;
//   - otherwise (no owner; the owner's claim expired; this replica's own claim of an earlier incarnation,
//     the same --owner-id after a restart) it is taken over.
func (h *Hooks) staleRule(rec state.Hook, heartbeat time.Duration, now time.Time) staleVerdict {
	h.mu.Lock()
	driven, drivenHere := h.driven[rec.Token]
	rescued := h.rescued[rec.Token]
	h.mu.Unlock()
	if rec.Owner == h.Owner && drivenHere && now.Sub(driven) < h.leases().EffectiveTTL() {
		return staleLive
	}
	if !h.leases().HeldByOther(rec.Lease(), h.Owner, now) {
		return staleTakeOver
	}
	last := latest(rec.ReceivedAt, rec.LastHeartbeat, rescued)
	if now.Sub(last) >= heartbeatOverdue(heartbeat) {
		return staleRescue
	}
	return staleLive
}

// latest returns the latest of ts.
func latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

// drivenByMessage notes that this process looked at the action of key through its message at now (Handle),
// so that its own reconcile loop leaves the record to its message (staleRule).
func (h *Hooks) drivenByMessage(key string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.driven == nil {
		h.driven = map[string]time.Time{}
	}
	h.driven[key] = now
	for k, at := range h.driven {
		if now.Sub(at) > h.leases().EffectiveTTL() {
			delete(h.driven, k) // a message done or gone; a record left by it is judged by the rule
		}
	}
}

// takeOver applies staleRule to rec, the record of action a (found waiting in the group's description, a.Token
// empty) that its message drives, and carries the verdict out. A take-over is confirmed first as a message is
// (invariant 9: DescribeAutoScalingInstances places the instance in the group and in the action's wait state,
// the group has the hook), then written as one conditional write (the record's version) that makes it Adopted
// with this replica's claim: another replica's write in between (its owner alive after all, the returning
// message claiming it) wins and nothing is done here. The adopted action is then driven like one found without
// its message (drain, heartbeat, completion by InstanceId); its message, when it comes, finds it Adopted and is
// held until it is completed, then deleted: never a second drain or completion. An action Auto Scaling no longer
// shows waiting (completed elsewhere, instance gone) is neither taken over nor completed. Errors: Auto
// Scaling's and the store's, wrapped.
func (h *Hooks) takeOver(ctx context.Context, t model.Target, a events.LifecycleAction, rec state.Hook, now time.Time) error {
	heartbeat := h.actionHeartbeatTimeout(ctx, a, rec)
	switch h.staleRule(rec, heartbeat, now) {
	case staleLive:
		return nil // its message drives it
	case staleRescue:
		return h.rescue(ctx, a, rec, now)
	}
	c, err := h.confirm(ctx, a)
	if err != nil || c.verdict != verdictConfirmed {
		return err // not (or no longer) waiting: nothing to take over
	}
	h.mu.Lock()
	rescued := h.rescued[rec.Token]
	delete(h.rescued, rec.Token)
	h.mu.Unlock()
	previous := rec.Owner
	rec.Adopted, rec.Confirmed, rec.WaitState = true, true, c.detail
	rec.LastHeartbeat = latest(rec.LastHeartbeat, rescued)
	rec = rec.WithLease(h.leases().Claim(h.Owner, now))
	if _, err := h.putHook(ctx, rec); errors.Is(err, state.ErrConflict) {
		return nil // its owner, its returning message or another replica wrote it first
	} else if err != nil {
		return fmt.Errorf("taking over lifecycle action %s: %w", rec.Token, err)
	}
	h.Log.Warn("lifecycle action left by its owner (died or stalled after recording it); taken over by the reconcile loop",
		zap.String(logging.Group, a.GroupName), zap.String(logging.InstanceID, a.InstanceID),
		zap.String(logging.LifecycleHook, a.HookName), zap.String(logging.Transition, a.Transition),
		zap.String(logging.Reason, fmt.Sprintf("claim of %q expired at %s", previous, rec.OwnerExpires.Format(time.RFC3339))))
	_, err = h.Handle(ctx, t, a)
	return err
}

// rescue heartbeats the action of rec by InstanceId and LifecycleHookName (Amazon EC2 Auto Scaling API
// Reference, RecordLifecycleActionHeartbeat: the timeout restarts) while its owner's claim is live and its
// heartbeat overdue. Nothing is written to the record: it stays its owner's, and a live owner's own
// heartbeat only comes on top. Auto Scaling's "No active Lifecycle Action found" answer ends it quietly
// (completed or timed out meanwhile: the owner or the message records that).
func (h *Hooks) rescue(ctx context.Context, a events.LifecycleAction, rec state.Hook, now time.Time) error {
	active, err := h.actions().Heartbeat(ctx, a, true)
	if err != nil {
		return fmt.Errorf("heartbeating lifecycle action %s of a stalled owner: %w", rec.Token, err)
	}
	if !active {
		return nil
	}
	h.mu.Lock()
	if h.rescued == nil {
		h.rescued = map[string]time.Time{}
	}
	h.rescued[rec.Token] = now
	for k, at := range h.rescued {
		if now.Sub(at) > h.leases().EffectiveTTL()+h.leases().Margin() {
			delete(h.rescued, k) // its owner's claim has expired since: taken over or done
		}
	}
	h.mu.Unlock()
	h.Log.Warn("lifecycle action's heartbeat overdue while its owner holds it; heartbeated for the owner",
		zap.String(logging.Group, a.GroupName), zap.String(logging.InstanceID, a.InstanceID),
		zap.String(logging.LifecycleHook, a.HookName),
		zap.String(logging.Reason, fmt.Sprintf("owner %q, last heartbeat or record at %s", rec.Owner, latest(rec.ReceivedAt, rec.LastHeartbeat).Format(time.RFC3339))))
	return nil
}
