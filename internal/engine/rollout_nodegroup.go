package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The rollout of an EKS managed node group. The same record, gates, history and observer as every
// target, one different replacement: EKS replaces the nodes itself when UpdateNodegroupVersion runs (Amazon EKS
// User Guide, "Understand each phase of node updates": setup, scale up, upgrade — it cordons and evicts — and
// scale down, maxUnavailable nodes at a time from the node group's updateConfig). The agent never drains,
// cordons or terminates anything of the node group's Auto Scaling group.
//
//	Idle/Completed/RolledBack ─(release or AMI differs from the record's target, never the parameter Version)─► Detected
//	Detected/Waiting ─(AMI gate, pause, node version <= control plane, soak, approval, window, alarms, node group ACTIVE)─► Preparing
//	Preparing ─(CUSTOM: launch template version with the target AMI; the ClientRequestToken recorded)─► Replacing/NodegroupUpdate
//	Replacing/NodegroupUpdate ─(UpdateNodegroupVersion with the token, its id recorded; DescribeUpdate)
//	     Successful ─► Verifying ─(node group ACTIVE on the target)─► Completed
//	     Failed/Cancelled ─► RollingBack/NodegroupUpdate (an update back to the previous release / launch template
//	                          version, tracked the same way) ─► RolledBack; or Halted/NodegroupUpdate with EKS's errors
//
// A crash at any point resumes at the same step without a second update: the token is written before the call,
// and EKS answers a repeat of a token with the update it started.

// ReconcileNodegroup advances a managed node group's rollout as far as the world allows in this tick: the entry
// point of the agent's loop and of `patch-agent eks upgrade`. t is the node group's Target
// (NodegroupTarget); in.Nodegroup must be set. It is Reconcile with the node group's steps: the same leases,
// renewals, conflict handling and waiting reasons.
func (o *Orchestrator) ReconcileNodegroup(ctx context.Context, t model.Target, in model.Inputs) (state.Rollout, error) {
	if in.Nodegroup == nil {
		return state.Rollout{}, fmt.Errorf("rollout of %s: no managed node group in the inputs", t.Group)
	}
	return o.Reconcile(ctx, t, in)
}

// nodegroupTarget is what the record's target is: the release (AMI types) or the AMI id (CUSTOM).
func nodegroupTarget(r state.Rollout) string {
	if r.Nodegroup == nil {
		return ""
	}
	if r.Nodegroup.Custom() {
		return r.TargetImageID
	}
	return r.Nodegroup.TargetRelease
}

// stepNodegroup performs one transition of a managed node group's rollout; errWait when it must wait.
func (o *Orchestrator) stepNodegroup(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	in := o.ng
	switch r.Phase {
	case "", state.PhaseIdle, state.PhaseCompleted, state.PhaseRolledBack:
		return o.detectNodegroup(ctx, t, v, ami, r)
	case state.PhaseDetected, state.PhaseWaiting:
		if amiRefused(r) {
			if next, ok := nodegroupSource(in, ami); ok && next != nodegroupTarget(r) {
				return o.detectNodegroup(ctx, t, v, ami, r)
			}
		}
		return o.startNodegroup(ctx, t, v, r)
	case state.PhasePreparing:
		if err := o.holdIfPaused(&r, "UpdateNodegroupVersion"); err != nil {
			return r, err
		}
		return o.prepareNodegroup(ctx, r)
	case state.PhaseReplacing, state.PhaseRollingBack:
		return o.nodegroupUpdate(ctx, r)
	case state.PhaseVerifying:
		return o.verifyNodegroup(ctx, r)
	case state.PhaseHalted:
		return r, errWait
	}
	return r, fmt.Errorf("unknown phase %q", r.Phase)
}

// nodegroupSource returns the target the source names now: the release, or the AMI id of a CUSTOM node group.
func nodegroupSource(in *model.NodegroupInputs, ami *model.ResolvedAMI) (string, bool) {
	if in.Nodegroup.AMIType == "CUSTOM" {
		if ami == nil {
			return "", false
		}
		return ami.ImageID, true
	}
	if in.Release == nil || in.Release.Release == "" {
		return "", false
	}
	return in.Release.Release, true
}

