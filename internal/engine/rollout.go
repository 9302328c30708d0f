package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

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
	// Groups owns the Auto Scaling reads the rollout decides on (the group's traits); nil uses
	// AutoScalingGroups over AutoScaling.
	Groups providers.Groups
	// Templates owns the launch template versions (Templates over EC2 and Auto Scaling).
	Templates providers.TemplateProvider
	Platforms model.Platforms
	// Alarms checks the alarm gates of targets that name alarms; nil disables the gate.
	Alarms model.AlarmChecker
	Clock  clock.PassiveClock
	Log    *zap.Logger
	Policy model.Policy
	// Observer is told every transition (metrics, notifications); nil observes nothing. An Observer that is
	// also an AMIRejectionObserver is told every refusal of the AMI gate.
	Observer model.Observer
	// AMIGate checks every target AMI before a rollout may leave Waiting for Preparing (invariant 10,
	// docs/architecture.md): a *providers.AMIGate. The agent always sets it; nil checks nothing.
	AMIGate AMIChecker
	// Nodegroups sends and follows the UpdateNodegroupVersion of managed node group targets
	// (rollout_nodegroup.go); nil when the agent rolls none.
	Nodegroups model.NodegroupAPI
	// Versions remembers the explicit launch template versions found launching their group's target AMI
	// though the agent did not point the group at them (setback.go), shared by the copies of the orchestrator;
	// nil reads them again on every look.
	Versions *VersionMemo
	// RefreshMemo remembers the agent's refresh of each group as last described (or as just started), shared
	// by the copies of the orchestrator (refreshmemo.go); nil describes it on every look.
	RefreshMemo *RefreshMemo
	// HookKept, when set, returns the record of the lifecycle action under key that this process keeps while
	// it holds the action's claim (lifecycleaction.Hooks.Kept): the look for a held drain (heldDrain) reads it
	// instead of the store; false reads the store.
	HookKept func(key string) (state.Hook, bool)
	// KnownHooks, when set, returns the group's lifecycle hooks as this process last described them and when
	// (lifecycleaction.Hooks.KnownHooks; no call): a refresh whose group lost the agent's launching or
	// terminating hook since it started is cancelled (refreshStops).
	KnownHooks func(group string) ([]model.GroupHook, time.Time, bool)
	// QueueURL is the agent's queue: which lifecycle hooks are the agent's (HookOwned) for the hook check of
	// the refresh strategy; "" counts every hook but ECS's managed draining hook.
	QueueURL string

	pause      *state.Lock   // the pause of the target being reconciled (Reconcile is not called concurrently)
	source     string        // why the target's source names no AMI now ("" when it names one): a gate (model.SourceGate)
	lastStored state.Rollout // the record as last read or written in this Reconcile call
	writeLost  bool          // a write of this Reconcile call failed (ErrConflict or another error): lastStored may be stale

	ng *model.NodegroupInputs // the managed node group being reconciled (nil for a group)

	pauseRead func() (*state.Lock, error) // Inputs.PauseRead bound to the call's ctx; nil once read (or unset)
	pauseSeen func(state.Lock)            // Inputs.PauseSeen (nil: not told)

	// guard names the destructive step the next write precedes ("" when none): that write carries the pause
	// check (state.Store.PutRolloutUnlessPaused; guardIfPaused). checked is true while the last write of this
	// call was such a guarded write and no effect has used it yet (guardEffect).
	guard   string
	checked bool
	// amiGated: the AMI gate passed the target on a fresh check in this Reconcile call (start, right before
	// Preparing), so a refresh started in the same call needs no check of its own (startRefresh).
	amiGated bool
}

// leases is the lease rule of the orchestrator's TTL.
func (o *Orchestrator) leases() state.LeaseRule { return state.LeaseRule{TTL: o.LeaseTTL} }

// errWait ends a Reconcile call: the rollout waits for the world to change.
var errWait = errors.New("waiting")

