package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Policy holds the rollout settings that apply to every target.
type Policy struct {
	// HealthTimeout is how long a surge instance may take to be InService and healthy in its cluster before
	// the rollout halts (field case C15). Default 10 minutes.
	HealthTimeout time.Duration
	// DrainTimeout is how long a drain may take before the rollout halts and the old instance is put back in
	// service. Default 30 minutes.
	DrainTimeout time.Duration
	// RollbackOnFailure moves a halted rollout to RollingBack: the group's launch template goes back to the
	// version it had before the rollout. Default true.
	RollbackOnFailure bool
}

// DefaultPolicy returns the defaults documented on Policy.
func DefaultPolicy() Policy {
	return Policy{HealthTimeout: 10 * time.Minute, DrainTimeout: 30 * time.Minute, RollbackOnFailure: true}
}

// maxTransitionsPerTick bounds how many state transitions one Reconcile call chains. Transitions that wait on
// the world (boot, drain, termination) end the call anyway; the bound only stops a bug from spinning.
const maxTransitionsPerTick = 12

// Orchestrator moves one target's rollout through the state machine of docs/architecture.md. Every transition
// is one conditional write to the Store before the next AWS call that depends on it, and every AWS call it
// makes is idempotent given the persisted record, so a crash at any point resumes at the same step without
// repeating an effect (invariant 5, docs/architecture.md).
type Orchestrator struct {
	// Owner names this replica in leases.
	Owner string
	// LeaseTTL is how long a claim on a target lasts without renewal (`--lease-ttl`; <= 0: state.DefaultLeaseTTL,
	// 2 minutes). The skew margin is a quarter of it (state.LeaseRule).
	LeaseTTL    time.Duration
	Store       state.Store
	AutoScaling awsapi.AutoScaling
	Templates   Templates
	Platforms   Platforms
	// Alarms checks the alarm gates of targets that name alarms; nil disables the gate.
	Alarms AlarmChecker
	Clock  clock.PassiveClock
	Log    *zap.Logger
	Policy Policy
	// Observer is told every transition (metrics, notifications); nil observes nothing. An Observer that is
	// also an AMIRejectionObserver is told every refusal of the AMI gate.
	Observer Observer
	// AMIGate checks every target AMI before a rollout may leave Waiting for Preparing (invariant 10,
	// docs/architecture.md). The agent always sets it; nil checks nothing.
	AMIGate *AMIGate
	// Activities tells why no replacement launched (capacity.go); nil: a replacement that never launches halts.
	Activities awsapi.ScalingActivities

	pause      *state.Lock   // the pause of the target being reconciled (Reconcile is not called concurrently)
	source     string        // why the target's source names no AMI now ("" when it names one): a gate (sourcegate.go)
	lastStored state.Rollout // the record as last read or written in this Reconcile call
}

// leases is the lease rule of the orchestrator's TTL.
func (o *Orchestrator) leases() state.LeaseRule { return state.LeaseRule{TTL: o.LeaseTTL} }

// pausedPrefix starts the Reason of a rollout held by a pause lock; sourcePrefix that of a target whose
// source names no usable AMI.
const (
	pausedPrefix = "paused"
	sourcePrefix = "source "
)

// holdIfPaused returns errWait with the pause as the reason when the target is paused: called before every
// new destructive step (invariant 7, docs/architecture.md). Waits already in flight stay as they are.
func (o *Orchestrator) holdIfPaused(r *state.Rollout, before string) error {
	if o.pause == nil {
		return nil
	}
	p := o.pause
	r.Reason = fmt.Sprintf("%s (%s) by %s since %s: %s; next step: %s", pausedPrefix, p.Scope(), p.Who,
		p.Since.UTC().Format(time.RFC3339), p.Reason, before)
	if !p.Until.IsZero() {
		r.Reason += "; until " + p.Until.UTC().Format(time.RFC3339)
	}
	return errWait
}

// errWait ends a Reconcile call: the rollout waits for the world to change.
var errWait = errors.New("waiting")

// Inputs are what one tick knows about a target besides its record.
type Inputs struct {
	// View is the group as observed in this tick.
	View GroupView
	// AMI is the target AMI resolved from the target's source; nil when unknown (not resolved yet, missing).
	AMI *ResolvedAMI
	// Pause is the lock that pauses this target (its own or the global one); nil when not paused.
	Pause *state.Lock
	// SourceProblem says why the source names no usable AMI ("source missing: ..."), when AMI is nil.
	SourceProblem string
	// Warning is a standing configuration problem of the group ("" when none), kept on the record.
	Warning string
	// Record, when set, is the target's rollout record as read in this tick (Version 0 when it has none);
	// nil reads it from the Store.
	Record *state.Rollout
}

