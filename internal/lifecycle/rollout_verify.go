package lifecycle

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

// verify checks that every in-service instance, and every warm pool instance, runs the target AMI, gives back the agent's own +1 on max
// size, and completes the rollout.
func (o *Orchestrator) verify(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, error) {
	for _, i := range v.Instances {
		if i.Leaving() {
			continue
		}
		if !i.InService() {
			r.Reason = fmt.Sprintf("waiting for %s to settle (%s)", i.ID, i.LifecycleState)
			return r, errWait
		}
		if i.ImageID != r.TargetImageID {
			r.Phase = state.PhaseReplacing
			return o.save(ctx, r, fmt.Sprintf("instance %s runs %s: back to replacing", i.ID, i.ImageID))
		}
	}
	if poolUnknown(v) {
		r.Reason = "looking at the warm pool first"
		return r, errWait
	}
	if old := outdatedPool(v, r.TargetImageID); len(old) > 0 { // no old AMI left in the warm pool either (C18)
		r.Phase = state.PhaseReplacing
		return o.save(ctx, r, fmt.Sprintf("warm pool instance %s runs %q: back to replacing", old[0].ID, old[0].ImageID))
	}
	history, done, err := o.restoreMax(ctx, v, &r)
	if err != nil || !done {
		return r, err
	}
	r.Phase, r.Reason = state.PhaseCompleted, ""
	history = append(history, state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "completed",
		PreviousImage: r.PreviousImageID, NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion,
		Detail: fmt.Sprintf("%d instance(s) replaced", len(r.Replaced))})
	return o.save(ctx, r, "rollout completed", history...)
}

// restoreMax lowers max size by the agent's own +1, only while max is still the value the agent wrote: a
// max changed by someone else since is theirs, and is never overwritten with a stale value. When desired
// capacity is above the original max (someone scaled out meanwhile), max cannot go back without cutting
// capacity: it is left where it is, and the history entry it returns says so (written with the transition
// that follows).
func (o *Orchestrator) restoreMax(ctx context.Context, v GroupView, r *state.Rollout) ([]state.HistoryEntry, bool, error) {
	if r.MaxRaisedTo == 0 {
		return nil, true, nil
	}
	var history []state.HistoryEntry
	switch {
	case v.Max == r.MaxRaisedTo && v.Desired <= r.MaxRaisedFrom:
		if err := o.groups().SetMax(ctx, v.Name, r.MaxRaisedFrom); err != nil {
			return nil, false, fmt.Errorf("restoring max size of %s to %d: %w", v.Name, r.MaxRaisedFrom, err)
		}
	case v.Max == r.MaxRaisedTo:
		detail := fmt.Sprintf("max size left at %d: desired capacity %d is above the original max %d", v.Max, v.Desired, r.MaxRaisedFrom)
		o.Log.Warn(detail, zap.String(logging.Group, v.Name))
		history = append(history, state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "max-not-restored", Detail: detail})
	case v.Max != r.MaxRaisedFrom:
		o.Log.Warn("max size changed by someone else during the rollout; leaving it", zap.String(logging.Group, v.Name),
			zap.Int32("max", v.Max), zap.Int32("agent_wrote", r.MaxRaisedTo))
	}
	r.MaxRaisedFrom, r.MaxRaisedTo = 0, 0
	return history, true, nil
}
