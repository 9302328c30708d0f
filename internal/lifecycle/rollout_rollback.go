package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

// halt stops the rollout: no further old instance is touched. With rollback (the default for failures of the
// new AMI) the rollout continues in RollingBack.
func (o *Orchestrator) halt(ctx context.Context, r state.Rollout, reason string, rollback bool) (state.Rollout, error) {
	r.Phase, r.Reason = state.PhaseHalted, "failed: "+reason
	event := "halted"
	if rollback && o.Policy.RollbackOnFailure && r.PreviousTemplate != nil {
		r.Phase, event = state.PhaseRollingBack, "rolling-back"
	}
	o.Log.Error("rollout halted", zap.String(logging.Group, r.Group), zap.String(logging.Reason, reason))
	next, err := o.save(ctx, r, event, state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: event,
		PreviousImage: r.PreviousImageID, NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion, Detail: reason})
	if err == nil && next.Phase == state.PhaseHalted {
		err = errWait
	}
	return next, err
}

// rollBack puts the group's launch template back to the reference it had before the rollout, removes
// surge instances that never became healthy, puts a draining old instance back in service, and gives back
// the agent's max size increase. Each part checks the world first, so it is safe to repeat.
func (o *Orchestrator) rollBack(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	ref, err := TemplateRef(v.Group)
	if err != nil {
		return r, err
	}
	if prev := r.PreviousTemplate; prev != nil && (ref.ID != prev.ID || ref.Version != prev.Version) {
		if err := o.Templates.PointGroup(ctx, v.Group, *prev); err != nil {
			return r, err
		}
		o.logStep(r, "launch template restored to version "+prev.Version)
	}
	if cur := r.Current; cur != nil {
		// Only the agent's own surge is given back (field case C21): while desired capacity is still exactly
		// DesiredBefore+1, one removal decrements it; once someone else moved desired capacity (a cluster
		// autoscaler, managed scaling), it is theirs, and unhealthy instances are removed without decrement, so
		// Auto Scaling replaces them from the restored launch template.
		decrements := 0
		if r.Strategy == StrategyDrainFirst {
			decrements = len(v.Instances) // as before: ECS managed scaling sets desired capacity again itself
		} else if v.Desired == surgedDesired(r) {
			decrements = inFlight(r) // a batch surged by its size (rollout_batch.go)
		}
		for _, i := range v.Instances {
			if slices.Contains(cur.InstancesBefore, i.ID) || !i.InService() && i.LifecycleState != lifecycleStatePending {
				continue
			}
			if i.ImageID != "" && i.ImageID != r.TargetImageID {
				continue // launched from the restored template (or someone else's): not the rollout's to remove
			}
			if i.Serving() && i.ImageID == r.TargetImageID {
				continue // healthy capacity is kept
			}
			decrement := decrements > 0
			decrements--
			if err := o.groups().Terminate(ctx, i.ID, decrement); err != nil {
				return r, fmt.Errorf("removing unhealthy replacement %s: %w", i.ID, err)
			}
			o.logStep(r, "unhealthy replacement "+i.ID+" removed")
		}
		for _, m := range append([]state.Replacement{*cur}, r.Batch...) {
			if old, ok := v.Instance(m.OldInstanceID); ok && old.Node.Draining && !old.Leaving() { // one leaving stays drained (its own lifecycle action drains it)
				platform, err := o.Platforms.For(t)
				if err != nil {
					return r, err
				}
				if err := platform.Undrain(ctx, t.Cluster, old.ID); err != nil {
					return r, err
				}
			}
		}
		newServing, kept := 0, int32(0)
		for _, i := range v.Instances {
			if slices.Contains(cur.InstancesBefore, i.ID) {
				continue
			}
			if !i.Serving() {
				return r, errWait // the unhealthy replacement is still leaving
			}
			newServing++
			if i.ImageID == r.TargetImageID {
				kept++
			}
		}
		if kept > 0 && r.Strategy == StrategySurge && v.Desired == cur.DesiredBefore+int32(newServing) {
			// Healthy replacements of a batch on the AMI rolled back from still hold the agent's surge: they
			// are owed back, so that a batch's rollback keeps the group's capacity. Once rolled back, the agent
			// rolls the group to the rolled-back AMI (giveBackRolledBack), whose first pick drains them and
			// terminates them with decrement, so desired capacity ends where it was before the rollout. Max
			// size is given back by that rollout's Verifying. Desired capacity someone else moved is theirs:
			// nothing owed.
			r.HaltedSurgeTo, r.HaltedSurgeCount = v.Desired, kept
			r.Phase, r.Current, r.Batch = state.PhaseRolledBack, nil, nil
			next, err := o.save(ctx, r, fmt.Sprintf("rolled back; %d healthy replacement(s) on %s owed back", kept, r.TargetImageID),
				state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "rolled-back",
					PreviousImage: r.TargetImageID, NewImage: r.PreviousImageID, Detail: r.Reason})
			if err == nil {
				err = errWait
			}
			return next, err
		}
		if newServing == 0 && r.Strategy != StrategyDrainFirst && v.Desired == surgedDesired(r) {
			// The surge is still in place but no replacement survives (none ever launched): give it back,
			// or Auto Scaling would launch the extra instance later from the restored template.
			if err := o.groups().SetDesired(ctx, v.Name, cur.DesiredBefore); err != nil {
				return r, fmt.Errorf("undoing the surge of %s (desired back to %d): %w", v.Name, cur.DesiredBefore, err)
			}
			return r, errWait // the next tick sees the restored desired capacity
		}
	}
	history, done, err := o.restoreMax(ctx, v, &r)
	if err != nil || !done {
		return r, err
	}
	r.Phase, r.Current, r.Batch = state.PhaseRolledBack, nil, nil
	history = append(history, state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "rolled-back",
		PreviousImage: r.TargetImageID, NewImage: r.PreviousImageID, Detail: r.Reason})
	next, err := o.save(ctx, r, "rolled back", history...)
	if err == nil {
		err = errWait
	}
	return next, err
}

// giveBackRolledBack moves a RolledBack record that owes healthy replacements back (HaltedSurgeTo set by
// rollBack) into a rollout to the AMI it rolled back to (-> Detected): the instances on the AMI rolled back from
// are its outdated ones, and its first pick gives the owed surge back through them (pickNext), drained and then
// terminated with decrement. RollbackFrom keeps the failed AMI from being rolled again while the source names it;
// the rolled-back AMI needs no new approval and no soak (it ran before the rollout).
func (o *Orchestrator) giveBackRolledBack(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	from, to := r.TargetImageID, r.PreviousImageID
	r.RollbackFrom, r.TargetImageID, r.PreviousImageID = from, to, from
	r.Source, r.SourceVersion, r.SourceModified = "rollback of "+from, 0, time.Time{}
	r.DetectedAt, r.Current, r.Batch, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = o.Clock.Now(), nil, nil, nil, "", nil
	r.ApprovedImage, r.ApprovedBy, r.Trigger = to, "patch-agent (rollback)", ""
	r.OnTarget = v.CountOnImage(to)
	r.Phase = state.PhaseDetected
	return o.save(ctx, r, fmt.Sprintf("giving back %d replacement(s) on %s after the rollback", max(r.HaltedSurgeCount, 1), from),
		state.HistoryEntry{Group: t.Group, At: o.Clock.Now(), Event: "detected", PreviousImage: from, NewImage: to, Source: r.Source})
}
