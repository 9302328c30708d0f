package engine

import (
	"context"
	"fmt"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// supersede moves a Replacing rollout to the newer AMI once its instance refresh is cancelled (the launches and
// terminations in flight have finished); the rollout goes back to Detected with the newer target, so it passes
// every gate again (AMI gate, soak, window, alarms, and approval: an approval belongs to one AMI, ApprovedImage
// names the superseded one and is cleared) before a new launch template version is prepared. The remaining
// instances and those already replaced with the superseded AMI are all outdated then, and go to the newest. The
// launch template reference recorded before the first rollout (PreviousTemplate) is kept, so a rollback still
// restores the last good template. History records the superseded rollout ("superseded": from the superseded
// AMI to the newer one).
func (o *Orchestrator) supersede(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	old, replaced := r.TargetImageID, len(r.Replaced)
	detail := fmt.Sprintf("rollout to %s superseded by %s after %d replacement(s); every instance not on %s is replaced again",
		old, ami.ImageID, replaced, ami.ImageID)
	r.TargetImageID = ami.ImageID
	r.Source, r.SourceVersion, r.SourceModified = ami.Parameter, ami.Version, ami.LastModified
	r.DetectedAt, r.Reason, r.Replaced, r.NewTemplateVersion = o.Clock.Now(), "", nil, ""
	r.ApprovedImage, r.ApprovedBy = "", ""
	clearSetBacks(&r) // setback.go
	r.Trigger = ""    // a newer AMI: its soak applies, even when the superseded rollout was a max-instance-age one
	r.OnTarget = v.CountOnImage(ami.ImageID)
	r.Phase = state.PhaseDetected
	return o.save(ctx, r, "newer AMI supersedes the target at an instance boundary", state.HistoryEntry{Group: t.Group,
		At: o.Clock.Now(), Event: "superseded", PreviousImage: old, NewImage: ami.ImageID, Source: ami.Parameter,
		SourceVersion: ami.Version, Detail: detail})
}
