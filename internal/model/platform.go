package model

import (
	"context"
	"fmt"
)

// NodeState is what a platform knows of one instance: whether it joined the cluster, can take work, is
// being drained.
type NodeState struct {
	Registered bool   `json:"registered"`       // joined the cluster (ECS container instance / Kubernetes node)
	Healthy    bool   `json:"healthy"`          // can take work: ECS ACTIVE with agent connected / node Ready
	Draining   bool   `json:"draining"`         // ECS DRAINING / node cordoned
	Name       string `json:"name,omitempty"`   // container instance ARN / node name
	Status     string `json:"status,omitempty"` // platform status word (ACTIVE, DRAINING, Ready, ...)
	// Tasks is what the look counted on the instance: ECS runningTasksCount + pendingTasksCount, daemon-service
	// tasks included (0 for EKS, which does not count). 0 proves nothing (field case C8: stopping tasks count
	// in neither).
	Tasks int32 `json:"-"`
}

// DrainProgress is the result of one look at a drain.
type DrainProgress struct {
	Drained bool
	// Remaining counts the workloads that still block the drain (non-daemon tasks not STOPPED / pods not evicted).
	Remaining int
	Detail    string
	// Started reports that the drain is under way (ECS: the container instance is DRAINING), so that
	// StartDrain would do nothing; false when unknown (a platform that does not tell).
	Started bool
	// Node is the node the look found (FoundDrainer); zero (Registered false) when the platform does not say
	// or found none.
	Node NodeState
}

// Platform is what differs between ECS and EKS: how instances join, drain and report health. Implementations
// are idempotent: StartDrain on a draining instance and Undrain on an active one do nothing.
type Platform interface {
	// Observe returns the state of every instance of cluster that has joined it, keyed by EC2 instance id.
	Observe(ctx context.Context, cluster string) (map[string]NodeState, error)
	// StartDrain stops new work landing on the instance and moves its work elsewhere.
	StartDrain(ctx context.Context, cluster, instanceID string) error
	// DrainStatus reports whether the instance's work has left.
	DrainStatus(ctx context.Context, cluster, instanceID string) (DrainProgress, error)
	// Undrain puts a drained instance back in service (a drain abandoned at its deadline).
	Undrain(ctx context.Context, cluster, instanceID string) error
}

// FoundDrainer is implemented by platforms whose DrainStatus names the node it found (DrainProgress.Node), so
// that a look that goes on to start the drain does not find the node a second and a third time (ECS: one
// DescribeContainerInstances for the look, not one before StartDrain and one after).
type FoundDrainer interface {
	// StartDrainFound starts the drain of found, the node a DrainStatus of the same look returned, and reports
	// the drain's progress. found must come from that look, never from a record: a container instance that
	// registered again has a new ARN, and the tasks of the old one are not the instance's (Amazon ECS Developer
	// Guide, "Amazon ECS container instance lifecycle"). A node that is gone since is found afresh.
	StartDrainFound(ctx context.Context, cluster, instanceID string, found NodeState) (DrainProgress, error)
}

// KnownObserver is implemented by platforms that can refresh a look's cluster view from the members they
// know, without listing the cluster (ECS: DescribeContainerInstances of the container instance ARNs the last
// listing showed, instead of ListContainerInstances first). ObserveKnown returns the state of instanceIDs
// (the instances of the groups the look reconciles), keyed by EC2 instance id as Observe does, and falls back
// to Observe whenever the membership may have changed.
type KnownObserver interface {
	ObserveKnown(ctx context.Context, cluster string, instanceIDs []string) (map[string]NodeState, error)
}

// Platforms maps a platform name (PlatformECS, PlatformEKS) to its implementation.
type Platforms map[string]Platform

// For returns the platform of target t, or an error naming the platform nobody implements.
func (p Platforms) For(t Target) (Platform, error) {
	if impl, ok := p[t.Platform]; ok && impl != nil {
		return impl, nil
	}
	return nil, fmt.Errorf("group %s: platform %q is not available in this agent", t.Group, t.Platform)
}
