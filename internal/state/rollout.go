package state

import "time"

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

// Step is the position inside the replacement of one outdated instance (PhaseReplacing).
type Step string

const (
	StepSurge              Step = "Surge"              // desired+1 (max+1 when needed) about to be / being written
	StepReplacementHealthy Step = "ReplacementHealthy" // waiting for the surge instance: InService and healthy in its cluster
	StepDraining           Step = "Draining"           // old instance DRAINING (ECS) / cordoned and evicted (EKS)
	StepTerminating        Step = "Terminating"        // TerminateInstanceInAutoScalingGroup sent; waiting for it to leave
)

// LaunchTemplateRef is how a group references its launch template: an id and a version string
// ("$Default", "$Latest" or a number), directly or inside a mixed instances policy.
type LaunchTemplateRef struct {
	ID             string `json:"id" dynamodbav:"id"`
	Name           string `json:"name,omitempty" dynamodbav:"name,omitempty"`
	Version        string `json:"version" dynamodbav:"version"`
	MixedInstances bool   `json:"mixedInstances,omitempty" dynamodbav:"mixed,omitempty"`
}

// Replacement is the durable progress of replacing one outdated instance.
type Replacement struct {
	Step          Step   `json:"step" dynamodbav:"step"`
	OldInstanceID string `json:"oldInstanceId" dynamodbav:"old"`
	// DesiredBefore is the group's desired capacity read just before the surge; the surge writes
	// DesiredBefore+1 (an absolute value, so a repeated write after a crash is harmless).
	DesiredBefore int32 `json:"desiredBefore" dynamodbav:"desiredBefore"`
	// InstancesBefore are the group's instance ids before the surge: the replacement is the new one.
	InstancesBefore []string  `json:"instancesBefore" dynamodbav:"before"`
	NewInstanceID   string    `json:"newInstanceId,omitempty" dynamodbav:"new,omitempty"`
	StepStartedAt   time.Time `json:"stepStartedAt" dynamodbav:"stepStartedAt"`
	// DrainStartedAt is when the agent started draining the old instance; the drain deadline runs from it.
	DrainStartedAt time.Time `json:"drainStartedAt,omitempty" dynamodbav:"drainStartedAt,omitempty"`
	// ContainerInstanceARN of the old instance (ECS), once known.
	ContainerInstanceARN string `json:"containerInstanceArn,omitempty" dynamodbav:"ci,omitempty"`
	// Capacity-provider strategy (internal/lifecycle/capacityprovider.go). Rebalance: the replacement landed in
	// an Availability Zone without an outdated instance, so the old instance is terminated without decrement
	// (Auto Scaling launches into its zone) and the surge then goes back through one drained instance of the
	// zone that has one too many (GiveBack). Resurges counts the surges taken again after ECS managed scaling
	// scaled the empty replacement in.
	Rebalance bool `json:"rebalance,omitempty" dynamodbav:"rebalance,omitempty"`
	GiveBack  bool `json:"giveBack,omitempty" dynamodbav:"giveBack,omitempty"`
	Resurges  int  `json:"resurges,omitempty" dynamodbav:"resurges,omitempty"`
	// CapacityRetries counts the health windows that ended with no replacement launched because EC2 had no
	// capacity (a failed scaling activity): each one is retried with a longer window, never a halt.
	CapacityRetries int `json:"capacityRetries,omitempty" dynamodbav:"capacityRetries,omitempty"`
	// SurgeTo is the absolute desired capacity the agent's surge writes (DesiredBefore+1), recorded durably
	// before SetDesiredCapacity is called; 0 while the surge is not requested yet. It tells the agent's own
	// extra instance from an autoscaler's: a surge step that resumes (after a pause or a crash) with SurgeTo 0
	// surges on top of whatever desired capacity it finds now, never taking someone else's scale-out as its
	// own.
	SurgeTo int32 `json:"surgeTo,omitempty" dynamodbav:"surgeTo,omitempty"`
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
	// outlived lifecycle.TagMaxInstanceAge; no soak); "" for a new AMI.
	Trigger string `json:"trigger,omitempty" dynamodbav:"trigger,omitempty"`

	// PreviousTemplate is the group's launch template reference before Preparing (for rollback);
	// NewTemplateVersion the version created with the target AMI.
	PreviousTemplate   *LaunchTemplateRef `json:"previousTemplate,omitempty" dynamodbav:"prevTemplate,omitempty"`
	NewTemplateVersion string             `json:"newTemplateVersion,omitempty" dynamodbav:"newTemplateVersion,omitempty"`

	// MaxRaisedTo is the max size the agent wrote to make room for its surge (0 = max not raised);
	// MaxRaisedFrom is the max it found. Verifying lowers max by exactly the agent's own +1.
	MaxRaisedFrom int32 `json:"maxRaisedFrom,omitempty" dynamodbav:"maxFrom,omitempty"`
	MaxRaisedTo   int32 `json:"maxRaisedTo,omitempty" dynamodbav:"maxTo,omitempty"`
	// NextSurgeAt (capacity-provider strategy) is the earliest time the next replacement may surge: one
	// CapacityProviderReservation datapoint at target after each replacement breaks ECS's 15 consecutive
	// datapoints below target before a scale-in (internal/lifecycle/capacityprovider.go).
	NextSurgeAt time.Time `json:"nextSurgeAt,omitempty" dynamodbav:"nextSurgeAt,omitempty"`
	// HaltedSurgeTo is the desired capacity the surge of a rollout halted without rollback left behind (its
	// Replacement.SurgeTo), carried by an operator's rollback: the next pick gives that surge
	// back first — one instance drained, then terminated with decrement — while desired capacity is still
	// exactly this value (otherwise someone else set it since, and it is theirs). Also set on RolledBack when a
	// batch's healthy replacements on the AMI rolled back from still hold the surge: the agent then rolls the
	// group to the rolled-back AMI, giving them back first. 0: nothing owed.
	HaltedSurgeTo int32 `json:"haltedSurgeTo,omitempty" dynamodbav:"haltedSurgeTo,omitempty"`
	// HaltedSurgeCount is how many instances of HaltedSurgeTo are the halted surge's: the batch members still in
	// flight at the halt (Current and Batch), each given back through its own drained termination with
	// decrement. 0 with HaltedSurgeTo set (a record written before batches) means 1.
	HaltedSurgeCount int32 `json:"haltedSurgeCount,omitempty" dynamodbav:"haltedSurgeCount,omitempty"`

	Current *Replacement `json:"current,omitempty" dynamodbav:"current,omitempty"`
	// Batch are the other replacements in flight beside Current when the group's batch size is above 1
	// (lifecycle.TagBatchSize): picked with Current, surged with it in one write (Current.SurgeTo is
	// Current.DesiredBefore + 1 + len(Batch)), waiting for all of their replacements to serve before any of
	// them drains, then each drained (its own slot of the per-cluster budget) and terminated with decrement on
	// its own. Only Current's Step, SurgeTo, DesiredBefore and InstancesBefore speak for the batch until the
	// drains start. Empty for a batch of 1: the record is then exactly what it was before batches.
	Batch    []Replacement `json:"batch,omitempty" dynamodbav:"batch,omitempty"`
	Replaced []string      `json:"replaced,omitempty" dynamodbav:"replaced,omitempty"` // old instance ids retired, in order
	Steps    int           `json:"steps" dynamodbav:"steps"`                           // transitions written so far

	// Strategy is how instances are replaced ("surge" or "drain-first"), decided when the rollout starts;
	// ECSManagedDraining records that ECS drains instances on termination through its own hook.
	Strategy           string `json:"strategy,omitempty" dynamodbav:"strategy,omitempty"`
	ECSManagedDraining bool   `json:"ecsManagedDraining,omitempty" dynamodbav:"ecsManagedDraining,omitempty"`

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
	// launch template back at another AMI after the agent rolled it to TargetImageID (lifecycle/setback.go);
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

// Hook is the durable progress of one lifecycle action. Token is its key: lifecycle.ActionKey (group, instance
// and hook); a record keyed by a message's lifecycle action token instead is not read.
type Hook struct {
	Token         string    `json:"token" dynamodbav:"token"`
	Group         string    `json:"group" dynamodbav:"group"`
	HookName      string    `json:"hookName" dynamodbav:"hookName"`
	InstanceID    string    `json:"instanceId" dynamodbav:"instanceId"`
	Transition    string    `json:"transition" dynamodbav:"transition"`
	State         HookState `json:"state" dynamodbav:"state"`
	Result        string    `json:"result,omitempty" dynamodbav:"result,omitempty"` // CONTINUE or ABANDON once completed
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
	// it (lifecycle.Hooks.AdoptWaiting); its message, when it comes, waits for its end.
	Adopted bool  `json:"adopted,omitempty" dynamodbav:"adopted,omitempty"`
	Version int64 `json:"version" dynamodbav:"version"`
}

// DrainMark records that the agent itself set an instance DRAINING (ECS) or cordoned it (EKS) for a
// lifecycle action, written before the drain starts. An instance with a mark that is InService again, with no
// lifecycle action waiting and not replaced by a rollout, is put back in service (lifecycle.Hooks.Recover);
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
