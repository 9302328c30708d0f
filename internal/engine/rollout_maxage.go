package engine

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TriggerMaxInstanceAge is the Rollout.Trigger and history event of a rollout started because instances
// outlived TagMaxInstanceAge.
const TriggerMaxInstanceAge = "max-instance-age"

// agedOut reports whether instance i has outlived t's maximum instance lifetime at now. An instance without a
// known launch time is never aged out.
func agedOut(t model.Target, i model.InstanceView, now time.Time) bool {
	return t.Policy.MaxInstanceAge > 0 && !i.LaunchTime.IsZero() && now.Sub(i.LaunchTime) >= t.Policy.MaxInstanceAge
}

// agedOutIDs returns the InService instances of v that outlived t's maximum lifetime at now, oldest first.
func agedOutIDs(t model.Target, v model.GroupView, now time.Time) []string {
	var out []string
	for _, i := range v.Instances {
		if i.InService() && agedOut(t, i, now) {
			out = append(out, i.ID)
		}
	}
	return out
}

// detectAged starts a rollout to the AMI the group already runs (its target) when instances outlived the
// group's maximum lifetime: Detected with Trigger max-instance-age and a history entry of that event, so the
// rollout passes the start gates (window, pause, approval, alarms; not the soak) and replaces those instances.
// ok is false when no instance is past the age (or the group has no maximum, or no target yet).
func (o *Orchestrator) detectAged(ctx context.Context, t model.Target, v model.GroupView, r state.Rollout) (state.Rollout, bool, error) {
	if r.TargetImageID == "" || (r.Phase != state.PhaseIdle && r.Phase != state.PhaseCompleted) {
		return r, false, nil
	}
	old := agedOutIDs(t, v, o.Clock.Now())
	if len(old) == 0 {
		return r, false, nil
	}
	detail := fmt.Sprintf("%d instance(s) older than %s (%s): replaced on AMI %s", len(old), t.Policy.MaxInstanceAge,
		strings.Join(old, ", "), r.TargetImageID)
	r.Platform, r.Cluster, r.Trigger = t.Platform, t.Cluster, TriggerMaxInstanceAge
	r.PreviousImageID = r.TargetImageID
	r.DetectedAt, r.Reason, r.Current, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = o.Clock.Now(), "", nil, nil, "", nil
	r.RollbackFrom, r.ApprovedImage, r.ApprovedBy = "", "", ""
	r.Phase = state.PhaseDetected
	next, err := o.save(ctx, r, "instances past the maximum instance age", state.HistoryEntry{Group: t.Group, At: o.Clock.Now(),
		Event: TriggerMaxInstanceAge, PreviousImage: r.TargetImageID, NewImage: r.TargetImageID, Source: r.Source,
		SourceVersion: r.SourceVersion, Detail: detail})
	return next, true, err
}

// maxAgeNote is the status note of a group with a maximum instance lifetime that the agent does not enforce
// now, "" when it does (or the group has none): detectAged only starts an age-driven rollout from Idle or
// Completed while the group's AMI source names the group's target AMI. After a manual rollback (the source
// still names the AMI rolled back from), while the target is refused by the AMI gate, halted or rolled back, or
// while the source cannot be read, instances outlive the tag without being replaced, and the note says so
// instead. Not while the source names a new AMI (that starts its own rollout this tick). The first time a note
// appears (stored, the record as read, does not carry it yet) it is logged as a warning.
func (o *Orchestrator) maxAgeNote(t model.Target, ami *model.ResolvedAMI, stored state.Rollout) string {
	r := stored
	if t.Policy.MaxInstanceAge <= 0 || r.TargetImageID == "" {
		return ""
	}
	enforced := ami != nil && ami.ImageID == r.TargetImageID && (r.Phase == state.PhaseIdle || r.Phase == state.PhaseCompleted)
	if enforced || (r.Active() && !amiRefused(r)) {
		return "" // an active rollout replaces aged instances itself (replaceable)
	}
	var why string
	switch {
	case ami == nil:
		why = "the group's AMI source cannot be read"
	case ami.ImageID != r.TargetImageID && ami.ImageID == r.RollbackFrom:
		why = fmt.Sprintf("the source names AMI %s, which a manual rollback moved the group away from (its target is %s)", ami.ImageID, r.TargetImageID)
	case ami.ImageID != r.TargetImageID:
		return "" // a new AMI: detect starts its rollout
	case amiRefused(r):
		why = fmt.Sprintf("the source's AMI %s is refused by the AMI gate", r.TargetImageID)
	default:
		why = fmt.Sprintf("the rollout to AMI %s is %s", r.TargetImageID, r.Phase)
	}
	note := fmt.Sprintf("tag %s=%s not enforced: %s; instances are replaced for age again once the group is on the AMI its source names",
		model.TagMaxInstanceAge, t.Policy.MaxInstanceAge, why)
	if !strings.Contains(stored.Warning, note) {
		o.Log.Warn("maximum instance age not enforced", zap.String(logging.Group, t.Group), zap.String(logging.Reason, note))
	}
	return note
}