// detectNodegroup starts a rollout when the source names a release (or AMI) the record does not target yet.
func (o *Orchestrator) detectNodegroup(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	in := o.ng
	ng := in.Nodegroup
	next, ok := nodegroupSource(in, ami)
	if !ok || next == nodegroupTarget(r) || next == r.RollbackFrom {
		return r, errWait
	}
	p := &state.NodegroupProgress{Cluster: ng.Cluster, Name: ng.Name, AMIType: ng.AMIType, KubernetesVersion: ng.Version,
		MaxUnavailable: ng.MaxUnavailable, MaxUnavailablePercentage: ng.MaxUnavailablePercentage}
	if lt := ng.LaunchTemplate; lt != nil {
		p.LaunchTemplateID, p.LaunchTemplateName, p.PreviousTemplateVersion = lt.ID, lt.Name, lt.Version
	}
	current, previousImage := ng.ReleaseVersion, in.CurrentImage
	if p.Custom() {
		current = in.CurrentImage
		r.TargetImageID, r.Source, r.SourceVersion, r.SourceModified = ami.ImageID, ami.Parameter, ami.Version, ami.LastModified
	} else {
		p.TargetRelease, p.PreviousRelease = in.Release.Release, ng.ReleaseVersion
		if in.TargetVersion != "" && in.TargetVersion != ng.Version {
			p.TargetVersion = in.TargetVersion
		}
		r.TargetImageID, r.Source, r.SourceVersion, r.SourceModified = in.Release.ImageID, in.Release.Parameter, in.Release.Version, in.Release.LastModified
	}
	r.Platform, r.Cluster, r.Nodegroup = model.PlatformEKSManaged, ng.Cluster, p
	r.PreviousImageID = previousImage
	r.DetectedAt, r.Reason, r.Current, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = o.Clock.Now(), "", nil, nil, "", nil
	r.RollbackFrom, r.ApprovedImage, r.ApprovedBy = "", "", ""
	r.OnTarget = v.CountOnImage(r.TargetImageID)
	if r.Phase == "" && current == next {
		r.Phase = state.PhaseIdle
		return o.save(ctx, r, "managed node group already on target")
	}
	r.Phase = state.PhaseDetected
	return o.save(ctx, r, "new release detected for managed node group", state.HistoryEntry{Group: t.Group, At: o.Clock.Now(),
		Event: "detected", PreviousImage: previousLabel(p, previousImage), NewImage: targetLabel(r), Source: r.Source, SourceVersion: r.SourceVersion})
}

// targetLabel names the rollout's target in history: the release (with its AMI when known) or the AMI id.
func targetLabel(r state.Rollout) string {
	if r.Nodegroup == nil || r.Nodegroup.Custom() {
		return r.TargetImageID
	}
	if r.TargetImageID == "" {
		return "release " + r.Nodegroup.TargetRelease
	}
	return "release " + r.Nodegroup.TargetRelease + " (" + r.TargetImageID + ")"
}

func previousLabel(p *state.NodegroupProgress, image string) string {
	if p.Custom() {
		return image
	}
	return "release " + p.PreviousRelease
}

// startNodegroup runs the gates of a detected rollout, in the order of start (rollout_detect.go): the AMI gate
// (a release without a readable image id, or a node group without its Auto Scaling group, waits: nothing
// unverified starts), the pause, the control plane check, soak, approval, window, alarms, the
// AMI gate again with fresh answers; then the node group must be ACTIVE (no update of someone else's running).
func (o *Orchestrator) startNodegroup(ctx context.Context, t model.Target, v model.GroupView, r state.Rollout) (state.Rollout, error) {
	in := o.ng
	if r.TargetImageID == "" || v.Name == "" {
		// The AMI gate needs the release's image id and the node group's Auto Scaling group (its instance
		// types): without either, nothing AWS confirmed says what the update would run, so nothing starts.
		r.Phase = state.PhaseWaiting
		r.Reason = fmt.Sprintf("AMI gate: cannot verify the update (image id %q, Auto Scaling group %q): the release's image_id parameter is missing or unreadable, or the node group has no Auto Scaling group yet", r.TargetImageID, v.Name)
		return r, errWait
	}
	if refused, err := o.gateAMI(ctx, t, v, &r, false); refused || err != nil {
		return r, err
	}
	if err := o.holdIfPaused(&r, "UpdateNodegroupVersion"); err != nil {
		return r, err
	}
	if err := nodeVersionAllowed(t, in); err != nil {
		return o.halt(ctx, r, err.Error(), false)
	}
	if reason := o.startGate(ctx, t, r); reason != "" {
		r.Phase, r.Reason = state.PhaseWaiting, reason
		return r, errWait
	}
	if refused, err := o.gateAMI(ctx, t, v, &r, true); refused || err != nil {
		return r, err
	}
	if s := in.Nodegroup.Status; s != "ACTIVE" {
		r.Phase, r.Reason = state.PhaseWaiting, fmt.Sprintf("managed node group is %s: waiting for it to be ACTIVE before UpdateNodegroupVersion", s)
		return r, errWait
	}
	r.Phase, r.Reason = state.PhasePreparing, ""
	next, err := o.save(ctx, r, "preparing managed node group update")
	if err == nil {
		o.alertSoakSkipped(t, next)
	}
	return next, err
}

