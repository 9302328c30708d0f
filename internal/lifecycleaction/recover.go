package lifecycleaction

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Recover puts back in service (ECS ACTIVE / uncordon, Platform.Undrain) every instance the agent drained for
// a lifecycle action (a state.DrainMark) that is InService again — so no lifecycle action waits on it — and
// that no rollout is replacing (rollouts by group, as the tick left them): an action that timed out or was
// completed elsewhere, a root volume replacement that brought the instance back, or a message that should
// never have been acted on must not leave capacity drained for good. Each is logged as a warning.
//
// Cost per reconcile tick: at most one ListDrainMarks (drainMarks: none while this process wrote or deleted no
// mark since its last listing, at most a lease TTL old); with marks, the tick's own description of the managed groups
// (d) skips those whose instance is still waiting or terminating, and one DescribeAutoScalingInstances per 50
// remaining marks confirms the state right before the undrain. No cluster is observed. The mark of an
// instance that left its group, or of a group no longer managed, is deleted without touching the instance. An
// instance in its group's warm pool (a Warmed:* state; the group's description does not list it) keeps its
// mark: it comes back DRAINING, and its launch action or this recovery puts it back in service (field case C18).
func (h *Hooks) Recover(ctx context.Context, d providers.Discovered, rollouts map[string]state.Rollout) error {
	marks, err := h.drainMarks(ctx)
	if err != nil {
		return fmt.Errorf("reading drain marks: %w", err)
	}
	var check []state.DrainMark
	for _, m := range marks {
		if _, ok := d.DrainTarget(m.Group); !ok {
			h.forgetMark(ctx, m, "group no longer managed")
			continue
		}
		if r, ok := rollouts[m.Group]; ok && r.Current != nil && r.Current.OldInstanceID == m.InstanceID {
			continue // the rollout replacing it owns its drain (and puts it back at the drain deadline)
		}
		if g, described := d.Groups[m.Group]; described {
			st, in := "", false
			for _, i := range g.Instances {
				if aws.ToString(i.InstanceId) == m.InstanceID {
					st, in = string(i.LifecycleState), true
				}
			}
			if !in {
				check = append(check, m) // gone, or in the warm pool: Auto Scaling tells
				continue
			}
			if st != string(astypes.LifecycleStateInService) {
				continue // still waiting, terminating or being replaced: not yet
			}
		}
		check = append(check, m)
	}
	for start := 0; start < len(check); start += providers.MaxAutoScalingInstanceIDs {
		batch := check[start:min(start+providers.MaxAutoScalingInstanceIDs, len(check))]
		ids := make([]string, len(batch))
		for i, m := range batch {
			ids[i] = m.InstanceID
		}
		now, err := h.actions().Instances(ctx, ids)
		if err != nil {
			return fmt.Errorf("confirming the state of %d drained instance(s) with Auto Scaling: %w", len(ids), err)
		}
		for _, m := range batch {
			i, ok := now[m.InstanceID]
			switch {
			case !ok || i.Group != m.Group:
				h.forgetMark(ctx, m, "instance left the group")
			case i.LifecycleState == string(astypes.LifecycleStateInService):
				t, _ := d.DrainTarget(m.Group)
				_ = h.undrain(ctx, t, m, "instance the agent drained for a lifecycle action is InService again with no action waiting; put back in service",
					"no lifecycle action or rollout holds it", true)
			}
		}
	}
	return nil
}

// undrain puts an instance the agent drained (mark m) back in service (Platform.Undrain: ECS ACTIVE, node
// uncordoned), logs it (a warning when warn, else info: what with why) and drops the mark. An error is logged
// and returned; the mark stays, so the next look tries again.
func (h *Hooks) undrain(ctx context.Context, t model.Target, m state.DrainMark, what, why string, warn bool) error {
	log := h.Log.With(zap.String(logging.Group, m.Group), zap.String(logging.InstanceID, m.InstanceID),
		zap.String(logging.LifecycleToken, m.Token))
	platform, err := h.Platforms.For(t)
	if err == nil {
		err = platform.Undrain(ctx, t.Cluster, m.InstanceID)
	}
	if err != nil {
		log.Warn("putting an instance the agent drained back in service failed; retrying", zap.Error(err))
		return fmt.Errorf("putting drained instance %s back in service: %w", m.InstanceID, err)
	}
	logf := log.Info
	if warn {
		logf = log.Warn
	}
	logf(what, zap.String(logging.Reason, "drained since "+m.At.UTC().Format("2006-01-02T15:04:05Z")+", "+why))
	h.forgetMark(ctx, m, "")
	return nil
}

func (h *Hooks) forgetMark(ctx context.Context, m state.DrainMark, why string) {
	h.marksWritten()
	if err := h.Store.DeleteDrainMark(ctx, m.InstanceID); err != nil {
		h.Log.Warn("deleting a drain mark failed; retrying next tick", zap.String(logging.InstanceID, m.InstanceID), zap.Error(err))
		return
	}
	if why != "" {
		h.Log.Debug("drain mark dropped", zap.String(logging.InstanceID, m.InstanceID), zap.String(logging.Reason, why))
	}
}

// drainMarks returns every drain mark for Recover: the last listing this process took (ListDrainMarks, one
// Query) while it is less than a lease TTL old and this process has written or deleted no mark since it began
// (marksWritten), else a new listing. A mark is written only by an agent that drains for a lifecycle action it
// holds the claim of, and deleted by Recover or with its undrain, so between this process's writes a listing
// changes only by another replica's drains: those are in flight under that replica's claim (Recover leaves an
// instance that still waits or terminates alone) and seen within a lease TTL, the time after which a stopped
// replica's claim lapses and its work is taken up anyway. Every undrain is still confirmed with Auto Scaling
// right before it. At the 15 s tick of a rollout this lists the marks about twice per drain and every lease
// TTL instead of on every tick. Errors are the store's.
func (h *Hooks) drainMarks(ctx context.Context) ([]state.DrainMark, error) {
	now := h.Clock.Now()
	h.mu.Lock()
	if h.marksListed && h.marksGen == h.marksWrites && now.Sub(h.marksAt) < h.leases().EffectiveTTL() {
		marks := slices.Clone(h.marks)
		h.mu.Unlock()
		return marks, nil
	}
	gen := h.marksWrites
	h.mu.Unlock()
	marks, err := h.Store.ListDrainMarks(ctx)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.marks, h.marksAt, h.marksGen, h.marksListed = slices.Clone(marks), now, gen, true
	h.mu.Unlock()
	return marks, nil
}

// marksWritten notes that this process is about to write or delete a drain mark: the next Recover lists the
// marks again (drainMarks).
func (h *Hooks) marksWritten() {
	h.mu.Lock()
	h.marksWrites++
	h.mu.Unlock()
}
