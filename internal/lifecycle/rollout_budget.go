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

// budgetClaimAttempts bounds the claims of one drain's slot in one call that lose to another drain of the
// cluster (state.ErrBudgetChanged): each is planned again on a fresh read of the budget.
const budgetClaimAttempts = 3

// planClusterBudget plans the claim of a slot of the per-cluster budget (Policy.ClusterBudget) for the drain of
// old, before the drain starts: at most that many instances of one ECS or EKS cluster are drained by rollouts
// at once, whichever group, replica or worker drains them, because every claim is a write conditional on the
// budget's version (state.PlanDrainSlot). It returns the budget record to write (nil when the target has no
// cluster), whether that record holds the slot already (writing it confirms the slot), and why the drain must
// wait ("" when it need not), or a store error. The caller writes the claim with the drain's write-ahead
// (Orchestrator.claim), or with a guarded write of its own when the drain's start is recorded already. A slot
// stays held while the holder's record drains that instance (Draining or Terminating of that replacement) and
// is dropped by the next claim once it does not.
func (o *Orchestrator) planClusterBudget(ctx context.Context, t Target, r state.Rollout, old InstanceView) (*state.ClusterBudget, bool, string, error) {
	key := clusterBudgetKey(t)
	if key == "" {
		return nil, false, "", nil
	}
	slot := state.DrainSlot{Group: r.Group, InstanceID: old.ID, At: o.Clock.Now()}
	b, held, err := state.PlanDrainSlot(ctx, o.Store, key, slot, o.Policy.ClusterBudget, o.drainSlotStale(ctx))
	if errors.Is(err, state.ErrBudgetFull) {
		return nil, false, budgetFullReason(err, old), nil
	}
	return b, held, "", err
}

// claimDrainSlot plans old's slot of the per-cluster budget (planClusterBudget) and writes the record that
// write returns for the plan (write gets the budget record to write, nil without a cluster, and whether it
// holds the slot already) as the guarded write-ahead it names (Orchestrator.guard; "" for a plain write), the
// claim riding on it: both are durable or neither is. write returns ok=false when no write is needed. A claim
// another drain of the cluster beat (state.ErrBudgetChanged) is planned again on a fresh read, up to
// budgetClaimAttempts times in this call; the last one's error is returned as it is. It returns the record
// saved, or r when nothing was written; why the drain must wait for a slot ("" when it need not: the budget
// is full, r is returned and no write-ahead is left pending); or an error of the plan or the write (save's:
// errHeld when a pause stopped it).
func (o *Orchestrator) claimDrainSlot(ctx context.Context, t Target, r state.Rollout, old InstanceView,
	write func(claim *state.ClusterBudget, held bool) (next state.Rollout, what, guard string, ok bool)) (state.Rollout, string, error) {
	for attempt := 1; ; attempt++ {
		claim, held, reason, err := o.planClusterBudget(ctx, t, r, old)
		if err != nil || reason != "" {
			o.guard = ""
			return r, reason, err
		}
		next, what, guard, ok := write(claim, held)
		if !ok {
			return r, "", nil
		}
		o.guard, o.claim = guard, claim
		saved, err := o.save(ctx, next, what)
		if errors.Is(err, state.ErrBudgetChanged) && attempt < budgetClaimAttempts {
			continue
		}
		return saved, "", err
	}
}

// waitingFor returns the outcome of claimDrainSlot as a step's: r with reason and errWait when the drain
// waits for a slot, else r and err.
func waitingFor(r state.Rollout, reason string, err error) (state.Rollout, error) {
	if reason != "" {
		r.Reason = reason
		return r, errWait
	}
	return r, err
}

// budgetFullReason is the reason a drain of old waits for a slot of a full cluster budget (err wraps
// state.ErrBudgetFull and names the slots held).
func budgetFullReason(err error, old InstanceView) string {
	return "per-cluster budget: " + err.Error() + "; next step: drain " + old.ID
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

// notStartedGivesSlotBack returns r and err of a drain of old that did not start, after giving back old's
// slot when it waits (errWait: a pause held it — errHeld, from the guarded write that claims or confirms the
// slot, or from the check before the drain — or a gate did; releaseClusterBudget). Any other error is returned
// as it is: the step is retried.
func (o *Orchestrator) notStartedGivesSlotBack(ctx context.Context, t Target, r state.Rollout, old InstanceView, err error) (state.Rollout, error) {
	if !errors.Is(err, errWait) {
		return r, err
	}
	if rerr := o.releaseClusterBudget(ctx, t, r, old); rerr != nil {
		return r, fmt.Errorf("held before draining %s (%s); giving back its drain slot: %w", old.ID, r.Reason, rerr)
	}
	return r, err
}

// releaseClusterBudget gives back the slot of old when its drain is not started after all: a pause held the
// drain of a start recorded earlier (a crash or a failed drain call after the write-ahead), so a paused group
// does not hold up the drains of the cluster's other groups. A failure is returned: the step is retried, and
// the slot is dropped as stale by a later claim once the record stops draining old.
func (o *Orchestrator) releaseClusterBudget(ctx context.Context, t Target, r state.Rollout, old InstanceView) error {
	key := clusterBudgetKey(t)
	if key == "" {
		return nil
	}
	// Fenced by the record as this call knows it: a replica that stalled past its lease while another took the
	// group over (and drains old again) gives back nothing (ErrConflict: re-read next look).
	err := state.ReleaseDrainSlot(ctx, o.Store, key, r.Group, old.ID, &state.RolloutFence{Group: r.Group, Version: o.lastStored.Version})
	if errors.Is(err, state.ErrFenceMoved) {
		o.writeLost = true // the fence proved the record as last read stale: Stored must not vouch for it
	}
	return err
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