// Reconcile advances t's rollout as far as the world allows in this tick. It returns the record as stored.
// A target whose lease another replica holds (until its expiry plus the skew margin, state.LeaseRule) is
// left alone. This replica's lease is renewed on every write and at half-life; before every step of an
// active rollout it must have more than the margin left, or it is renewed first with a conditional write, so
// a replica that stalled past its lease and wakes up with a stale view loses that write instead of acting. A
// write that loses a race with another replica (state.ErrConflict) ends the tick without error: the next tick
// re-reads the record.
func (o *Orchestrator) Reconcile(ctx context.Context, t Target, in Inputs) (state.Rollout, error) {
	v, ami := in.View, in.AMI
	var r state.Rollout
	if in.Record != nil {
		r = *in.Record
	} else {
		var err error
		r, err = o.Store.GetRollout(ctx, t.Group)
		if errors.Is(err, state.ErrNotFound) {
			r = state.Rollout{Group: t.Group, Platform: t.Platform, Cluster: t.Cluster}
		} else if err != nil {
			return state.Rollout{}, fmt.Errorf("reading rollout of %s: %w", t.Group, err)
		}
	}
	o.lastStored = r.Clone()
	now := o.Clock.Now()
	if o.leases().HeldByOther(r.Lease(), o.Owner, now) {
		return r, nil // another replica acts on this target
	}
	if r.Active() && o.leases().RenewDue(r.Lease(), o.Owner, now) {
		next, err := o.save(ctx, r, "lease renewed")
		if errors.Is(err, state.ErrConflict) {
			return r, nil
		}
		if err != nil {
			return r, err
		}
		r = next
	}
	o.pause = in.Pause
	o.source = sourceGate(in)
	if in.Pause == nil && strings.HasPrefix(r.Reason, pausedPrefix) {
		r.Reason = ""
	}
	stored := r
	r.Instances, r.OnTarget, r.Warning = len(v.Instances), v.CountOnImage(r.TargetImageID), in.Warning
	switch {
	case ami == nil && in.SourceProblem != "" && !r.Active():
		r.Reason = in.SourceProblem
	case ami != nil && strings.HasPrefix(r.Reason, sourcePrefix):
		r.Reason = ""
	}
	for range maxTransitionsPerTick {
		if r.Active() && !o.leases().MayAct(r.Lease(), o.Owner, o.Clock.Now()) {
			// Less than the margin is left: this replica stalled (or its clock jumped) since it last wrote.
			// It acts again only once a conditional write proves its view is still the stored one.
			renewed, err := o.save(ctx, r, "lease renewed")
			if errors.Is(err, state.ErrConflict) {
				o.Log.Info("lease lost while this replica was stalled; re-reading next tick", zap.String(logging.Group, t.Group))
				return stored, nil
			}
			if err != nil {
				return r, err
			}
			r = renewed
		}
		next, err := o.step(ctx, t, v, ami, r)
		if errors.Is(err, state.ErrConflict) {
			o.Log.Info("another replica moved the rollout first; re-reading next tick", zap.String(logging.Group, t.Group))
			return next, nil
		}
		if errors.Is(err, errWait) {
			if next.Version == stored.Version && (next.Phase != stored.Phase || next.Reason != stored.Reason ||
				next.Instances != stored.Instances || next.OnTarget != stored.OnTarget || next.Warning != stored.Warning) {
				// A new reason to wait (or a new count) is written once, so status shows it; an unchanged one
				// costs nothing.
				saved, err := o.save(ctx, next, "waiting")
				if errors.Is(err, state.ErrConflict) {
					return stored, nil
				}
				return saved, err
			}
			return next, nil // waiting is not a failure
		}
		if err != nil {
			err = fmt.Errorf("rollout of %s at %s/%s: %w", t.Group, next.Phase, stepOf(next), err)
			// A step that keeps failing (AccessDenied, a limit) shows on the status, written once per
			// distinct error; the next transition clears it.
			if reason := retryingPrefix + requestID.ReplaceAllString(truncate(err.Error(), 300), ""); r.Active() && r.Reason != reason {
				r.Reason = reason
				if saved, serr := o.save(ctx, r, "waiting"); serr == nil {
					return saved, err
				}
			}
			return next, err
		}
		r = next
	}
	return r, nil
}

// retryingPrefix starts the Reason of a rollout whose last step failed and is retried every tick.
const retryingPrefix = "retrying after an error: "

// requestID matches the per-call request id in AWS SDK error texts, so that the same error reads the same.
var requestID = regexp.MustCompile(`RequestID: [^,]*, `)

