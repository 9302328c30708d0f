package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A set-back is an outside change — a terraform apply, a CloudFormation stack update, a person — that points a
// group the agent rolled to its target AMI back at another AMI: a new launch template version with the old AMI
// id, or the group pointed at another version or template (field case C25). The agent sees it by comparing the
// AMI of the launch template version the group launches now (its LaunchTemplate or its mixed instances
// policy's template; $Default and $Latest resolved as Auto Scaling resolves them) with the record of its last
// rollout: Completed on TargetImageID through NewTemplateVersion. It is reported (history event set-back, alert
// SetBack: the SetBacks metric and a "Patch Agent Alert" event, the status note), rolled again at most
// maxSetBackRolls times per target AMI, then held in Waiting with a reason naming the fix until the template
// launches another AMI again or an operator approves (`patch-agent approve GROUP`).
//
// Not set-backs: the agent's own rollback (RollingBack, RolledBack), an operator's rollback (RollbackFrom: the
// group is on the AMI the operator chose), Auto Scaling's rollback of an instance refresh (it restores the
// group's previous launch template reference, the agent's), a new version with the target AMI (an apply whose
// code already reads the AMI from the SSM parameter), and a version whose ImageId is not a literal AMI id
// (resolve:ssm:PARAMETER, resolved by EC2 at launch).

// TriggerSetBack is the Rollout.Trigger and history event of a rollout started because an outside change set the
// group back to another AMI.
const TriggerSetBack = "set-back"

// maxSetBackRolls is how many times the agent rolls a group again after set-backs to the same target AMI; the
// next set-back holds the group instead of fighting the apply.
const maxSetBackRolls = 1

// setBackReasonPrefix starts the Reason of a group held after a set-back. It is an approval reason
// (operator.ApprovalReasonPrefix), so `patch-agent approve GROUP` releases it.
const setBackReasonPrefix = "approval: set back by an outside change"

// literalAMI reports whether a launch template version's ImageId is an AMI id (not resolve:ssm:PARAMETER).
func literalAMI(imageID string) bool { return strings.HasPrefix(imageID, "ami-") }

// pinnedByAgent reports whether ref is the launch template version the agent's last rollout pointed the group at
// (NewTemplateVersion of PreviousTemplate's template): the group cannot have been set back then, with no AWS
// call.
func pinnedByAgent(r state.Rollout, ref state.LaunchTemplateRef) bool {
	if ref.Version != r.NewTemplateVersion {
		return false
	}
	p := r.PreviousTemplate
	return p == nil || (p.ID != "" && p.ID == ref.ID) || (p.ID == "" && p.Name == ref.Name)
}

// templateVersionName names a launch template version as the reason and history show it.
func templateVersionName(ref state.LaunchTemplateRef, v providers.TemplateVersion) string {
	name := ref.ID
	if name == "" {
		name = ref.Name
	}
	s := fmt.Sprintf("launch template %s version %d", name, v.Number)
	if v.CreatedBy != "" {
		s += " by " + v.CreatedBy
	}
	return s
}

// detectSetBack starts a rollout to the target AMI again when an outside change set a Completed group back to
// another AMI: Detected with Trigger set-back, SetBacks counted and SetBackBy naming the version, a set-back
// history entry and one SetBack alert. After maxSetBackRolls rollouts for the same target the approval is
// cleared, so start holds the group (holdSetBack). ok is false when the group is not set back (or the record is
// not a Completed rollout of the agent's to the AMI the source names). The launch template is read only when
// the group no longer launches the agent's version; an explicit version found on the target AMI is not read
// again (versions do not change).
func (o *Orchestrator) detectSetBack(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, bool, error) {
	if r.Phase != state.PhaseCompleted || ami == nil || ami.ImageID != r.TargetImageID || r.RollbackFrom != "" || r.NewTemplateVersion == "" {
		return r, false, nil
	}
	if !v.ObservedAt.After(r.UpdatedAt) {
		// The group was observed before the rollout completed (in this look): it may show the reference from
		// before the agent's own last change.
		return r, false, nil
	}
	ref, err := providers.TemplateRef(v.Group)
	if err != nil || pinnedByAgent(r, ref) {
		return r, false, nil
	}
	key := ref.ID + ref.Name + "@" + ref.Version + "=" + r.TargetImageID
	if o.Versions.has(t.Group, key) {
		return r, false, nil
	}
	cur, err := o.Templates.Resolve(ctx, ref)
	if err != nil {
		return r, false, fmt.Errorf("reading the launch template the group launches (set-back check): %w", err)
	}
	if cur.ImageID == r.TargetImageID || !literalAMI(cur.ImageID) {
		if _, err := strconv.ParseInt(ref.Version, 10, 64); err == nil {
			o.Versions.remember(t.Group, key) // a numbered version never changes; $Default and $Latest may
		}
		return r, false, nil
	}
	by := templateVersionName(ref, cur)
	r.SetBacks++
	r.SetBackBy = by
	held := r.SetBacks > maxSetBackRolls
	next := fmt.Sprintf("the agent rolls AMI %s again (%d of at most %d)", r.TargetImageID, r.SetBacks, maxSetBackRolls)
	if held {
		next = "held: " + setBackFix(t, r)
		r.ApprovedImage, r.ApprovedBy = "", "" // an approval releases the hold; the one of an earlier rollout does not
	}
	detail := fmt.Sprintf("set back by an outside change: %s points the group at AMI %s, not AMI %s the agent rolled it to "+
		"(version %s); set-back %d for this AMI; %s", by, cur.ImageID, r.TargetImageID, r.NewTemplateVersion, r.SetBacks, next)
	now := o.Clock.Now()
	r.Platform, r.Cluster, r.Trigger = t.Platform, t.Cluster, TriggerSetBack
	r.PreviousImageID = cur.ImageID
	r.DetectedAt, r.Reason, r.Current, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = now, "", nil, nil, "", nil
	r.OnTarget = v.CountOnImage(r.TargetImageID)
	r.Phase = state.PhaseDetected
	saved, err := o.save(ctx, r, "set back by an outside change", state.HistoryEntry{Group: t.Group, At: now, Event: TriggerSetBack,
		PreviousImage: cur.ImageID, NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion, Detail: detail})
	if err != nil {
		return saved, true, err
	}
	o.Log.Warn("launch template set back by an outside change", zap.String(logging.Group, t.Group),
		zap.String(logging.AMI, cur.ImageID), zap.String(logging.Reason, detail))
	model.SendAlert(o.Observer, model.Alert{Kind: model.AlertSetBack, Target: t, Detail: detail, Who: cur.CreatedBy, ImageID: cur.ImageID, At: now})
	return saved, true, nil
}

