package model

import (
	"context"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Policy holds the rollout settings that apply to every target.
type Policy struct {
	// HealthTimeout is how long a new instance's launching lifecycle action may wait in Pending:Wait for the
	// instance to serve in its cluster before the agent abandons it and the rollout halts (field case C15). Default 10 minutes.
	HealthTimeout time.Duration
	// DrainTimeout is how long a drain may take before the rollout halts and the old instance is put back in
	// service. Default 30 minutes.
	DrainTimeout time.Duration
	// RollbackOnFailure moves a halted rollout to RollingBack: the group's launch template goes back to the
	// version it had before the rollout. Default true.
	RollbackOnFailure bool
	// ClusterBudget is how many instances rollouts may drain at once across every managed group of one ECS or
	// EKS cluster, whichever replica drains them: claimed through the store (state.PlanDrainSlot, written with
	// the drain's write-ahead) before a drain starts. Default 1; below 1 counts as 1.
	ClusterBudget int
}

// Inputs are what one tick knows about a target besides its record.
type Inputs struct {
	// View is the group as observed in this tick.
	View GroupView
	// AMI is the target AMI resolved from the target's source; nil when unknown (not resolved yet, missing).
	AMI *ResolvedAMI
	// Pause is the lock that pauses this target (its own or the global one); nil when not paused.
	Pause *state.Lock
	// PauseRead, when set, reads the lock that pauses this target (nil, nil when none) and Pause is not used:
	// Reconcile calls it at most once, only before the first new destructive step of the call or to clear a
	// "paused" reason, so a look that only waits reads no pause lock. An error holds the step: it
	// is returned and the step is retried, never taken unchecked (invariant 7, docs/architecture.md).
	PauseRead func(context.Context) (*state.Lock, error)
	// PauseSeen, when set, is told the lock that stopped a guarded write (guardIfPaused): the agent wakes the
	// target when a pause with an end ends.
	PauseSeen func(state.Lock)
	// SourceProblem says why the source names no usable AMI ("source missing: ..."), when AMI is nil.
	SourceProblem string
	// Warning is a standing configuration problem of the group ("" when none), kept on the record.
	Warning string
	// Record, when set, is the target's rollout record as read in this tick (Version 0 when it has none);
	// nil reads it from the Store.
	Record *state.Rollout
	// Nodegroup, when set, makes the target an EKS managed node group (engine/rollout_nodegroup.go).
	Nodegroup *NodegroupInputs
	// NotRolled, when set, is why the opted-in group is not rolled (discovery's Misconfigured: a tag the agent
	// does not accept, or an error wrapping ErrManagedNodegroupGroup): Reconcile only records it for status
	// (engine/notrolled.go) and acts on nothing.
	NotRolled error
}

// sourceGate returns why no new destructive step may start because the target's AMI source names no usable
// AMI ("source missing: parameter /x was deleted", "source missing: parameter /x does not exist", or why its
// value is not an AMI id), or "" when the source names one. It holds a rollout that has not started
// (Detected, Waiting) and any new instance refresh; unlike a closed maintenance window it does not cancel a
// refresh already running (its AMI passed every gate when it started). A source that names an
// AMI again lifts it at the next tick.
func SourceGate(in Inputs) string {
	if in.AMI != nil || in.SourceProblem == "" {
		return ""
	}
	return in.SourceProblem
}

// DefaultPolicy returns the defaults documented on Policy.
func DefaultPolicy() Policy {
	return Policy{HealthTimeout: 10 * time.Minute, DrainTimeout: 30 * time.Minute, RollbackOnFailure: true, ClusterBudget: 1}
}
