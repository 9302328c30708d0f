package engine

import (
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// soakSkipped reports whether an operator skipped the soak of r's target AMI (`patch-agent approve GROUP
// --skip-soak --reason ...`): the skip belongs to that one AMI.
func soakSkipped(r state.Rollout) bool {
	return r.SkipSoakImage != "" && r.SkipSoakImage == r.TargetImageID
}

// alertSoakSkipped sends one SoakSkipped alert (who: the approver's STS caller ARN, detail: their reason) when
// the rollout r just left Waiting for Preparing before its soak time ended, because it was skipped.
func (o *Orchestrator) alertSoakSkipped(t model.Target, r state.Rollout) {
	if !soakSkipped(r) || t.Policy.MinAMIAge <= 0 || o.Clock.Now().Sub(r.SourceModified) >= t.Policy.MinAMIAge {
		return
	}
	ends := r.SourceModified.Add(t.Policy.MinAMIAge).UTC().Format(time.RFC3339)
	o.Log.Warn("rollout started before its soak ended: soak skipped by an operator", zap.String(logging.Group, t.Group),
		zap.String(logging.AMI, r.TargetImageID), zap.String(logging.Reason, r.SkipSoakReason), zap.String(logging.Actor, r.ApprovedBy))
	model.SendAlert(o.Observer, model.Alert{Kind: model.AlertSoakSkipped, Target: t, Who: r.ApprovedBy, ImageID: r.TargetImageID, At: o.Clock.Now(),
		Detail: "soak (until " + ends + ") skipped: " + r.SkipSoakReason})
}
