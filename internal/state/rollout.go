package state

import (
	"strings"
	"time"
)

// Phase is the top-level state of a target's rollout (docs/architecture.md draws the machine).
type Phase string

const (
	PhaseIdle        Phase = "Idle"        // every instance runs the target AMI; nothing to do
	PhaseDetected    Phase = "Detected"    // a new target AMI was resolved from the source
	PhaseWaiting     Phase = "Waiting"     // a gate (soak, window, approval, pause, alarm) holds the rollout
	PhasePreparing   Phase = "Preparing"   // new launch template version; group pointed at it
	PhaseReplacing   Phase = "Replacing"   // outdated instances replaced one at a time (see Step)
	PhaseVerifying   Phase = "Verifying"   // every in-service instance on the target AMI; max restored
	PhaseCompleted   Phase = "Completed"   // done; waits for the next AMI
	PhaseHalted      Phase = "Halted"      // a failure stopped the rollout; Reason says why
	PhaseRollingBack Phase = "RollingBack" // launch template back to the last good version
	PhaseRolledBack  Phase = "RolledBack"  // rollback finished
)

// Step is the position of the replacement in flight (Rollout.Current) while Replacing or RollingBack.
type Step string

// The steps of older agents, which replaced one instance at a time by raising desired capacity themselves. This
// agent never enters them: a record found at one is halted with what to check (lifecycle's olderEngine).
const (
	StepSurge              Step = "Surge"              // desired capacity +1 about to be / being written
	StepReplacementHealthy Step = "ReplacementHealthy" // waiting for the extra instance to serve
	StepDraining           Step = "Draining"           // old instance DRAINING (ECS) / cordoned and evicted (EKS)
	StepTerminating        Step = "Terminating"        // TerminateInstanceInAutoScalingGroup sent
)

// LaunchTemplateRef is how a group references its launch template: an id and a version string
// ("$Default", "$Latest" or a number), directly or inside a mixed instances policy.
type LaunchTemplateRef struct {
	ID             string `json:"id" dynamodbav:"id"`
	Name           string `json:"name,omitempty" dynamodbav:"name,omitempty"`
	Version        string `json:"version" dynamodbav:"version"`
	MixedInstances bool   `json:"mixedInstances,omitempty" dynamodbav:"mixed,omitempty"`
}

// Replacement is the replacement in flight: the step and when it started; OldInstanceID in a record an older
// agent wrote (the instance it was replacing).
type Replacement struct {
	Step          Step      `json:"step" dynamodbav:"step"`
	OldInstanceID string    `json:"oldInstanceId" dynamodbav:"old"`
	StepStartedAt time.Time `json:"stepStartedAt" dynamodbav:"stepStartedAt"`
}