// step performs one transition. It returns errWait when the rollout must wait for the next tick.
func (o *Orchestrator) step(ctx context.Context, t Target, v GroupView, ami *ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	switch r.Phase {
	case "", state.PhaseIdle, state.PhaseCompleted, state.PhaseRolledBack:
		return o.detect(ctx, t, v, ami, r)
	case state.PhaseDetected, state.PhaseWaiting:
		if ami != nil && ami.ImageID != r.TargetImageID && amiRefused(r) {
			// Nothing was done for the refused AMI: the source's new AMI replaces it and is gated anew.
			return o.detect(ctx, t, v, ami, r)
		}
		// The AMI gate only reads: it runs before the pause check, so a paused group shows a refusal too.
		if refused, err := o.gateAMI(ctx, t, v, &r, false); refused || err != nil {
			return r, err
		}
		if err := o.holdIfPaused(&r, "prepare the launch template"); err != nil {
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
		ref, err := TemplateRef(v.Group)
		if err != nil {
			return o.halt(ctx, r, err.Error(), false)
		}
		traits, err := DescribeTraits(ctx, o.AutoScaling, t.Group, groupTags(v.Group))
		if err != nil {
			return r, err
		}
		strategy, err := ChooseStrategy(t.Policy.Strategy, traits)
		if err != nil {
			return o.halt(ctx, r, err.Error(), false)
		}
		r.PreviousTemplate = &ref
		r.Strategy, r.ECSManagedDraining = strategy, traits.ECSManagedDraining
		r.Phase, r.Reason = state.PhasePreparing, ""
		next, err := o.save(ctx, r, "preparing launch template ("+strategy+" strategy)")
		if err == nil {
			o.alertSoakSkipped(t, next) // soakskip.go
		}
		return next, err
	case state.PhasePreparing:
		if err := o.holdIfPaused(&r, "prepare the launch template"); err != nil {
			return r, err
		}
		return o.prepare(ctx, v, r)
	case state.PhaseReplacing:
		platform, err := o.Platforms.For(t)
		if err != nil {
			return o.halt(ctx, r, err.Error(), false)
		}
		return o.replace(ctx, t, platform, v, r)
	case state.PhaseVerifying:
		return o.verify(ctx, v, r)
	case state.PhaseRollingBack:
		if err := o.holdIfPaused(&r, "roll back"); err != nil {
			return r, err
		}
		return o.rollBack(ctx, t, v, r)
	case state.PhaseHalted:
		return r, errWait
	}
	return r, fmt.Errorf("unknown phase %q", r.Phase)
}

// detect starts a rollout when the source names an AMI the target is not on yet. The decision is on the
// resolved image id only, never on the parameter's Version (field case C13).
func (o *Orchestrator) detect(ctx context.Context, t Target, v GroupView, ami *ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	if ami == nil || ami.ImageID == r.TargetImageID || ami.ImageID == r.RollbackFrom {
		return r, errWait
	}
	ref, err := TemplateRef(v.Group)
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
	r.RollbackFrom, r.ApprovedImage, r.ApprovedBy = "", "", ""
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

// amiRefused reports whether the rollout waits because the AMI gate refused its target.
func amiRefused(r state.Rollout) bool {
	return r.Phase == state.PhaseWaiting && strings.HasPrefix(r.Reason, amiRefusedPrefix)
}

// gateAMI runs the AMI gate on the rollout's target (fresh: without reusing cached answers). A refusal puts the
// rollout in Waiting with the refusal as its reason — written, recorded in history and told to the observer
// once per distinct refusal — and returns (true, errWait): no launch template is changed. An error of EC2
// holds the rollout too: it is returned, and the step is retried next tick. A pass clears an earlier refusal.
func (o *Orchestrator) gateAMI(ctx context.Context, t Target, v GroupView, r *state.Rollout, fresh bool) (bool, error) {
	if o.AMIGate == nil {
		return false, nil
	}
	rej, err := o.AMIGate.Check(ctx, GateRequest{Target: t, Group: v.Group, View: v, ImageID: r.TargetImageID,
		Parameter: t.Parameter, Fresh: fresh})
	if err != nil {
		return false, fmt.Errorf("AMI gate (the rollout holds until EC2 answers): %w", err)
	}
	if rej == nil {
		if amiRefused(*r) {
			r.Reason = ""
		}
		return false, nil
	}
	reason := rej.StatusReason()
	if r.Phase == state.PhaseWaiting && r.Reason == reason {
		return true, errWait
	}
	r.Phase, r.Reason = state.PhaseWaiting, reason
	if err := o.Store.AppendHistory(ctx, state.HistoryEntry{Group: t.Group, At: o.Clock.Now(), Event: "ami-refused",
		PreviousImage: r.PreviousImageID, NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion, Detail: reason}); err != nil {
		return true, fmt.Errorf("recording history: %w", err)
	}
	next, err := o.save(ctx, *r, "AMI refused by the gate")
	if err != nil {
		return true, err
	}
	*r = next
	o.Log.Warn("target AMI refused; no launch template is changed until the source names an AMI that passes",
		zap.String(logging.Group, t.Group), zap.String(logging.AMI, rej.ImageID), zap.String(logging.Reason, reason))
	if ob, ok := o.Observer.(AMIRejectionObserver); ok {
		ob.AMIRejected(t, next, *rej)
	}
	return true, errWait
}

// prepare makes the group launch the target AMI: a launch template version with the explicit AMI id, and the
// group pointed at that version, whichever way it referenced the template before (C11).
func (o *Orchestrator) prepare(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, error) {
	ref, err := TemplateRef(v.Group)
	if err != nil {
		return o.halt(ctx, r, err.Error(), false)
	}
	why := fmt.Sprintf("AMI %s from %s version %d", r.TargetImageID, r.Source, r.SourceVersion)
	tv, err := o.Templates.EnsureVersion(ctx, ref, r.TargetImageID, why)
	if err != nil {
		return r, err
	}
	want := ref
	want.Version = strconv.FormatInt(tv.Number, 10)
	if ref.Version != want.Version {
		if err := o.Templates.PointGroup(ctx, v.Group, want); err != nil {
			return r, err
		}
	}
	r.NewTemplateVersion = want.Version
	r.Phase = state.PhaseReplacing
	return o.save(ctx, r, "group launches launch template version "+want.Version)
}

// replace runs the replacement of outdated instances, one at a time: Surge -> ReplacementHealthy -> Draining
// -> Terminating.
func (o *Orchestrator) replace(ctx context.Context, t Target, platform Platform, v GroupView, r state.Rollout) (state.Rollout, error) {
	if r.Current == nil {
		return o.pickNext(ctx, t, v, r)
	}
	cur := r.Current
	now := o.Clock.Now()
	switch cur.Step {
	case state.StepSurge:
		if err := o.holdIfPaused(&r, "surge for "+cur.OldInstanceID); err != nil {
			return r, err
		}
		return o.surge(ctx, v, r)

	case state.StepReplacementHealthy:
		var newest *InstanceView
		for _, i := range v.Instances {
			if slices.Contains(cur.InstancesBefore, i.ID) {
				continue
			}
			if i.ImageID != "" && i.ImageID != r.TargetImageID {
				return o.halt(ctx, r, fmt.Sprintf("replacement %s launched AMI %s, not the target %s: the group's launch template change did not take effect",
					i.ID, i.ImageID, r.TargetImageID), true)
			}
			if i.Serving() {
				cur.NewInstanceID, cur.Step, cur.StepStartedAt = i.ID, state.StepDraining, now
				return o.save(ctx, r, "replacement healthy")
			}
			newest = &i
		}
		if now.Sub(cur.StepStartedAt) > o.healthWindow(cur) {
			what := "no replacement instance launched"
			if newest == nil {
				// EC2 out of capacity is not a bad AMI (capacity.go): retried, never a halt or a rollback.
				if next, short, err := o.retryIfShortOfCapacity(ctx, t, v, r); short || err != nil {
					return next, err
				}
			}
			if newest != nil {
				what = fmt.Sprintf("replacement %s not healthy", newest.ID)
				cur.NewInstanceID = newest.ID
			}
			return o.halt(ctx, r, fmt.Sprintf("%s after %s", what, o.healthWindow(cur)), true)
		}
		return r, errWait

	case state.StepDraining:
		old, ok := v.Instance(cur.OldInstanceID)
		if !ok {
			return o.retireLeft(ctx, v, r, "old instance left the group before its drain finished")
		}
		if old.Node.Draining && cur.DrainStartedAt.IsZero() {
			// Someone else (an operator, a lifecycle hook) started this drain: the deadline runs from now.
			cur.DrainStartedAt = now
			return o.save(ctx, r, "drain already under way")
		}
		if !old.Node.Draining && cur.NewInstanceID != "" {
			// A gate or a crash may have held the drain for hours: the replacement must still be serving
			// before the old instance stops (invariant 1).
			if nw, ok := v.Instance(cur.NewInstanceID); !ok || !nw.Serving() {
				cur.Step, cur.StepStartedAt, cur.NewInstanceID = state.StepReplacementHealthy, now, ""
				return o.save(ctx, r, "replacement no longer serving: waiting for a healthy one again")
			}
		}
		if r.ECSManagedDraining {
			// ECS drains the instance when it terminates (field case C17): never DRAINING on top of it.
			cur.Step, cur.StepStartedAt = state.StepTerminating, now
			return o.save(ctx, r, "ECS managed draining will drain it on termination")
		}
		if old.Node.Registered && !old.Node.Draining {
			if err := o.holdIfPaused(&r, "drain "+old.ID); err != nil {
				return r, err
			}
			if r.Strategy != StrategyDrainFirst {
				// Invariant 1 before the drain, not only after it: the instances that stay must already serve
				// the desired capacity without the surge (a health replacement or a carried surge may still be
				// booting).
				serving := 0
				for _, i := range v.Instances {
					if i.ID != old.ID && i.Serving() {
						serving++
					}
				}
				if serving < int(cur.DesiredBefore) {
					r.Reason = fmt.Sprintf("waiting for %d serving instance(s) besides %s before draining it (%d now)", cur.DesiredBefore, old.ID, serving)
					return r, errWait
				}
			}
			if reason := o.runGate(ctx, t); reason != "" {
				r.Reason = reason + "; next step: drain " + old.ID
				return r, errWait
			}
			if cur.DrainStartedAt.IsZero() {
				// The drain deadline runs from here, not from the step's start: a gate may have held the
				// drain for hours. Written before the drain starts, so a crash cannot restart the clock.
				cur.DrainStartedAt = now
				saved, err := o.save(ctx, r, "drain starting")
				if err != nil {
					return saved, err
				}
				r, cur = saved, saved.Current
			}
			if err := platform.StartDrain(ctx, t.Cluster, old.ID); err == nil {
				o.logStep(r, "drain started")
			} else if now.Sub(cur.DrainStartedAt) <= o.Policy.DrainTimeout {
				return r, err
			} // past the deadline a drain that cannot even be started is given up below, like one that cannot be checked

		}
		prog, err := platform.DrainStatus(ctx, t.Cluster, old.ID)
		if err != nil {
			if started := cur.DrainStartedAt; started.IsZero() || now.Sub(started) <= o.Policy.DrainTimeout {
				return r, err
			}
			// The deadline holds even when the drain cannot be checked any more.
			prog.Detail = "drain status unknown: " + err.Error()
		}
		if prog.Drained {
			cur.Step, cur.StepStartedAt = state.StepTerminating, now
			return o.save(ctx, r, "drained")
		}
		if started := cur.DrainStartedAt; !started.IsZero() && now.Sub(started) > o.Policy.DrainTimeout {
			if err := platform.Undrain(ctx, t.Cluster, old.ID); err != nil {
				return r, err
			}
			return o.halt(ctx, r, fmt.Sprintf("drain of %s did not finish within %s (%s); it was put back in service",
				old.ID, o.Policy.DrainTimeout, prog.Detail), false)
		}
		return r, errWait

	case state.StepTerminating:
		old, ok := v.Instance(cur.OldInstanceID)
		if !ok {
			return o.retireLeft(ctx, v, r, "old instance terminated")
		}
		if !old.InService() && !old.Leaving() {
			r.Reason = fmt.Sprintf("old instance %s is %s, not InService: waiting before terminating it", old.ID, old.LifecycleState)
			return r, errWait
		}
		if !old.InService() {
			if r.ECSManagedDraining && old.LifecycleState != "Terminating:Proceed" {
				// ECS drains it in Terminating:Wait: the next replacement waits for that drain to end.
				r.Reason = fmt.Sprintf("waiting for ECS managed draining of %s (%s)", old.ID, old.LifecycleState)
				return r, errWait
			}
			return o.retireLeft(ctx, v, r, "old instance leaving ("+old.LifecycleState+")")
		}
		if err := o.holdIfPaused(&r, "terminate "+old.ID); err != nil {
			return r, err
		}
		if old.Protected && !r.ECSManagedDraining {
			// Scale-in protection (ECS managed termination protection sets it on instances with tasks) comes
			// off only here, from the drained instance; explicit termination does not need it, but leaving a
			// drained instance protected would make ECS and Auto Scaling disagree about it.
			if _, err := o.AutoScaling.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{AutoScalingGroupName: aws.String(v.Name),
				InstanceIds: []string{old.ID}, ProtectedFromScaleIn: aws.Bool(false)}); err != nil && !awsapi.IsInstanceNotFound(err) {
				return r, fmt.Errorf("removing scale-in protection from drained instance %s: %w", old.ID, err)
			}
		}
		// Decrementing desired capacity undoes the surge in the same call; the group's terminating lifecycle
		// hook (if any) then reaches this agent, which finds the instance drained and completes it (Amazon EC2
		// Auto Scaling API Reference: TerminateInstanceInAutoScalingGroup). The replacement is done once the
		// call is accepted: the next one need not wait for the drained instance to finish shutting down.
		// Surge: decrementing desired capacity undoes the surge. Drain-first: the group shrinks by the drained
		// instance unless that would go below min size, in which case Auto Scaling launches its replacement
		// (from the new launch template version). With ECS managed draining the instance is not drained yet:
		// Auto Scaling launches the replacement at once and ECS moves the tasks onto it before the instance
		// goes (desired capacity stays what ECS managed scaling set).
		decrement := r.Strategy != StrategyDrainFirst || (!r.ECSManagedDraining && v.Desired-1 >= v.Min)
		_, err := o.AutoScaling.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
			InstanceId: aws.String(old.ID), ShouldDecrementDesiredCapacity: aws.Bool(decrement)})
		if err != nil && !awsapi.IsInstanceNotFound(err) {
			return r, fmt.Errorf("terminating drained instance %s: %w", old.ID, err)
		}
		if r.ECSManagedDraining {
			o.logStep(r, "terminate requested; ECS drains it")
			return r, errWait
		}
		next, err := o.retire(ctx, r, "old instance terminating")
		if err == nil {
			err = errWait // this tick's view still shows the old desired capacity: the next pick needs a fresh one
		}
		return next, err
	}
	return r, fmt.Errorf("unknown replacement step %q", cur.Step)
}

