package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ClusterBudget is the durable per-cluster disruption budget of one ECS or EKS cluster: the instances of the
// cluster that rollouts are draining now, whichever group, replica or worker drains them. Every claim is a
// conditional write on Version (PutClusterBudget), so several replicas can never together hold more slots than
// the budget allows. A slot is given back by a write only when a pause holds a drain that did not start
// (ReleaseDrainSlot); otherwise a slot whose holder's rollout record no longer drains its instance (the
// replacement ended, the rollout halted or rolled back, the record is gone) is stale and is dropped by the next
// claim (PlanDrainSlot).
type ClusterBudget struct {
	// Cluster is "<platform>/<cluster name>" ("ecs/prod", "eks/web"): an ECS and an EKS cluster of one name are
	// two budgets.
	Cluster string      `json:"cluster" dynamodbav:"cluster"`
	Slots   []DrainSlot `json:"slots,omitempty" dynamodbav:"slots,omitempty"`
	// Version is the optimistic-concurrency counter (0: no record yet).
	Version int64 `json:"version" dynamodbav:"version"`
	// Fence, when set, makes PutClusterBudget write only while the rollout record of Fence.Group is still at
	// Fence.Version (never stored): a give-back by a replica whose record another writer moved since it read
	// it (it stalled past its lease, and the new holder drains again) fails with ErrFenceMoved instead of
	// deleting the slot of a live drain.
	Fence *RolloutFence `json:"-" dynamodbav:"-"`
}

// RolloutFence names a rollout record at a version: the condition of a fenced budget write.
type RolloutFence struct {
	Group   string
	Version int64
}

// ErrFenceMoved is wrapped, beside ErrConflict, by the error of a fenced budget write (ClusterBudget.Fence)
// whose rollout record is no longer at the fence's version: nothing was written.
var ErrFenceMoved = errors.New("rollout record moved since the budget write was planned")

// DrainSlot is one instance of a cluster being drained by a rollout.
type DrainSlot struct {
	Group      string `json:"group" dynamodbav:"group"`
	InstanceID string `json:"instanceId" dynamodbav:"instanceId"`
	// Hook names the terminating lifecycle hook whose action drains the instance, for a slot claimed by the
	// drain of a lifecycle action (an instance refresh's termination); "" for a slot of a rollout's own drain.
	Hook string    `json:"hook,omitempty" dynamodbav:"hook,omitempty"`
	At   time.Time `json:"at" dynamodbav:"at"` // when the slot was claimed
}

// ErrBudgetFull is wrapped by the error of PlanDrainSlot and ClaimDrainSlot when every slot of the cluster's
// budget is held.
var ErrBudgetFull = errors.New("cluster budget in use")

// ErrBudgetChanged is wrapped by the error of a guarded write whose claim (PutRolloutUnlessPaused) lost to
// another writer of the cluster's budget: nothing was written; plan the claim again on a fresh read.
var ErrBudgetChanged = errors.New("cluster budget changed since it was read")

// claimAttempts bounds the re-reads of a claim that lost a conditional write to another writer.
const claimAttempts = 5

