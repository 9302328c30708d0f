package lifecycle

import (
	"context"
	"fmt"
	"slices"

	"github.com/patch-agent/patch-agent/internal/state"
)

// retire closes the current replacement; the next member of its batch, if any, becomes Current.
func (o *Orchestrator) retire(ctx context.Context, r state.Rollout, why string) (state.Rollout, error) {
	r.Replaced = append(r.Replaced, r.Current.OldInstanceID)
	r.Current = nil
	if len(r.Batch) > 0 {
		r.Current, r.Batch = &r.Batch[0], r.Batch[1:]
		if len(r.Batch) == 0 {
			r.Batch = nil
		}
	}
	return o.save(ctx, r, why)
}

// retireLeft closes a replacement whose old instance is gone or going without the agent's decrementing
// termination: a failed health check Auto Scaling replaced, a Spot interruption, someone else's termination.
// When desired capacity still holds the agent's surge (desired = DesiredBefore+1, which nobody else wrote), the
// surge is not left behind and not taken again: it carries over to the next outdated instance, whose
// replacement is already there, so the next pick neither surges a second time nor records the raised desired
// capacity as the baseline. With no outdated instance left, the surge goes back through one more drained
// replacement of an instance on the target AMI (drain, then terminate with decrement): never by lowering desired
// capacity, which would let Auto Scaling pick an undrained instance.
//
// Not for the agent's own termination (the view of its tick still shows the surge) nor for the drain-first
// strategy, which never surges.
func (o *Orchestrator) retireLeft(ctx context.Context, v GroupView, r state.Rollout, why string) (state.Rollout, error) {
	cur := r.Current
	if full := surgedDesired(r); len(r.Batch) > 0 && r.Strategy != StrategyDrainFirst &&
		(v.Desired == full || v.Desired < full && cur.Step != state.StepTerminating) {
		// Desired capacity still holds the member's share of the surge: unchanged (the instance left on its
		// own), or lowered by another actor's scale-in, which may be what took the instance. The share is the
		// agent's either way and goes back (the other actor's change stands); a raise is the other actor's.
		// A member at Terminating whose instance left with desired lowered was the agent's own termination
		// with decrement (its record's write lost to a crash): its share is already given back.
		return o.retireLeftOfBatch(ctx, v, r, why) // rollout_batch.go
	}
	if r.Strategy == StrategyDrainFirst || v.Desired != cur.DesiredBefore+1 || len(r.Batch) > 0 {
		return o.retire(ctx, r, why)
	}
	r.Replaced = append(r.Replaced, cur.OldInstanceID)
	var next *InstanceView
	step := state.StepSurge // the surge step finds desired already at DesiredBefore+1 and waits for the replacement
	for _, i := range v.Instances {
		if i.Serving() && i.ImageID != r.TargetImageID && !slices.Contains(r.Replaced, i.ID) {
			next = &i
			break
		}
	}
	if next == nil {
		// No outdated instance left: one instance on the target gives the surge back, drained like any other.
		// The replacement the surge launched stays.
		step = state.StepDraining
		for _, i := range v.Instances {
			if i.Serving() && i.ID != cur.NewInstanceID && !slices.Contains(r.Replaced, i.ID) {
				next = &i
				break
			}
		}
	}
	if next == nil {
		return o.retire(ctx, r, why) // nothing serving to carry to now: the next pick starts afresh
	}
	r.Current = &state.Replacement{Step: step, OldInstanceID: next.ID, DesiredBefore: cur.DesiredBefore,
		InstancesBefore: cur.InstancesBefore, StepStartedAt: o.Clock.Now(), ContainerInstanceARN: next.Node.Name,
		SurgeTo: cur.DesiredBefore + 1} // the carried surge is the agent's own: never surged on top of again
	if step == state.StepDraining {
		r.Current.NewInstanceID = cur.NewInstanceID
	}
	return o.save(ctx, r, fmt.Sprintf("%s; the surge carries over to %s", why, next.ID))
}