// pickNext chooses the next outdated instance: from the Availability Zone with the most outdated instances,
// the oldest first, so the group stays balanced while it changes.
func (o *Orchestrator) pickNext(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	perAZ := map[string]int{}
	var outdated []InstanceView
	for _, i := range v.Instances {
		if i.Leaving() {
			continue
		}
		if !i.InService() {
			r.Reason = fmt.Sprintf("waiting for %s to settle (%s)", i.ID, i.LifecycleState)
			return r, errWait
		}
		if i.ImageID != r.TargetImageID && !slices.Contains(r.Replaced, i.ID) {
			outdated = append(outdated, i)
			perAZ[i.AvailabilityZone]++
		}
	}
	// The warm pool first (field case C18, warmpool.go): a surge draws on the pool, which must not hand out
	// the old AMI.
	if err := o.recycleWarmPool(ctx, t, v, &r); err != nil {
		return r, err
	}
	if len(outdated) == 0 {
		r.Phase = state.PhaseVerifying
		return o.save(ctx, r, "no outdated instance left")
	}
	if err := o.holdIfPaused(&r, fmt.Sprintf("replace the next of %d outdated instance(s)", len(outdated))); err != nil {
		return r, err
	}
	if reason := o.runGate(ctx, t); reason != "" {
		r.Reason = reason + fmt.Sprintf("; %d outdated instance(s) left", len(outdated))
		return r, errWait
	}
	// v.Instances is sorted oldest first, so a stable sort on the AZ count keeps age order within a count.
	slices.SortStableFunc(outdated, func(a, b InstanceView) int { return perAZ[b.AvailabilityZone] - perAZ[a.AvailabilityZone] })
	pick := outdated[0]
	ids := make([]string, 0, len(v.Instances))
	for _, i := range v.Instances {
		ids = append(ids, i.ID)
	}
	r.Reason = ""
	first := state.StepSurge
	switch {
	case r.Strategy == StrategyDrainFirst && r.ECSManagedDraining:
		first = state.StepTerminating // ECS drains it on termination, through its own hook
	case r.Strategy == StrategyDrainFirst:
		first = state.StepDraining
	}
	r.Current = &state.Replacement{Step: first, OldInstanceID: pick.ID, DesiredBefore: v.Desired,
		InstancesBefore: ids, StepStartedAt: o.Clock.Now(), ContainerInstanceARN: pick.Node.Name}
	return o.save(ctx, r, "replacing instance")
}