// nodeVersionAllowed refuses a node version newer than the control plane (Kubernetes version skew policy;
// field case C12): the node group's own version, and the version a CUSTOM node group's AMI parameter names.
func nodeVersionAllowed(t model.Target, in *model.NodegroupInputs) error {
	if in.ControlPlane == "" {
		return fmt.Errorf("the control plane's Kubernetes version of EKS cluster %s is unknown", in.Nodegroup.Cluster)
	}
	if err := eks.CheckNodeVersion(in.Nodegroup.Version, in.ControlPlane); err != nil {
		return err
	}
	if v, ok := eks.VersionInParameter(t.Parameter); ok && in.Nodegroup.AMIType == "CUSTOM" {
		return eks.CheckNodeVersion(v, in.ControlPlane)
	}
	return nil
}

// updateToken is the ClientRequestToken of one update of a rollout: the same rollout and direction always get
// the same token, another rollout (another detection) another one.
func updateToken(r state.Rollout, rollback bool) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s|%s|%s|%t", r.Group, nodegroupTarget(r), r.DetectedAt.UTC().Format("2006-01-02T15:04:05.000000000Z"), rollback)))
	return "patch-agent-" + hex.EncodeToString(h[:12])
}

// prepareNodegroup makes the update ready to send: for CUSTOM a launch template version with the target AMI
// (found again after a crash, Templates.EnsureVersion); the ClientRequestToken recorded before any call.
func (o *Orchestrator) prepareNodegroup(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	p := r.Nodegroup
	if p.Custom() {
		// A new launch template version is a destructive step of its own: checked against the pause strongly
		// consistently, as the instance refresh's (prepareRefresh).
		if err := o.guardEffect(ctx, &r, "prepare the launch template"); err != nil {
			return r, err
		}
		ref := state.LaunchTemplateRef{ID: p.LaunchTemplateID, Name: p.LaunchTemplateName, Version: p.PreviousTemplateVersion}
		why := fmt.Sprintf("AMI %s from %s version %d for managed node group %s/%s", r.TargetImageID, r.Source, r.SourceVersion, p.Cluster, p.Name)
		tv, err := o.Templates.EnsureVersion(ctx, ref, r.TargetImageID, why)
		if err != nil {
			return r, err
		}
		p.TargetTemplateVersion = fmt.Sprint(tv.Number)
	}
	p.UpdateToken, p.UpdateID, p.UpdateStatus, p.UpdateErrors, p.Rollback = updateToken(r, false), "", "", nil, false
	r.Current = &state.Replacement{Step: state.StepNodegroupUpdate, StepStartedAt: o.Clock.Now()}
	r.Phase = state.PhaseReplacing
	return o.save(ctx, r, "managed node group update recorded, token "+p.UpdateToken)
}