// Rollout is the persisted record of one target's rollout. It is rewritten on every transition.
type Rollout struct {
	Group    string `json:"group" dynamodbav:"group"`
	Platform string `json:"platform" dynamodbav:"platform"` // "ecs" or "eks"
	Cluster  string `json:"cluster,omitempty" dynamodbav:"cluster,omitempty"`
	Phase    Phase  `json:"phase" dynamodbav:"phase"`
	// Reason explains Waiting, Halted and RolledBack in words an operator can act on.
	Reason string `json:"reason,omitempty" dynamodbav:"reason,omitempty"`

	TargetImageID   string `json:"targetImageId,omitempty" dynamodbav:"target,omitempty"`
	PreviousImageID string `json:"previousImageId,omitempty" dynamodbav:"previous,omitempty"`
	// Source is the SSM parameter the target AMI was resolved from; SourceVersion its Version then and
	// SourceModified its LastModifiedDate (the AMI age for soak policies is measured from it).
	Source         string    `json:"source,omitempty" dynamodbav:"source,omitempty"`
	SourceVersion  int64     `json:"sourceVersion,omitempty" dynamodbav:"sourceVersion,omitempty"`
	SourceModified time.Time `json:"sourceModified,omitempty" dynamodbav:"sourceModified,omitempty"`
	DetectedAt     time.Time `json:"detectedAt,omitempty" dynamodbav:"detectedAt,omitempty"`
	// Trigger says why a rollout to the AMI the group already runs was started: "max-instance-age" (instances
	// outlived model.TagMaxInstanceAge; no soak); "" for a new AMI.
	Trigger string `json:"trigger,omitempty" dynamodbav:"trigger,omitempty"`

	// PreviousTemplate is the group's launch template reference before Preparing (for rollback);
	// NewTemplateVersion the version created with the target AMI.
	PreviousTemplate   *LaunchTemplateRef `json:"previousTemplate,omitempty" dynamodbav:"prevTemplate,omitempty"`
	NewTemplateVersion string             `json:"newTemplateVersion,omitempty" dynamodbav:"newTemplateVersion,omitempty"`

	Current  *Replacement `json:"current,omitempty" dynamodbav:"current,omitempty"`
	Replaced []string     `json:"replaced,omitempty" dynamodbav:"replaced,omitempty"` // old instance ids retired, in order
	Steps    int          `json:"steps" dynamodbav:"steps"`                           // transitions written so far

	// Strategy is how instances are replaced, decided when the rollout starts: "refresh" (lifecycle's
	// StrategyRefresh) for a group, "" for a managed node group; an older agent's record may name "surge",
	// "drain-first" or "capacity-provider" (or none).
	Strategy string `json:"strategy,omitempty" dynamodbav:"strategy,omitempty"`

	// Warning is a standing problem of the group's configuration the agent found (e.g. no terminating
	// lifecycle hook), written when it changes; "" when none.
	Warning string `json:"warning,omitempty" dynamodbav:"warning,omitempty"`

	// Instances and OnTarget count the group's instances that are not leaving it (Terminating or Terminated
	// left out) and the InService ones running TargetImageID, as last observed (written when they change, so
	// status needs no AWS call).
	Instances int `json:"instances" dynamodbav:"instances"`
	OnTarget  int `json:"onTarget" dynamodbav:"onTarget"`
	// RollbackFrom is the AMI a manual rollback moved away from: while the source still names it, it is not
	// rolled out again (a newer AMI is).
	RollbackFrom string `json:"rollbackFrom,omitempty" dynamodbav:"rollbackFrom,omitempty"`

	// SetBacks counts the outside changes (an infrastructure-as-code apply, a person) that pointed the group's
	// launch template back at another AMI after the agent rolled it to TargetImageID (internal/engine, setback.go);
	// SetBackBy names the launch template version of the last one ("lt-… version 7", with " by <CreatedBy>" when
	// EC2 tells who created it). Both are cleared when the target changes (a new AMI, a manual rollback) or
	// when the template changes to another AMI while the group is held.
	SetBacks  int    `json:"setBacks,omitempty" dynamodbav:"setBacks,omitempty"`
	SetBackBy string `json:"setBackBy,omitempty" dynamodbav:"setBackBy,omitempty"`

	// ApprovedImage is the target AMI an operator approved with `patch-agent approve` (approval mode manual).
	ApprovedImage string `json:"approvedImageId,omitempty" dynamodbav:"approvedImage,omitempty"`
	ApprovedBy    string `json:"approvedBy,omitempty" dynamodbav:"approvedBy,omitempty"`
	// SkipSoakImage is the target AMI whose soak time an operator skipped (`patch-agent approve --skip-soak`,
	// by ApprovedBy), with the reason they gave: that AMI may start before its soak ends; another AMI soaks.
	SkipSoakImage  string `json:"skipSoakImageId,omitempty" dynamodbav:"skipSoakImage,omitempty"`
	SkipSoakReason string `json:"skipSoakReason,omitempty" dynamodbav:"skipSoakReason,omitempty"`

	// LeaseOwner is the agent replica that acts on this target until LeaseExpires; another replica takes over
	// only after expiry. Every write is fenced by Version, so a replica whose lease was taken over fails its
	// next write with ErrConflict and stops.
	LeaseOwner   string    `json:"leaseOwner,omitempty" dynamodbav:"leaseOwner,omitempty"`
	LeaseExpires time.Time `json:"leaseExpires,omitempty" dynamodbav:"leaseExpires,omitempty"`

	// Nodegroup is the progress of an EKS managed node group target (nodegroup.go); nil for groups.
	Nodegroup *NodegroupProgress `json:"nodegroup,omitempty" dynamodbav:"nodegroup,omitempty"`
	// Refresh is the progress of a rollout by instance refresh (strategy "refresh", refresh.go); nil otherwise.
	Refresh *RefreshProgress `json:"refresh,omitempty" dynamodbav:"refresh,omitempty"`

	UpdatedAt time.Time `json:"updatedAt" dynamodbav:"updatedAt"`
	// Version is the optimistic-concurrency counter: the Store's conditional writes compare it.
	Version int64 `json:"version" dynamodbav:"version"`
}

// ManualRollbackSource starts the Source of a rollout that an operator's `patch-agent rollback` started
// ("manual rollback by WHO"): its target is the AMI the operator rolls the group back to.
const ManualRollbackSource = "manual rollback by "

// ManualRollback reports whether r rolls its group to the AMI an operator's rollback named (Source
// ManualRollbackSource, RollbackFrom the AMI rolled back from).
func (r Rollout) ManualRollback() bool {
	return r.RollbackFrom != "" && strings.HasPrefix(r.Source, ManualRollbackSource)
}