// surge raises desired capacity by one (and max by one when desired is already at max) so that the
// replacement is healthy before the old instance is drained (invariant 1, field case C10). The values
// written are absolute and derived from the persisted DesiredBefore, so a repeat after a crash is harmless;
// when desired is already above DesiredBefore the surge is taken as done.
func (o *Orchestrator) surge(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	want := cur.DesiredBefore + 1
	if v.Desired < want {
		if want > v.Max {
			if r.MaxRaisedTo == 0 {
				r.MaxRaisedFrom = v.Max
			}
			r.MaxRaisedTo = want
			saved, err := o.save(ctx, r, "raising max size for the surge")
			if err != nil {
				return r, err
			}
			r = saved
			if _, err := o.AutoScaling.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{
				AutoScalingGroupName: aws.String(v.Name), MaxSize: aws.Int32(want), DesiredCapacity: aws.Int32(want)}); err != nil {
				return r, fmt.Errorf("surging %s to desired=max=%d: %w", v.Name, want, err)
			}
		} else if _, err := o.AutoScaling.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
			AutoScalingGroupName: aws.String(v.Name), DesiredCapacity: aws.Int32(want), HonorCooldown: aws.Bool(false)}); err != nil {
			return r, fmt.Errorf("surging %s to desired=%d: %w", v.Name, want, err)
		}
	}
	r.Current.Step, r.Current.StepStartedAt = state.StepReplacementHealthy, o.Clock.Now()
	next, err := o.save(ctx, r, fmt.Sprintf("surge to desired %d", want))
	if err != nil {
		return next, err
	}
	return next, errWait
}

