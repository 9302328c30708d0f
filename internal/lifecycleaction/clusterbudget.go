package lifecycleaction

import (
	"context"
	"errors"
	"fmt"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// clusterBudgetKey names the per-cluster budget of t ("<platform>/<cluster>"); "" for a target without a cluster.
func clusterBudgetKey(t model.Target) string {
	if t.Cluster == "" {
		return ""
	}
	return t.Platform + "/" + t.Cluster
}

// olderDrainSlotStale reports whether the slot of an older agent's own drain (a slot without a hook) no longer
// drains: its rollout record is gone, or it is not Replacing that instance at Draining or Terminating.
func olderDrainSlotStale(ctx context.Context, store state.Store, s state.DrainSlot) (bool, error) {
	r, err := store.GetRollout(ctx, s.Group)
	if errors.Is(err, state.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if r.Phase != state.PhaseReplacing || r.Current == nil {
		return true, nil
	}
	cur := r.Current
	return cur.OldInstanceID != s.InstanceID || cur.Step != state.StepDraining && cur.Step != state.StepTerminating, nil
}

// hookSlotStale reports whether the slot of a lifecycle action's drain (DrainSlot.Hook) no longer drains: its
// action's record is gone or completed.
func hookSlotStale(ctx context.Context, store state.Store, s state.DrainSlot) (bool, error) {
	h, err := store.GetHook(ctx, model.ActionKey(s.Group, s.InstanceID, s.Hook))
	if errors.Is(err, state.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return h.State == state.HookCompleted, nil
}

// claimHookDrainSlot claims a slot of the per-cluster budget for the drain of a terminating lifecycle action
// of a group rolled by instance refresh (Auto Scaling terminates a batch at once; the budget says how many of
// the cluster drain at once), before the drain starts. It returns "" once the slot is held, or why the drain
// waits for one (the caller heartbeats the action meanwhile). Groups of other strategies drain at once.
func (h *Hooks) claimHookDrainSlot(ctx context.Context, t model.Target, rec state.Hook) (string, error) {
	key := clusterBudgetKey(t)
	if key == "" {
		return "", nil
	}
	r, err := h.Store.GetRollout(ctx, rec.Group)
	if errors.Is(err, state.ErrNotFound) || (err == nil && r.Strategy != model.StrategyRefresh) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the rollout of %s for the cluster budget: %w", rec.Group, err)
	}
	slot := state.DrainSlot{Group: rec.Group, InstanceID: rec.InstanceID, Hook: rec.HookName, At: h.Clock.Now()}
	stale := func(s state.DrainSlot) (bool, error) {
		if s.Hook != "" {
			return hookSlotStale(ctx, h.Store, s)
		}
		return olderDrainSlotStale(ctx, h.Store, s)
	}
	err = state.ClaimDrainSlot(ctx, h.Store, key, slot, h.Policy.ClusterBudget, stale)
	if errors.Is(err, state.ErrBudgetFull) {
		return "waiting for a slot of the per-cluster budget (" + err.Error() + ")", nil
	}
	return "", err
}