// nodegroupUpdate sends the recorded update once (a pause holds it until it is sent; once sent, EKS carries
// it out and a pause cannot stop it) and follows it with DescribeUpdate until it ends.
func (o *Orchestrator) nodegroupUpdate(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	p := r.Nodegroup
	if p.UpdateID == "" {
		what := "UpdateNodegroupVersion"
		if p.Rollback {
			what = "UpdateNodegroupVersion (rollback)"
		}
		if err := o.holdIfPaused(&r, what); err != nil {
			return r, err
		}
		// Once sent, EKS carries the update out and a pause cannot stop it: the kept pause read is confirmed
		// against the lock items first (strongly consistent).
		if err := o.guardEffect(ctx, &r, what); err != nil {
			return r, err
		}
		req := model.NodegroupUpdateRequest{Cluster: p.Cluster, Name: p.Name, Token: p.UpdateToken}
		switch {
		case p.Custom() && p.Rollback:
			req.LaunchTemplate = &state.LaunchTemplateRef{ID: p.LaunchTemplateID, Name: p.LaunchTemplateName, Version: p.PreviousTemplateVersion}
		case p.Custom():
			req.LaunchTemplate = &state.LaunchTemplateRef{ID: p.LaunchTemplateID, Name: p.LaunchTemplateName, Version: p.TargetTemplateVersion}
		case p.Rollback:
			req.ReleaseVersion = p.PreviousRelease
		default:
			// A release of a newer Kubernetes version is sent with that version: without it EKS keeps the
			// node group's version (Amazon EKS API Reference, UpdateNodegroupVersion: version, releaseVersion).
			req.ReleaseVersion, req.Version = p.TargetRelease, p.TargetVersion
		}
		u, err := o.Nodegroups.StartUpdate(ctx, req)
		switch {
		case awsapi.IsResourceInUse(err):
			r.Reason = "waiting: another update of the managed node group is in progress (" + providers.Truncate(err.Error(), 200) + ")"
			return r, errWait
		case awsapi.IsInvalidRequest(err):
			return o.haltNodegroup(ctx, r, "EKS refused "+what+": "+providers.Truncate(err.Error(), 300), false)
		case err != nil:
			return r, err
		}
		p.UpdateID, p.UpdateStatus = u.ID, u.Status
		next, err := o.save(ctx, r, what+" sent: EKS update "+u.ID)
		if err != nil {
			return next, err
		}
		r, p = next, next.Nodegroup
	}
	u, err := o.Nodegroups.DescribeUpdate(ctx, p.Cluster, p.Name, p.UpdateID)
	if err != nil {
		return r, err
	}
	switch u.Status {
	case "Successful":
		p.UpdateStatus, r.Current = u.Status, nil
		if p.Rollback {
			r.Phase, r.RollbackFrom, r.Reason = state.PhaseRolledBack, nodegroupTarget(r), "rolled back after: "+failureText(p)
			return o.save(ctx, r, "rolled-back", state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "rolled-back",
				PreviousImage: targetLabel(r), NewImage: previousLabel(p, r.PreviousImageID), Source: r.Source, SourceVersion: r.SourceVersion, Detail: r.Reason})
		}
		r.Phase = state.PhaseVerifying
		return o.save(ctx, r, "EKS update "+u.ID+" Successful")
	case "Failed", "Cancelled":
		p.UpdateStatus, p.UpdateErrors = u.Status, u.Errors
		errs := "no error reported"
		if len(u.Errors) > 0 {
			errs = strings.Join(u.Errors, "; ")
		}
		if p.Rollback {
			return o.haltNodegroup(ctx, r, fmt.Sprintf("rollback update %s of managed node group %s/%s %s: %s", u.ID, p.Cluster, p.Name, u.Status, errs), false)
		}
		return o.haltNodegroup(ctx, r, fmt.Sprintf("EKS update %s of managed node group %s/%s %s: %s", u.ID, p.Cluster, p.Name, u.Status, errs), true)
	}
	p.UpdateStatus = u.Status
	r.Reason = fmt.Sprintf("EKS update %s %s: EKS replaces the nodes itself (updateConfig %s)", u.ID, u.Status, model.UpdateConfigWords(p.MaxUnavailable, p.MaxUnavailablePercentage))
	if p.Rollback {
		r.Reason = "rolling back after: " + failureText(p) + "; " + r.Reason
	}
	return r, errWait
}

// failureText is the errors EKS reported for the failed update, for status; for an operator's rollback, who
// asked for it.
func failureText(p *state.NodegroupProgress) string {
	if p.RequestedBy != "" {
		return "manual rollback by " + p.RequestedBy
	}
	if len(p.UpdateErrors) == 0 {
		return "the EKS update failed without an error"
	}
	return strings.Join(p.UpdateErrors, "; ")
}

// haltNodegroup halts the node group's rollout with reason on status; with rollback (and the policy's
// RollbackOnFailure) it goes on in RollingBack with an update back to the previous release or launch template
// version, under a token of its own.
func (o *Orchestrator) haltNodegroup(ctx context.Context, r state.Rollout, reason string, rollback bool) (state.Rollout, error) {
	p := r.Nodegroup
	r.Phase, r.Reason = state.PhaseHalted, "failed: "+reason
	event := "halted"
	if rollback && o.Policy.RollbackOnFailure && (p.PreviousRelease != "" || p.PreviousTemplateVersion != "") {
		r.Phase, event = state.PhaseRollingBack, "rolling-back"
		p.Rollback, p.UpdateToken, p.UpdateID, p.UpdateStatus = true, updateToken(r, true), "", ""
	}
	next, err := o.save(ctx, r, event, state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: event,
		PreviousImage: previousLabel(p, r.PreviousImageID), NewImage: targetLabel(r), Source: r.Source, SourceVersion: r.SourceVersion, Detail: reason})
	if err == nil && next.Phase == state.PhaseHalted {
		err = errWait
	}
	return next, err
}

// verifyNodegroup completes the rollout once EKS reports the node group ACTIVE on the target.
func (o *Orchestrator) verifyNodegroup(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	ng, p := o.ng.Nodegroup, r.Nodegroup
	on := ng.ReleaseVersion == p.TargetRelease
	if p.Custom() {
		on = ng.LaunchTemplate != nil && ng.LaunchTemplate.Version == p.TargetTemplateVersion
	}
	if !on || ng.Status != "ACTIVE" {
		r.Reason = fmt.Sprintf("waiting for the managed node group to be ACTIVE on the target (now %s, release %q)", ng.Status, ng.ReleaseVersion)
		return r, errWait
	}
	r.Phase = state.PhaseCompleted
	return o.save(ctx, r, "completed", state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "completed",
		PreviousImage: previousLabel(p, r.PreviousImageID), NewImage: targetLabel(r), Source: r.Source, SourceVersion: r.SourceVersion})
}