// startGate returns why a detected rollout may not start yet ("" when it may): soak time, approval, then
// the gates that also hold every further replacement (runGate).
func (o *Orchestrator) startGate(ctx context.Context, t Target, r state.Rollout) string {
	now := o.Clock.Now()
	p := t.Policy
	if o.source != "" {
		return o.source
	}
	if age := now.Sub(r.SourceModified); p.MinAMIAge > 0 && age < p.MinAMIAge && !soakSkipped(r) {
		return fmt.Sprintf("soak: AMI %s is %s old, minimum %s; may start at %s", r.TargetImageID,
			age.Round(time.Minute), p.MinAMIAge, r.SourceModified.Add(p.MinAMIAge).UTC().Format(time.RFC3339))
	}
	if p.Approval == ApprovalManual && r.ApprovedImage != r.TargetImageID {
		return fmt.Sprintf("approval: waiting for `patch-agent approve %s` (AMI %s)", t.Group, r.TargetImageID)
	}
	return o.runGate(ctx, t)
}

// runGate returns why no new replacement may start now ("" when one may): a closed maintenance window or
// an alarm in ALARM. A replacement already under way finishes.
func (o *Orchestrator) runGate(ctx context.Context, t Target) string {
	p := t.Policy
	if o.source != "" {
		return o.source
	}
	if w := p.Window; w != nil {
		if open, at := w.State(o.Clock.Now()); !open {
			return fmt.Sprintf("maintenance window (%s) closed; opens at %s", w.Describe(), at.Format(time.RFC3339))
		}
	}
	if len(p.Alarms) > 0 && o.Alarms != nil {
		firing, err := o.Alarms.InAlarm(ctx, p.Alarms)
		switch {
		case err != nil:
			return "alarm gate: " + err.Error()
		case len(firing) > 0:
			return fmt.Sprintf("alarm(s) %s in ALARM", strings.Join(firing, ", "))
		}
	}
	return ""
}

