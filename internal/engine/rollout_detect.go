package engine

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// detect starts a rollout when the source names an AMI the target is not on yet. The decision is on the
// resolved image id only, never on the parameter's Version (field case C13).
func (o *Orchestrator) detect(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	if next, ok, err := o.detectSetBack(ctx, t, v, ami, r); ok || err != nil { // setback.go
		return next, err
	}
	if ami != nil && ami.ImageID == r.TargetImageID {
		if next, ok, err := o.detectAged(ctx, t, v, r); ok || err != nil { // rollout_maxage.go
			return next, err
		}
	}
	if ami == nil || ami.ImageID == r.TargetImageID || ami.ImageID == r.RollbackFrom {
		return r, errWait
	}
	ref, err := providers.TemplateRef(v.Group)
	if err != nil {
		// A configuration the agent cannot roll (a launch configuration, say): shown on the status, not
		// retried as an error every tick.
		r.Reason = "cannot roll this group: " + err.Error()
		return r, errWait
	}
	cur, err := o.Templates.Resolve(ctx, ref)
	if err != nil {
		return r, err
	}
	previous := r.TargetImageID
	if r.Phase == state.PhaseRolledBack || amiRefused(r) {
		// The target failed and was rolled back, or was refused and never rolled: the group runs the one before.
		previous = r.PreviousImageID
	}
	if previous == "" {
		previous = cur.ImageID
	}
	r.Platform, r.Cluster = t.Platform, t.Cluster
	r.TargetImageID, r.PreviousImageID = ami.ImageID, previous
	r.Source, r.SourceVersion, r.SourceModified = ami.Parameter, ami.Version, ami.LastModified
	r.DetectedAt, r.Reason, r.Current, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = o.Clock.Now(), "", nil, nil, "", nil
	r.RollbackFrom, r.ApprovedImage, r.ApprovedBy, r.Trigger = "", "", "", ""
	clearSetBacks(&r) // setback.go
	r.Refresh = nil
	r.OnTarget = v.CountOnImage(ami.ImageID)
	if r.Phase == "" && cur.ImageID == ami.ImageID && v.CountOnImage(ami.ImageID) == len(v.Instances) {
		// First sight of a group that is already current: nothing to roll.
		r.Phase = state.PhaseIdle
		return o.save(ctx, r, "already on target AMI")
	}
	r.Phase = state.PhaseDetected
	return o.save(ctx, r, "new AMI detected", state.HistoryEntry{Group: t.Group, At: o.Clock.Now(), Event: "detected",
		PreviousImage: previous, NewImage: ami.ImageID, Source: ami.Parameter, SourceVersion: ami.Version})
}

// start moves a Detected or Waiting rollout on: a newer AMI replaces a refused target; a group set back by outside
// changes more often than the agent rolls it again stays held (holdSetBack); then the AMI gate, the
// pause, the start gates (soak, approval, window, alarms) and the gate again with fresh answers; then the
// strategy is chosen and the launch template reference recorded for rollback (-> Preparing). A group whose
// template or strategy cannot be rolled halts without rollback.
func (o *Orchestrator) start(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	if ami != nil && ami.ImageID != r.TargetImageID && amiRefused(r) {
		// Nothing was done for the refused AMI: the source's new AMI replaces it and is gated anew.
		return o.detect(ctx, t, v, ami, r)
	}
	r, held, err := o.holdSetBack(ctx, t, v, ami, r) // setback.go
	if held || err != nil {
		return r, err
	}
	// The AMI gate only reads: it runs before the pause check, so a paused group shows a refusal too.
	if refused, err := o.gateAMI(ctx, t, v, &r, false); refused || err != nil {
		return r, err
	}
	nextStep := startNextStep(r)
	if err := o.holdIfPaused(&r, nextStep); err != nil {
		return r, err
	}
	if reason := o.startGate(ctx, t, r); reason != "" {
		r.Phase, r.Reason = state.PhaseWaiting, reason
		return r, errWait
	}
	// Answers reused while waiting may be minutes old: the last check before any change asks EC2 again.
	if refused, err := o.gateAMI(ctx, t, v, &r, true); refused || err != nil {
		return r, err
	}
	o.amiGated = true
	if next, refused, err := o.refuseAWSBatchGroup(ctx, v, r); refused { // standalone.go
		return next, err
	}
	if t.Policy.StandaloneTasks == model.StandaloneRefuse {
		platform, err := o.Platforms.For(t)
		if err != nil {
			return r, err
		}
		reason, err := standaloneRefusal(ctx, t, platform, outdatedIDs(v, r)) // standalone.go
		if err != nil || reason != "" {
			return o.haltOr(ctx, r, reason, err)
		}
	}
	ref, err := providers.TemplateRef(v.Group)
	if err != nil {
		return o.halt(ctx, r, err.Error(), false)
	}
	traits, err := o.groups().Traits(ctx, t.Group, providers.GroupTags(v.Group))
	if err != nil {
		return r, err
	}
	strategy, err := model.ChooseStrategy(t.Policy.Strategy, traits)
	if err != nil {
		return o.halt(ctx, r, err.Error(), false)
	}
	if strategy == model.StrategyRefresh && providers.UsesInstanceRequirements(v.Group) {
		r.Phase, r.Reason = state.PhaseWaiting, providers.InstanceRequirementsReason
		return r, errWait
	}
	if strategy == model.StrategyRefresh {
		if reason, err := o.foreignRefresh(ctx, t, r); err != nil || reason != "" { // rollout_refresh.go
			r.Phase, r.Reason = state.PhaseWaiting, reason
			if err != nil {
				return r, err
			}
			return r, errWait
		}
		// The traits' hooks: the group's lifecycle hooks are described once per start.
		launching, terminating, missing := o.refreshHooks(t.Group, traits.Hooks, providers.GroupTags(v.Group))
		if missing != "" {
			r.Phase, r.Reason = state.PhaseWaiting, missing
			return r, errWait
		}
		r.Refresh = &state.RefreshProgress{LaunchingHook: launching, TerminatingHook: terminating, HooksReadAt: o.Clock.Now()}
	}
	if r.PreviousTemplate == nil { // a superseded rollout keeps the reference from before its first change
		r.PreviousTemplate = &ref
	}
	r.Strategy = strategy
	r.Phase, r.Reason = state.PhasePreparing, ""
	// The pause read above is kept for the call and may be old by now (the AMI gate's reads, Traits): the
	// Preparing write carries its own, strongly consistent check (guardIfPaused), and prepare's effects follow it.
	if err := o.guardIfPaused(&r, nextStep); err != nil {
		return r, err
	}
	saved, err := o.save(ctx, r, "preparing launch template ("+strategy+" strategy)")
	if err == nil {
		o.alertSoakSkipped(t, saved) // soakskip.go
	}
	return saved, err
}

// nextRefreshStep is the next step of a rollout whose instance refresh was cancelled (a pause, a closed
// window, a withdrawn approval, a newer AMI).
const nextRefreshStep = "a new instance refresh that skips the instances already on the target"

// startNextStep names the step start leads to, for the reason of a pause that holds it: one whose refresh was
// cancelled goes on with a new refresh (through Preparing, which finds its launch template version again), so
// the reason stays the one the cancel wrote; any other prepares the launch template first.
func startNextStep(r state.Rollout) string {
	if r.Strategy == model.StrategyRefresh && r.NewTemplateVersion != "" {
		return nextRefreshStep
	}
	return "prepare the launch template"
}