// setBackFix is what an operator does about a group held after set-backs.
func setBackFix(t model.Target, r state.Rollout) string {
	source := "the AMI's SSM parameter"
	if r.Source != "" {
		source = "the SSM parameter " + r.Source
	}
	return fmt.Sprintf("point the infrastructure code at %s instead of a literal AMI id (`patch-agent audit --iac PATH` "+
		"finds it); the hold ends when the launch template launches another AMI, or `patch-agent approve %s` rolls AMI %s once more",
		source, t.Group, r.TargetImageID)
}

// setBackHeld reports whether r is a rollout started by a set-back beyond maxSetBackRolls that no operator
// approved yet.
func setBackHeld(r state.Rollout) bool {
	return (r.Phase == state.PhaseDetected || r.Phase == state.PhaseWaiting) && r.Trigger == TriggerSetBack &&
		r.SetBacks > maxSetBackRolls && r.ApprovedImage != r.TargetImageID
}

// holdSetBack keeps a group set back more than maxSetBackRolls times in Waiting, its reason naming the version
// that set it back and the fix, so that the agent does not fight the apply (ok true, errWait). The hold ends when
// the source names a new AMI (detect starts its rollout), when the launch template the group launches no
// longer launches the AMI it was set back to (the code was fixed, or changed again: SetBacks start over and the
// rollout goes on through the start gates), or when an operator approves the target AMI (`patch-agent approve`:
// setBackHeld is false, and the next set-back holds again). The template is read on every look of a held group.
func (o *Orchestrator) holdSetBack(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, bool, error) {
	if !setBackHeld(r) {
		return r, false, nil
	}
	if ami != nil && ami.ImageID != r.TargetImageID {
		next, err := o.detect(ctx, t, v, ami, r)
		return next, true, err
	}
	ref, err := providers.TemplateRef(v.Group)
	if err != nil {
		return r, false, nil // start halts a group it cannot roll
	}
	cur, err := o.Templates.Resolve(ctx, ref)
	if err != nil {
		return r, true, fmt.Errorf("reading the launch template of a group held after a set-back: %w", err)
	}
	if cur.ImageID != r.PreviousImageID {
		o.Log.Info("launch template changed after a set-back: hold ended", zap.String(logging.Group, t.Group),
			zap.String(logging.AMI, cur.ImageID))
		r.SetBacks, r.SetBackBy, r.Reason = 0, "", ""
		return r, false, nil
	}
	r.Phase = state.PhaseWaiting
	r.Reason = fmt.Sprintf("%s %d times (last: %s, AMI %s); not rolled again: %s", setBackReasonPrefix, r.SetBacks,
		r.SetBackBy, r.PreviousImageID, setBackFix(t, r))
	return r, true, errWait
}

// clearSetBacks forgets the set-backs of the previous target when a rollout to a new AMI starts.
func clearSetBacks(r *state.Rollout) { r.SetBacks, r.SetBackBy = 0, "" }

// VersionMemo remembers, by group, the one explicit launch template version last found launching the group's
// target AMI though the agent did not point the group at it (an apply's version with the same AMI), so that the
// set-back check does not read it on every look. Safe for concurrent use; a nil *VersionMemo remembers nothing.
type VersionMemo struct {
	mu   sync.Mutex
	seen map[string]string // group -> "template@version=target AMI"
}

// NewVersionMemo returns an empty memo.
func NewVersionMemo() *VersionMemo { return &VersionMemo{seen: map[string]string{}} }

func (m *VersionMemo) has(group, key string) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.seen[group] == key
}

func (m *VersionMemo) remember(group, key string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[group] = key
}