// retire closes the current replacement.
func (o *Orchestrator) retire(ctx context.Context, r state.Rollout, why string) (state.Rollout, error) {
	r.Replaced = append(r.Replaced, r.Current.OldInstanceID)
	r.Current = nil
	return o.save(ctx, r, why)
}

// retireLeft closes a replacement whose old instance is gone or going without the agent's decrementing
// termination: a failed health check Auto Scaling replaced, a Spot interruption, someone else's termination.
// When desired capacity still holds the agent's surge (desired = DesiredBefore+1, which nobody else wrote), the
// surge is not left behind and not taken again: it carries over to the next outdated instance, whose
// replacement is already there, so the next pick neither surges a second time nor records the raised desired
// capacity as the baseline. With no outdated instance left, the surge goes back through one more drained
// replacement of an instance on the target AMI (drain, then terminate with decrement): never by lowering desired
// capacity, which would let Auto Scaling pick an undrained instance.
//
// Not for the agent's own termination (the view of its tick still shows the surge) nor for the drain-first
// strategy, which never surges.
func (o *Orchestrator) retireLeft(ctx context.Context, v GroupView, r state.Rollout, why string) (state.Rollout, error) {
	cur := r.Current
	if r.Strategy == StrategyDrainFirst || v.Desired != cur.DesiredBefore+1 {
		return o.retire(ctx, r, why)
	}
	r.Replaced = append(r.Replaced, cur.OldInstanceID)
	var next *InstanceView
	step := state.StepSurge // the surge step finds desired already at DesiredBefore+1 and waits for the replacement
	for _, i := range v.Instances {
		if i.Serving() && i.ImageID != r.TargetImageID && !slices.Contains(r.Replaced, i.ID) {
			next = &i
			break
		}
	}
	if next == nil {
		// No outdated instance left: one instance on the target gives the surge back, drained like any other.
		// The replacement the surge launched stays.
		step = state.StepDraining
		for _, i := range v.Instances {
			if i.Serving() && i.ID != cur.NewInstanceID && !slices.Contains(r.Replaced, i.ID) {
				next = &i
				break
			}
		}
	}
	if next == nil {
		return o.retire(ctx, r, why) // nothing serving to carry to now: the next pick starts afresh
	}
	r.Current = &state.Replacement{Step: step, OldInstanceID: next.ID, DesiredBefore: cur.DesiredBefore,
		InstancesBefore: cur.InstancesBefore, StepStartedAt: o.Clock.Now(), ContainerInstanceARN: next.Node.Name}
	if step == state.StepDraining {
		r.Current.NewInstanceID = cur.NewInstanceID
	}
	return o.save(ctx, r, fmt.Sprintf("%s; the surge carries over to %s", why, next.ID))
}

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
		if _, err := o.AutoScaling.UpdateAutoScalingGroup(ctx, &autoscaling.UpdateAutoScalingGroupInput{
			AutoScalingGroupName: aws.String(v.Name), MaxSize: aws.Int32(r.MaxRaisedFrom)}); err != nil {
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
		} else if v.Desired == cur.DesiredBefore+1 {
			decrements = 1
		}
		for _, i := range v.Instances {
			if slices.Contains(cur.InstancesBefore, i.ID) || !i.InService() && i.LifecycleState != string(astypes.LifecycleStatePending) {
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
			_, err := o.AutoScaling.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
				InstanceId: aws.String(i.ID), ShouldDecrementDesiredCapacity: aws.Bool(decrement)})
			if err != nil && !awsapi.IsInstanceNotFound(err) {
				return r, fmt.Errorf("removing unhealthy replacement %s: %w", i.ID, err)
			}
			o.logStep(r, "unhealthy replacement "+i.ID+" removed")
		}
		if old, ok := v.Instance(cur.OldInstanceID); ok && old.Node.Draining {
			platform, err := o.Platforms.For(t)
			if err != nil {
				return r, err
			}
			if err := platform.Undrain(ctx, t.Cluster, old.ID); err != nil {
				return r, err
			}
		}
		newServing := 0
		for _, i := range v.Instances {
			if slices.Contains(cur.InstancesBefore, i.ID) {
				continue
			}
			if !i.Serving() {
				return r, errWait // the unhealthy replacement is still leaving
			}
			newServing++
		}
		if newServing == 0 && r.Strategy != StrategyDrainFirst && v.Desired == cur.DesiredBefore+1 {
			// The surge is still in place but no replacement survives (none ever launched): give it back,
			// or Auto Scaling would launch the extra instance later from the restored template.
			if _, err := o.AutoScaling.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
				AutoScalingGroupName: aws.String(v.Name), DesiredCapacity: aws.Int32(cur.DesiredBefore), HonorCooldown: aws.Bool(false)}); err != nil {
				return r, fmt.Errorf("undoing the surge of %s (desired back to %d): %w", v.Name, cur.DesiredBefore, err)
			}
			return r, errWait // the next tick sees the restored desired capacity
		}
	}
	history, done, err := o.restoreMax(ctx, v, &r)
	if err != nil || !done {
		return r, err
	}
	r.Phase, r.Current = state.PhaseRolledBack, nil
	history = append(history, state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "rolled-back",
		PreviousImage: r.TargetImageID, NewImage: r.PreviousImageID, Detail: r.Reason})
	next, err := o.save(ctx, r, "rolled back", history...)
	if err == nil {
		err = errWait
	}
	return next, err
}

