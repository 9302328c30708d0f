package lifecycle

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TagMaxInstanceAge is the maximum instance lifetime of a group: instances older than it
// (EC2 LaunchTime, as DescribeInstances reports it in the group's view) are replaced even when they run the
// current AMI, through the same gates and budgets as an AMI rollout — maintenance window, pause, approval (when
// the group's tags require it; an approval belongs to one rollout) and alarms — but without the soak (no new
// AMI). A number of days ("21d") or a Go duration ("504h"); at least 1 day. Like Karpenter's expireAfter and
// EKS Auto Mode's node expiry.
const TagMaxInstanceAge = "patch-agent/max-instance-age"

// TriggerMaxInstanceAge is the Rollout.Trigger and history event of a rollout started because instances
// outlived TagMaxInstanceAge.
const TriggerMaxInstanceAge = "max-instance-age"

// minMaxInstanceAge is the shortest maximum instance lifetime accepted: a shorter one would keep a group
// replacing itself.
const minMaxInstanceAge = 24 * time.Hour

// ParseMaxInstanceAge reads TagMaxInstanceAge: "" (no maximum, 0), "<n>d" (n whole days) or a Go duration
// ("504h"), at least 1 day. Anything else is an error naming the tag and the value.
func ParseMaxInstanceAge(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < minMaxInstanceAge {
		return 0, fmt.Errorf("tag %s=%q: want a lifetime of at least 1 day, in days (21d) or as a duration (504h)", TagMaxInstanceAge, v)
	}
	return d, nil
}

// agedOut reports whether instance i has outlived t's maximum instance lifetime at now. An instance without a
// known launch time is never aged out.
func agedOut(t Target, i InstanceView, now time.Time) bool {
	return t.Policy.MaxInstanceAge > 0 && !i.LaunchTime.IsZero() && now.Sub(i.LaunchTime) >= t.Policy.MaxInstanceAge
}

// agedOutIDs returns the InService instances of v that outlived t's maximum lifetime at now, oldest first.
func agedOutIDs(t Target, v GroupView, now time.Time) []string {
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
func (o *Orchestrator) detectAged(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, bool, error) {
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
func (o *Orchestrator) maxAgeNote(t Target, ami *ResolvedAMI, stored state.Rollout) string {
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
		TagMaxInstanceAge, t.Policy.MaxInstanceAge, why)
	if !strings.Contains(stored.Warning, note) {
		o.Log.Warn("maximum instance age not enforced", zap.String(logging.Group, t.Group), zap.String(logging.Reason, note))
	}
	return note
}
