package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/patch-agent/patch-agent/internal/state"
)

// clusterBudgetKey names the per-cluster budget of t ("<platform>/<cluster>"); "" for a target without a cluster.
func clusterBudgetKey(t Target) string {
	if t.Cluster == "" {
		return ""
	}
	return t.Platform + "/" + t.Cluster
}

// drainSlotStale reports whether a slot's holder no longer drains its instance: its rollout record is gone,
// or it is not Replacing that instance at Draining or Terminating. A slot of the group being reconciled is
// judged on its record as this call last read or wrote it (it holds the record's lease, so nobody else
// moved it: a write since would fail this call's next version condition), any other group's on its record
// read from the store (GetRollout): the previous instance's slot costs no read.
func (o *Orchestrator) drainSlotStale(ctx context.Context) func(state.DrainSlot) (bool, error) {
	return func(s state.DrainSlot) (bool, error) {
		if s.Hook != "" {
			return hookSlotStale(ctx, o.Store, s)
		}
		r, err := o.lastStored, error(nil)
		if s.Group != r.Group || r.Version == 0 {
			r, err = o.Store.GetRollout(ctx, s.Group)
		}
		if errors.Is(err, state.ErrNotFound) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if r.Phase != state.PhaseReplacing || r.Current == nil {
			return true, nil
		}
		// A slot without a hook is an older agent's drain: held while its record still drains that instance.
		cur := r.Current
		return cur.OldInstanceID != s.InstanceID || cur.Step != state.StepDraining && cur.Step != state.StepTerminating, nil
	}
}

// hookSlotStale reports whether the slot of a lifecycle action's drain (DrainSlot.Hook) no longer drains: its
// action's record is gone or completed.
func hookSlotStale(ctx context.Context, store state.Store, s state.DrainSlot) (bool, error) {
	h, err := store.GetHook(ctx, ActionKey(s.Group, s.InstanceID, s.Hook))
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
func (h *Hooks) claimHookDrainSlot(ctx context.Context, t Target, rec state.Hook) (string, error) {
	key := clusterBudgetKey(t)
	if key == "" {
		return "", nil
	}
	r, err := h.Store.GetRollout(ctx, rec.Group)
	if errors.Is(err, state.ErrNotFound) || (err == nil && r.Strategy != StrategyRefresh) {
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
		o := &Orchestrator{Store: h.Store}
		return o.drainSlotStale(ctx)(s)
	}
	err = state.ClaimDrainSlot(ctx, h.Store, key, slot, h.Policy.ClusterBudget, stale)
	if errors.Is(err, state.ErrBudgetFull) {
		return "waiting for a slot of the per-cluster budget (" + err.Error() + ")", nil
	}
	return "", err
}