// Active reports whether the rollout is between detection and an end state.
func (r Rollout) Active() bool {
	switch r.Phase {
	case PhaseDetected, PhaseWaiting, PhasePreparing, PhaseReplacing, PhaseVerifying, PhaseRollingBack:
		return true
	}
	return false
}

// ShownImages returns the AMI the group is (being) rolled to as status shows it (TARGET AMI, and what ON
// TARGET counts) and the one before it: TargetImageID and PreviousImageID, swapped for an EKS managed node
// group rolling back or rolled back (Nodegroup.Rollback, RollingBack or RolledBack): EKS is putting (or has put)
// its nodes back on PreviousImageID, while TargetImageID stays the AMI rolled back from so that it is not rolled
// again. Either id may be empty.
func (r Rollout) ShownImages() (target, previous string) {
	if p := r.Nodegroup; p != nil && p.Rollback && r.PreviousImageID != "" &&
		(r.Phase == PhaseRollingBack || r.Phase == PhaseRolledBack) {
		return r.PreviousImageID, r.TargetImageID
	}
	return r.TargetImageID, r.PreviousImageID
}

// StatusImages returns the AMI the group is (being) rolled to and the one before it, as every printer shows
// them (status's TARGET AMI and PREVIOUS AMI, the demo's on-target count): ShownImages, and for an Auto Scaling
// group's rollback (RollingBack or RolledBack with a PreviousImageID) the AMI the rollback goes to and the one
// it leaves, as the record keeps TargetImageID the AMI rolled back from so that it is not rolled again.
// Swapped reports that case: the record's OnTarget then counts the instances on previous, not on target.
func (r Rollout) StatusImages() (target, previous string, swapped bool) {
	if r.Nodegroup == nil && r.PreviousImageID != "" && (r.Phase == PhaseRollingBack || r.Phase == PhaseRolledBack) {
		return r.PreviousImageID, r.TargetImageID, true
	}
	target, previous = r.ShownImages()
	return target, previous, false
}

// HookState is the progress of one lifecycle action.
type HookState string

const (
	HookDraining   HookState = "Draining"   // drain started; heartbeats keep the action alive
	HookWaiting    HookState = "Waiting"    // launching: waiting for the instance to be healthy in its cluster
	HookCompleting HookState = "Completing" // this replica claimed the completion and is about to call CompleteLifecycleAction
	HookCompleted  HookState = "Completed"  // CompleteLifecycleAction accepted (or the action was no longer active)
)

// Hook is the durable progress of one lifecycle action. Token is its key: model.ActionKey (group, instance
// and hook); a record keyed by a message's lifecycle action token instead is not read.
type Hook struct {
	Token      string    `json:"token" dynamodbav:"token"`
	Group      string    `json:"group" dynamodbav:"group"`
	HookName   string    `json:"hookName" dynamodbav:"hookName"`
	InstanceID string    `json:"instanceId" dynamodbav:"instanceId"`
	Transition string    `json:"transition" dynamodbav:"transition"`
	State      HookState `json:"state" dynamodbav:"state"`
	Result     string    `json:"result,omitempty" dynamodbav:"result,omitempty"` // CONTINUE or ABANDON once completed
	// Decided is the result the agent decided and wrote with HookCompleting, before its CompleteLifecycleAction:
	// when Auto Scaling then answers that no action is active (the call went through before a crash, another
	// replica completed it, or it timed out), Result stays empty and Decided still tells the agent's verdict —
	// a launch it judged not serving halts the instance refresh whether or not its ABANDON was the one applied.
	Decided       string    `json:"decided,omitempty" dynamodbav:"decided,omitempty"`
	Note          string    `json:"note,omitempty" dynamodbav:"note,omitempty"`
	ReceivedAt    time.Time `json:"receivedAt" dynamodbav:"receivedAt"`
	LastHeartbeat time.Time `json:"lastHeartbeat,omitempty" dynamodbav:"lastHeartbeat,omitempty"`
	CompletedAt   time.Time `json:"completedAt,omitempty" dynamodbav:"completedAt,omitempty"`
	// Owner is the replica working on the action until OwnerExpires (see Rollout.LeaseOwner).
	Owner        string    `json:"owner,omitempty" dynamodbav:"owner,omitempty"`
	OwnerExpires time.Time `json:"ownerExpires,omitempty" dynamodbav:"ownerExpires,omitempty"`
	// Confirmed: Auto Scaling confirmed the action (the instance waits in the group, on the hook, in the
	// action's wait state) before anything was drained; a record without it is confirmed on its next look.
	Confirmed bool `json:"confirmed,omitempty" dynamodbav:"confirmed,omitempty"`
	// AgentDrained: the agent itself set the instance DRAINING (or cordoned it) for this action and wrote a
	// DrainMark first.
	AgentDrained bool `json:"agentDrained,omitempty" dynamodbav:"agentDrained,omitempty"`
	// WaitState is the lifecycle state Auto Scaling confirmed the instance waiting in (Pending:Wait,
	// Terminating:Wait, Warmed:Pending:Wait ...): it tells a launch into the warm pool from one into service.
	WaitState string `json:"waitState,omitempty" dynamodbav:"waitState,omitempty"`
	// Adopted: the reconcile loop found the action waiting without its message (lost or late) and works on
	// it (lifecycleaction.Hooks.AdoptWaiting); its message, when it comes, waits for its end.
	Adopted bool `json:"adopted,omitempty" dynamodbav:"adopted,omitempty"`
	// DrainHeldAt is when the drain of this terminating action reached its deadline undrained while the
	// agent's instance refresh of the group replaced the instance: the agent put the instance back in service
	// and keeps the action waiting with heartbeats, never completing it, while the rollout is halted
	// (lifecycleaction.Hooks). Zero while the drain is not held.
	DrainHeldAt time.Time `json:"drainHeldAt,omitempty" dynamodbav:"drainHeldAt,omitempty"`
	// DrainFrom is when the drain's deadline runs from after a held drain started again (an operator's retry
	// or rollback); zero: from ReceivedAt.
	DrainFrom time.Time `json:"drainFrom,omitempty" dynamodbav:"drainFrom,omitempty"`
	// HeartbeatTimeout is the shortest HeartbeatTimeout of the action's hook the agent has read since it
	// recorded the action (zero: not recorded). Auto Scaling may keep the timeout the action began with when a
	// stack update raises the hook's, so the action is heartbeated at a third of this, never of a longer value
	// read later (lifecycleaction.Hooks).
	HeartbeatTimeout time.Duration `json:"heartbeatTimeout,omitempty" dynamodbav:"heartbeatTimeout,omitempty"`
	Version          int64         `json:"version" dynamodbav:"version"`
}