// PlanDrainSlot reads cluster's budget (at most budget instances, budget >= 1; smaller counts as 1) and returns
// the record that claims one slot for slot.Group draining slot.InstanceID, for the caller to write
// conditionally on its Version (PutClusterBudget, or with the drain's write-ahead: PutRolloutUnlessPaused).
// Slots for which stale reports true are dropped from it first. A slot the group already holds for the
// instance returns the record as read and held true. Written, it claims nothing twice but moves Version, so
// that another writer that judged the slot stale on an older read (its holder's record was not draining then)
// loses its conditional write and plans again with the slot held, instead of both drains going ahead: a drain
// write-ahead carries it. When the budget is full it returns nil and an error wrapping ErrBudgetFull that
// names the slots held; a store error, or one of stale, is returned as is.
func PlanDrainSlot(ctx context.Context, s Store, cluster string, slot DrainSlot, budget int, stale func(DrainSlot) (bool, error)) (plan *ClusterBudget, held bool, err error) {
	budget = max(budget, 1)
	b, err := s.GetClusterBudget(ctx, cluster)
	if errors.Is(err, ErrNotFound) {
		b, err = ClusterBudget{Cluster: cluster}, nil
	}
	if err != nil {
		return nil, false, err
	}
	kept := make([]DrainSlot, 0, len(b.Slots)+1)
	for _, h := range b.Slots {
		if h.Group == slot.Group && h.InstanceID == slot.InstanceID {
			return &b, true, nil // already ours
		}
		gone, serr := stale(h)
		if serr != nil {
			return nil, false, fmt.Errorf("checking the drain of %s (group %s) in the budget of %s: %w", h.InstanceID, h.Group, cluster, serr)
		}
		if !gone {
			kept = append(kept, h)
		}
	}
	if len(kept) >= budget {
		names := make([]string, 0, len(kept))
		for _, h := range kept {
			names = append(names, h.InstanceID+" ("+h.Group+")")
		}
		return nil, false, fmt.Errorf("%w: %d of %d drain(s) of cluster %s under way: %s", ErrBudgetFull, len(kept), budget, cluster, strings.Join(names, ", "))
	}
	b.Slots = append(kept, slot)
	return &b, false, nil
}

// ClaimDrainSlot claims one slot as PlanDrainSlot plans it and writes the claim on its own (PutClusterBudget),
// re-reading after a lost race. It returns nil when the slot is held (claimed now, or before and confirmed now); a
// full budget, a store error, or a claim that lost claimAttempts conditional writes in a row (ErrConflict) is
// returned as an error.
func ClaimDrainSlot(ctx context.Context, s Store, cluster string, slot DrainSlot, budget int, stale func(DrainSlot) (bool, error)) error {
	var err error
	for range claimAttempts {
		b, _, perr := PlanDrainSlot(ctx, s, cluster, slot, budget, stale)
		if perr != nil {
			return perr
		}
		if _, err = s.PutClusterBudget(ctx, *b); err == nil || !errors.Is(err, ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("claiming a drain slot of cluster %s for %s: %w", cluster, slot.InstanceID, err)
}

// HoldsDrainSlot reports whether the budget lists group draining instanceID.
func (b ClusterBudget) HoldsDrainSlot(group, instanceID string) bool {
	return slices.ContainsFunc(b.Slots, func(h DrainSlot) bool { return h.Group == group && h.InstanceID == instanceID })
}

// ReleaseDrainSlot drops the slot of group draining instanceID from cluster's budget (a conditional write on
// Version, re-read on a lost race as ClaimDrainSlot does; with fence, also conditional on group's rollout
// record being at fence.Version, else an error wrapping ErrFenceMoved and ErrConflict and nothing written): for a slot whose drain was then not started (a
// pause held the drain of a recorded start, after a crash or a failed drain call), so that the slot does not hold up the cluster's other groups meanwhile. A
// budget without the slot, or no budget record, is not an error.
func ReleaseDrainSlot(ctx context.Context, s Store, cluster, group, instanceID string, fence *RolloutFence) error {
	var err error
	for range claimAttempts {
		b, gerr := s.GetClusterBudget(ctx, cluster)
		if errors.Is(gerr, ErrNotFound) {
			return nil
		}
		if gerr != nil {
			return gerr
		}
		if !b.HoldsDrainSlot(group, instanceID) {
			return nil
		}
		b.Slots = slices.DeleteFunc(b.Slots, func(h DrainSlot) bool { return h.Group == group && h.InstanceID == instanceID })
		b.Fence = fence
		if _, err = s.PutClusterBudget(ctx, b); err == nil || !errors.Is(err, ErrConflict) || errors.Is(err, ErrFenceMoved) {
			return err
		}
	}
	return fmt.Errorf("releasing the drain slot of %s (group %s) in the budget of %s: %w", instanceID, group, cluster, err)
}
