package engine

import (
	"context"

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