// DrainStart is when the drain deadline of the terminating action runs from: DrainFrom, else ReceivedAt.
func (h Hook) DrainStart() time.Time {
	if !h.DrainFrom.IsZero() {
		return h.DrainFrom
	}
	return h.ReceivedAt
}

// DrainMark records that the agent itself set an instance DRAINING (ECS) or cordoned it (EKS) for a
// lifecycle action, written before the drain starts. An instance with a mark that is InService again, with no
// lifecycle action waiting and not replaced by a rollout, is put back in service (lifecycleaction.Hooks.Recover);
// the mark goes when the instance is back in service or gone.
type DrainMark struct {
	InstanceID string `json:"instanceId" dynamodbav:"instanceId"`
	Group      string `json:"group" dynamodbav:"group"`
	Platform   string `json:"platform" dynamodbav:"platform"`
	Cluster    string `json:"cluster" dynamodbav:"cluster"`
	// Token is the lifecycle action the drain was for.
	Token string `json:"token" dynamodbav:"token"`
	// At is when the mark was written (before the drain started).
	At time.Time `json:"at" dynamodbav:"at"`
}

// HistoryEntry is one line of a target's AMI history.
type HistoryEntry struct {
	Group         string    `json:"group" dynamodbav:"group"`
	At            time.Time `json:"at" dynamodbav:"at"`
	Event         string    `json:"event" dynamodbav:"event"` // detected, completed, halted, rolled-back
	PreviousImage string    `json:"previousImageId,omitempty" dynamodbav:"previous,omitempty"`
	NewImage      string    `json:"newImageId,omitempty" dynamodbav:"new,omitempty"`
	Source        string    `json:"source,omitempty" dynamodbav:"source,omitempty"`
	SourceVersion int64     `json:"sourceVersion,omitempty" dynamodbav:"sourceVersion,omitempty"`
	Detail        string    `json:"detail,omitempty" dynamodbav:"detail,omitempty"`
}

// ByOlderEngine reports whether r is a group's rollout record an older agent's engine wrote past Preparing:
// that engine replaced instances by writing desired capacity itself (any strategy but "refresh"; no managed
// node group), and r is Replacing, Verifying or RollingBack, or Halted with that strategy or at one of its steps.
func (r Rollout) ByOlderEngine() bool {
	if r.Nodegroup != nil || r.Strategy == "refresh" {
		return false
	}
	switch r.Phase {
	case PhaseReplacing, PhaseVerifying, PhaseRollingBack:
		return true
	case PhaseHalted:
		if r.Strategy != "" {
			return true
		}
		if c := r.Current; c != nil {
			switch c.Step {
			case StepSurge, StepReplacementHealthy, StepDraining, StepTerminating:
				return true
			}
		}
	}
	return false
}
