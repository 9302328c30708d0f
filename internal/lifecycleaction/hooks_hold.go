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
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A drain of the agent's instance refresh that reaches its deadline undrained (field case C9: a
// PodDisruptionBudget refuses every eviction) is held, not continued: CONTINUE would terminate the instance with
// the work the drain could not move. The agent puts the instance back in service (Platform.Undrain), records
// the hold on the action's record (state.Hook.DrainHeldAt) and sends one DrainDeadline alert; the rollout's
// refresh step sees the held drain and halts without a rollback (refreshFailing, heldDrainHalt). An instance in
// Terminating:Wait cannot return to InService: the agent keeps the action waiting with heartbeats and never
// completes it while the rollout is halted, and Auto Scaling ends it at the hook's global timeout with the
// hook's default result. An operator's retry or rollback makes the rollout active again and the drain starts
// again with a fresh deadline (DrainFrom). A termination that is not the refresh's (a scale in, a person's)
// continues at the deadline with the alert, and so does one of an instance Auto Scaling reports unhealthy
// (failedHealthCheck): its health check fails, so it is never put back in service.

// refreshHoldsDrain reports whether a terminating action undrained at its deadline is held: its group's rollout
// is the agent's instance refresh replacing instances (strategy refresh, Replacing, not rolling back, no cancel
// or halt under way), or is halted by this very hold, and Auto Scaling does not report the instance unhealthy
// (failedHealthCheck). A cancel under way (a pause, a closed window, another halt) waits for the terminations
// in flight: a held one would keep it waiting until the hook's global timeout.
func (h *Hooks) refreshHoldsDrain(ctx context.Context, rec state.Hook) (bool, error) {
	hold, err := h.refreshReplacesBy(ctx, rec)
	if err != nil || !hold {
		return false, err
	}
	unhealthy, err := h.failedHealthCheck(ctx, rec.InstanceID)
	return !unhealthy, err
}

// refreshReplacesBy reports whether the group's rollout of rec is the agent's instance refresh replacing
// instances (strategy refresh, Replacing, not rolling back, no cancel or other halt under way), or is halting or
// halted for a held drain (rec's or another termination's of the same refresh).
func (h *Hooks) refreshReplacesBy(ctx context.Context, rec state.Hook) (bool, error) {
	r, err := h.rolloutOf(ctx, rec.Group)
	if errors.Is(err, state.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the rollout of %s at the drain deadline of %s: %w", rec.Group, rec.InstanceID, err)
	}
	p := r.Refresh
	if r.Strategy != model.StrategyRefresh || p == nil || p.Rollback {
		return false, nil
	}
	switch r.Phase {
	case state.PhaseReplacing:
		// Replacing, or halting for a held drain: a second termination of the refresh whose deadline comes
		// while the first one's hold halts the rollout is held too, never continued undrained.
		return p.Cancel == "" && p.Halt == "" || model.IsHeldDrainHalt(p.Halt), nil
	case state.PhaseHalted:
		return model.IsHeldDrainHalt(p.Halt), nil
	}
	return false, nil
}

// drainStaysHeld reports whether a held drain stays held: the group's rollout is Halted, or still replaces by
// the refresh that was in flight when the drain was held (its halt follows). A rollout an operator's retry or
// rollback made active again (Detected, RollingBack, a later refresh), or none, releases it.
func (h *Hooks) drainStaysHeld(ctx context.Context, rec state.Hook) (bool, error) {
	r, err := h.rolloutOf(ctx, rec.Group)
	if errors.Is(err, state.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("reading the rollout of %s for the held drain of %s: %w", rec.Group, rec.InstanceID, err)
	}
	switch r.Phase {
	case state.PhaseHalted:
		return true, nil
	case state.PhaseReplacing:
		p := r.Refresh
		return p != nil && !p.Rollback && !p.StartedAt.After(rec.DrainHeldAt), nil
	}
	return false, nil
}

// restartHeldDrain clears the hold of a drain and restarts its deadline's clock (DrainFrom); the drain itself
// starts at the same look.
func (h *Hooks) restartHeldDrain(ctx context.Context, rec state.Hook, log *zap.Logger) (state.Hook, error) {
	rec.DrainHeldAt, rec.DrainFrom = time.Time{}, h.Clock.Now()
	next, err := h.putHook(ctx, rec)
	if err != nil {
		return rec, fmt.Errorf("restarting the held drain of %s: %w", rec.InstanceID, err)
	}
	log.Info("rollout active again: the held drain starts again with a fresh deadline")
	return next, nil
}

// holdDrain holds a drain of the agent's refresh at its deadline: the instance is put back in service, the
// hold recorded on the action's record (its note says why and until when), one DrainDeadline alert sent, and
// the action heartbeated, not completed.
func (h *Hooks) holdDrain(ctx context.Context, t model.Target, a events.LifecycleAction, rec state.Hook, limit time.Duration, detail string, log *zap.Logger) (HookOutcome, error) {
	platform, err := h.Platforms.For(t)
	if err == nil {
		err = platform.Undrain(ctx, t.Cluster, rec.InstanceID)
	}
	if err != nil {
		err = fmt.Errorf("putting %s back in service at its drain deadline: %w", rec.InstanceID, err)
		return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
	}
	global := providers.HookGlobalTimeout(h.heartbeatTimeout(ctx, a.GroupName, a.HookName), nil)
	if hooks, herr := h.groupHooks(ctx, a.GroupName, false); herr == nil && hooks[a.HookName].global > 0 {
		global = hooks[a.HookName].global
	}
	now := h.Clock.Now()
	note := fmt.Sprintf("drain did not finish within %s (%s); %s is back in service but stays in Terminating:Wait (it cannot return "+
		"to InService): the agent heartbeats the action and never completes it while the rollout is halted, and Auto Scaling ends it "+
		"with the hook's default result at its global timeout (%s, about %s): with CONTINUE it is then terminated undrained, "+
		"so retry or roll back before then", limit, detail, rec.InstanceID, global, rec.ReceivedAt.Add(global).UTC().Format(time.RFC3339))
	rec.DrainHeldAt, rec.Note = now, note
	next, err := h.putHook(ctx, rec)
	if err != nil {
		err = fmt.Errorf("recording the held drain of %s: %w", rec.InstanceID, err)
		return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
	}
	rec = next
	log.Warn("drain did not finish before its deadline; held: the instance serves again and the rollout halts", zap.String(logging.Reason, note))
	model.SendAlert(h.Observer, model.Alert{Kind: model.AlertDrainDeadline, Target: t, Detail: a.InstanceID + ": held: " + note, At: now})
	return HookInProgress, h.heartbeat(ctx, a, &rec, log)
}