// save writes one transition conditionally on the version read, with the history entries that record it in
// the same atomic write (so a replica that loses the race leaves none), and logs it once.
func (o *Orchestrator) save(ctx context.Context, r state.Rollout, what string, history ...state.HistoryEntry) (state.Rollout, error) {
	r.UpdatedAt = o.Clock.Now()
	if r.Active() || r.Phase == state.PhaseHalted {
		l := o.leases().Claim(o.Owner, r.UpdatedAt)
		r.LeaseOwner, r.LeaseExpires = l.Owner, l.Expires
	} else {
		r.LeaseOwner, r.LeaseExpires = "", time.Time{}
	}
	if what != "lease renewed" {
		r.Steps++
	}
	if what != "waiting" && what != "lease renewed" {
		switch r.Phase {
		case state.PhasePreparing, state.PhaseReplacing, state.PhaseVerifying, state.PhaseCompleted:
			r.Reason = "" // a transition happened: whatever held the rollout before no longer does
		}
	}
	var next state.Rollout
	var err error
	if len(history) > 0 {
		next, err = o.Store.PutRolloutWithHistory(ctx, r, history)
	} else {
		next, err = o.Store.PutRollout(ctx, r)
	}
	if err != nil {
		return r, fmt.Errorf("writing rollout of %s (%s): %w", r.Group, what, err)
	}
	if what != "lease renewed" {
		o.logStep(next, what)
		if o.Observer != nil {
			o.Observer.RolloutTransition(o.lastStored, next, what)
		}
	}
	o.lastStored = next.Clone() // later steps edit next.Current in place; prev must not change with it
	return next, nil
}

func (o *Orchestrator) logStep(r state.Rollout, what string) {
	fields := []zap.Field{zap.String(logging.Group, r.Group), zap.String(logging.RolloutPhase, string(r.Phase)),
		zap.String(logging.AMI, r.TargetImageID)}
	if r.Current != nil {
		fields = append(fields, zap.String(logging.RolloutStep, string(r.Current.Step)), zap.String(logging.InstanceID, r.Current.OldInstanceID))
		if r.Current.NewInstanceID != "" {
			fields = append(fields, zap.String(logging.NewInstanceID, r.Current.NewInstanceID))
		}
	}
	if r.Reason != "" {
		fields = append(fields, zap.String(logging.Reason, r.Reason))
	}
	o.Log.Info(what, fields...)
}

func stepOf(r state.Rollout) string {
	if r.Current == nil {
		return "-"
	}
	return string(r.Current.Step)
}