// Reconcile advances t's rollout as far as the world allows in this tick. It returns the record as stored.
// A target whose lease another replica holds (until its expiry plus the skew margin, state.LeaseRule) is
// left alone. This replica's lease is renewed on every write and at half-life; before every step of an
// active rollout it must have more than the margin left, or it is renewed first with a conditional write, so
// a replica that stalled past its lease and wakes up with a stale view loses that write instead of acting. A
// write that loses a race with another replica (state.ErrConflict) ends the tick without error: the next tick
// re-reads the record.
func (o *Orchestrator) Reconcile(ctx context.Context, t model.Target, in model.Inputs) (state.Rollout, error) {
	if in.NotRolled != nil {
		return o.recordNotRolled(ctx, t, in) // notrolled.go
	}
	v, ami := in.View, in.AMI
	r, err := o.loadRecord(ctx, t, in)
	if err != nil {
		return state.Rollout{}, err
	}
	now := o.Clock.Now()
	if o.leases().HeldByOther(r.Lease(), o.Owner, now) {
		return r, nil // another replica acts on this target
	}
	r = releaseNotRolled(t, r) // notrolled.go: a group whose tags were fixed is rolled from here
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
	o.pause, o.ng, o.pauseRead, o.pauseSeen, o.guard, o.checked, o.amiGated = in.Pause, in.Nodegroup, nil, in.PauseSeen, "", false, false
	if in.PauseRead != nil {
		o.pause, o.pauseRead = nil, func() (*state.Lock, error) { return in.PauseRead(ctx) }
	}
	o.source = model.SourceGate(in)
	if strings.HasPrefix(r.Reason, pausedPrefix) {
		if p, err := o.currentPause(); err == nil && p == nil {
			r.Reason = ""
		}
	}
	stored := r
	shown, _ := r.ShownImages() // ON TARGET counts the AMI status shows (a node group's rollback: the one it went to)
	r.Instances, r.OnTarget, r.Warning = v.Staying(), v.CountOnImage(shown), in.Warning
	if note := model.DeprecatedStrategyNote(t.Policy.Strategy); note != "" { // model/strategy.go
		r.Warning = strings.TrimPrefix(r.Warning+"; "+note, "; ")
	}
	if note := o.maxAgeNote(t, ami, stored); note != "" { // rollout_maxage.go
		r.Warning = strings.TrimPrefix(r.Warning+"; "+note, "; ")
	}
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
		o.guard = "" // the writes below (a reason to wait, an error) are not the write-ahead of a step
		if errors.Is(err, state.ErrConflict) {
			o.Log.Info("another replica moved the rollout first; re-reading next tick", zap.String(logging.Group, t.Group))
			return next, nil
		}
		if errors.Is(err, errWait) {
			counted := (next.Instances != stored.Instances || next.OnTarget != stored.OnTarget) && !next.Active()
			if next.Version == stored.Version && (next.Phase != stored.Phase || next.Reason != stored.Reason ||
				counted || next.Warning != stored.Warning) {
				// A new reason to wait is written once, so status shows it; an unchanged one costs nothing. A new
				// count alone is written only while no rollout is under way: during one, the counts ride on the
				// next transition's write (several per replaced instance), and a write that makes no
				// step durable is not needed for safety.
				saved, err := o.save(ctx, next, "waiting")
				if errors.Is(err, state.ErrConflict) {
					return stored, nil
				}
				return saved, err
			}
			return next, nil // waiting is not a failure
		}
		if err != nil {
			if next.Group == r.Group && next.Version > r.Version {
				r = next // the step wrote before it failed (its pause check, guardEffect): that record is the stored one
			}
			err = fmt.Errorf("rollout of %s at %s/%s: %w", t.Group, next.Phase, stepOf(next), err)
			// A step that keeps failing (AccessDenied, a limit) shows on the status, written once per
			// distinct error; the next transition clears it.
			if reason := retryingPrefix + requestID.ReplaceAllString(providers.Truncate(err.Error(), 300), ""); r.Active() && r.Reason != reason {
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
func (o *Orchestrator) step(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	o.guard = "" // a guard set by a step that then waited is not carried to the next step's writes
	if o.ng != nil {
		return o.stepNodegroup(ctx, t, v, ami, r)
	}
	if r.ManualRollback() && r.Active() {
		// An operator's rollback answers what the target's alarms say (an AMI that passed the health checks
		// and broke the application): they neither hold it, nor go in its refresh's AlarmSpecification, nor
		// halt it and roll it back onto the AMI the operator rolled away from.
		t.Policy.Alarms = nil
	}
	switch r.Phase {
	case "", state.PhaseIdle, state.PhaseCompleted, state.PhaseRolledBack:
		return o.detect(ctx, t, v, ami, r)
	case state.PhaseDetected, state.PhaseWaiting:
		return o.start(ctx, t, v, ami, r)
	case state.PhaseHalted:
		return olderEngineHalted(r), errWait // rollout_olderengine.go
	}
	if r.Strategy != model.StrategyRefresh {
		return o.olderEngine(ctx, r) // rollout_olderengine.go
	}
	switch r.Phase {
	case state.PhasePreparing:
		if err := o.holdIfPaused(&r, "prepare the launch template"); err != nil {
			return r, err
		}
		return o.prepareRefresh(ctx, t, v, r) // rollout_refresh.go
	case state.PhaseReplacing, state.PhaseRollingBack: // a rollback is never held by a pause once decided
		return o.refreshStep(ctx, t, v, ami, r)
	case state.PhaseVerifying:
		return o.verifyRefresh(ctx, t, v, r)
	}
	return r, fmt.Errorf("unknown phase %q", r.Phase)
}

// loadRecord returns the target's rollout record: the one the caller already read (in.Record), else the
// store's, else a new Idle record for the target; it is also what the next save compares against (lastStored).
// Errors are the store's, wrapped with the group's name.
func (o *Orchestrator) loadRecord(ctx context.Context, t model.Target, in model.Inputs) (state.Rollout, error) {
	r := state.Rollout{Group: t.Group, Platform: t.Platform, Cluster: t.Cluster}
	if in.Record != nil {
		r = *in.Record
	} else if stored, err := o.Store.GetRollout(ctx, t.Group); err == nil {
		r = stored
	} else if !errors.Is(err, state.ErrNotFound) {
		return state.Rollout{}, fmt.Errorf("reading rollout of %s: %w", t.Group, err)
	}
	o.lastStored, o.writeLost = r.Clone(), false
	return r, nil
}

// Stored returns the target's rollout record as the last Reconcile call read it from the store (or was
// given it, Inputs.Record) or wrote it, and true; false when a write of that call failed — it lost a race
// (state.ErrConflict, which Reconcile itself does not return) or its outcome is unknown — so the stored
// record may be newer than any this call saw and must be read again. The agent keeps it to skip the read
// of its next look; the version condition of the next write catches a record changed since.
func (o *Orchestrator) Stored() (state.Rollout, bool) {
	return o.lastStored.Clone(), !o.writeLost
}
