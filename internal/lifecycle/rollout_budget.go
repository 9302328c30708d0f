package lifecycle

import (
	"context"
	"errors"

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

// planClusterBudget plans the claim of a slot of the per-cluster budget (Policy.ClusterBudget, issue #20 items 1
// and 10) for the drain of old, before the drain starts: at most that many instances of one ECS or EKS cluster
// are drained by rollouts at once, whichever group, replica or worker drains them, because every claim is a
// write conditional on the budget's version (state.PlanDrainSlot). It returns the budget record to write (nil
// when the target has no cluster or the slot is held already) and why the drain must wait ("" when it need
// not), or a store error. The caller writes the claim with the drain's write-ahead (Orchestrator.claim), or on
// its own when that write is durable already (claimClusterBudget). A slot stays held while the holder's record
// drains that instance (Draining or Terminating of that replacement) and is dropped by the next claim once it
// does not.
func (o *Orchestrator) planClusterBudget(ctx context.Context, t Target, r state.Rollout, old InstanceView) (*state.ClusterBudget, string, error) {
	key := clusterBudgetKey(t)
	if key == "" {
		return nil, "", nil
	}
	slot := state.DrainSlot{Group: r.Group, InstanceID: old.ID, At: o.Clock.Now()}
	b, err := state.PlanDrainSlot(ctx, o.Store, key, slot, o.Policy.ClusterBudget, o.drainSlotStale(ctx))
	if errors.Is(err, state.ErrBudgetFull) {
		return nil, budgetFullReason(err, old), nil
	}
	return b, "", err
}

// claimClusterBudget claims the slot for the drain of old on its own (state.ClaimDrainSlot), for a drain whose
// write-ahead is durable already (its start recorded before a crash, or a drain begun again): it returns why the
// drain must wait ("" when the slot is held), or a store error.
func (o *Orchestrator) claimClusterBudget(ctx context.Context, t Target, r state.Rollout, old InstanceView) (string, error) {
	key := clusterBudgetKey(t)
	if key == "" {
		return "", nil
	}
	slot := state.DrainSlot{Group: r.Group, InstanceID: old.ID, At: o.Clock.Now()}
	err := state.ClaimDrainSlot(ctx, o.Store, key, slot, o.Policy.ClusterBudget, o.drainSlotStale(ctx))
	if errors.Is(err, state.ErrBudgetFull) {
		return budgetFullReason(err, old), nil
	}
	return "", err
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
// read from the store (GetRollout): the previous instance's slot costs no read (issue #21).
func (o *Orchestrator) drainSlotStale(ctx context.Context) func(state.DrainSlot) (bool, error) {
	return func(s state.DrainSlot) (bool, error) {
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
		for _, cur := range append([]state.Replacement{*r.Current}, r.Batch...) { // a batch's members each hold one
			if cur.OldInstanceID == s.InstanceID && (cur.Step == state.StepDraining || cur.Step == state.StepTerminating) {
				return false, nil
			}
		}
		return true, nil
	}
}
