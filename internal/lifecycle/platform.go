package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
)

// NodeState is what a platform knows of one instance: whether it joined the cluster, can take work, is
// being drained.
type NodeState struct {
	Registered bool   `json:"registered"`       // joined the cluster (ECS container instance / Kubernetes node)
	Healthy    bool   `json:"healthy"`          // can take work: ECS ACTIVE with agent connected / node Ready
	Draining   bool   `json:"draining"`         // ECS DRAINING / node cordoned
	Name       string `json:"name,omitempty"`   // container instance ARN / node name
	Status     string `json:"status,omitempty"` // platform status word (ACTIVE, DRAINING, Ready, ...)
	// Tasks is what the look counted on the instance: ECS runningTasksCount + pendingTasksCount (0 for EKS,
	// which does not count). A count above 0 proves the instance is not drained; 0 proves nothing (field
	// case C8: stopping tasks count in neither).
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

// SeenDrainer is implemented by platforms that can start and check a drain from the node this tick's cluster
// view already shows (NodeState from Observe: for ECS the container instance ARN and status that the tick's
// ListContainerInstances and DescribeContainerInstances returned), instead of finding the instance in its
// cluster again. seen must come from this tick's Observe, never from a record written earlier: a container
// instance that registered again has a new ARN, and the tasks of the old one are not the instance's
// (Amazon ECS Developer Guide, "Amazon ECS container instance lifecycle"). A seen node that is not registered
// (or names nothing) falls back to StartDrain and DrainStatus.
type SeenDrainer interface {
	// StartDrainSeen is StartDrain for the instance's node as seen this tick.
	StartDrainSeen(ctx context.Context, cluster, instanceID string, seen NodeState) error
	// DrainStatusSeen is DrainStatus for the instance's node as seen this tick; draining says whether the
	// caller set (or saw) it DRAINING since the look.
	DrainStatusSeen(ctx context.Context, cluster, instanceID string, seen NodeState, draining bool) (DrainProgress, error)
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

// ECSPlatform drains ECS container instances through DRAINING (internal/ecsdrain).
type ECSPlatform struct {
	Drainer *ecsdrain.Drainer
}

var (
	_ Platform      = ECSPlatform{}
	_ SeenDrainer   = ECSPlatform{}
	_ KnownObserver = ECSPlatform{}
)

// Observe implements Platform: every container instance of the cluster, in one listing.
func (p ECSPlatform) Observe(ctx context.Context, cluster string) (map[string]NodeState, error) {
	all, err := p.Drainer.FindAll(ctx, cluster)
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodeState, len(all))
	for id, ci := range all {
		out[id] = ecsNode(ci)
	}
	return out, nil
}

func ecsNode(ci ecsdrain.ContainerInstance) NodeState {
	return NodeState{Registered: true, Healthy: ci.Healthy(), Draining: ci.Status == ecsdrain.StatusDraining, Name: ci.ARN, Status: ci.Status,
		Tasks: ci.RunningTasks + ci.PendingTasks}
}

// ObserveKnown implements KnownObserver: one DescribeContainerInstances (100 ARNs a call) of the container
// instance ARNs the last listing (or lookup) showed for instanceIDs, with no ListContainerInstances, when
// every one of them is known and is still that instance's, registered and connected: status ACTIVE or
// DRAINING with its ECS container agent connected. Anything else lists the cluster (Observe), because the
// membership may have changed: an instance not seen registered may have joined; a container instance that is
// INACTIVE or MISSING was deregistered (Amazon ECS API Reference, "DeregisterContainerInstance" and
// "ContainerInstance": status INACTIVE once deregistered), and its EC2 instance may have registered again
// under a NEW container instance ARN (Amazon ECS Developer Guide, "Amazon ECS container instance
// lifecycle"); one whose agent is disconnected may be left behind by an agent that registered afresh. A view
// taken on the old ARN would count none of the tasks of the new one, and a drain check would take the
// instance for drained with its tasks running (mutants 38, 62). Instances of instanceIDs that the answer
// leaves out are not registered, as with Observe.
func (p ECSPlatform) ObserveKnown(ctx context.Context, cluster string, instanceIDs []string) (map[string]NodeState, error) {
	if len(instanceIDs) == 0 {
		return p.Observe(ctx, cluster)
	}
	arns := make([]string, 0, len(instanceIDs))
	for _, id := range instanceIDs {
		arn := p.Drainer.KnownARN(cluster, id)
		if arn == "" {
			return p.Observe(ctx, cluster) // never seen registered: it may have joined since
		}
		arns = append(arns, arn)
	}
	cis, err := p.Drainer.DescribeARNs(ctx, cluster, arns)
	if err != nil {
		return nil, err
	}
	out := make(map[string]NodeState, len(cis))
	for _, ci := range cis {
		if !stillRegistered(ci) {
			return p.Observe(ctx, cluster) // deregistered or disconnected: the instance may have a new ARN
		}
		out[ci.EC2InstanceID] = ecsNode(ci)
	}
	for _, id := range instanceIDs {
		if _, ok := out[id]; !ok {
			return p.Observe(ctx, cluster) // MISSING, or the ARN is another instance's now
		}
	}
	return out, nil
}

// stillRegistered reports whether a described container instance is one a look may trust without listing
// its cluster: ACTIVE or DRAINING, its ECS container agent connected.
func stillRegistered(ci ecsdrain.ContainerInstance) bool {
	return (ci.Status == ecsdrain.StatusActive || ci.Status == ecsdrain.StatusDraining) && ci.AgentConnected
}

// StartDrain implements Platform. An instance that never registered has nothing to drain.
func (p ECSPlatform) StartDrain(ctx context.Context, cluster, instanceID string) error {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.Drainer.StartDrainFound(ctx, cluster, ci) // ci was just described
}

// DrainStatus implements Platform. An instance that is not (or no longer) registered is drained.
func (p ECSPlatform) DrainStatus(ctx context.Context, cluster, instanceID string) (DrainProgress, error) {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return DrainProgress{Drained: true, Detail: "no container instance registered"}, nil
	}
	if err != nil {
		return DrainProgress{}, err
	}
	if ci.Status != "DRAINING" {
		return DrainProgress{Detail: fmt.Sprintf("container instance is %s, not DRAINING", ci.Status)}, nil
	}
	if p.Drainer.StillDrained(cluster, ci) {
		// A drain already found finished (the rollout's, before it terminated the instance) is not checked
		// a second time: still DRAINING, no task running or pending.
		return DrainProgress{Drained: true, Detail: "drained at the last check, still DRAINING with no task running or pending"}, nil
	}
	return p.tasksLeft(ctx, cluster, ci)
}

// tasksLeft reports the drain of the DRAINING container instance ci from its tasks (ecsdrain.Drainer.Status).
func (p ECSPlatform) tasksLeft(ctx context.Context, cluster string, ci ecsdrain.ContainerInstance) (DrainProgress, error) {
	st, err := p.Drainer.Status(ctx, cluster, ci)
	if err != nil {
		return DrainProgress{}, err
	}
	detail := fmt.Sprintf("%d task(s) not yet STOPPED (%v)", st.Remaining, st.ByLastStatus)
	if st.Standalone > 0 { // ECS never moves these; they are never counted as drained
		detail += fmt.Sprintf("; %d of them standalone (started by no service, e.g. RunTask or AWS Batch): ECS does not move them, they must end by themselves", st.Standalone)
	}
	return DrainProgress{Drained: st.Drained, Remaining: st.Remaining, Detail: detail, Started: true}, nil
}

// seenContainerInstance returns the container instance the view saw for instanceID, and whether it saw one.
func seenContainerInstance(instanceID string, seen NodeState) (ecsdrain.ContainerInstance, bool) {
	if !seen.Registered || seen.Name == "" {
		return ecsdrain.ContainerInstance{}, false
	}
	return ecsdrain.ContainerInstance{ARN: seen.Name, EC2InstanceID: instanceID, Status: seen.Status}, true
}

// StartDrainSeen implements SeenDrainer: UpdateContainerInstancesState on the ARN the view saw, without
// describing it again (a no-op when the view saw it DRAINING). A container instance ECS no longer knows
// (MISSING: deregistered since the look) has nothing to drain.
func (p ECSPlatform) StartDrainSeen(ctx context.Context, cluster, instanceID string, seen NodeState) error {
	ci, ok := seenContainerInstance(instanceID, seen)
	if !ok {
		return p.StartDrain(ctx, cluster, instanceID)
	}
	err := p.Drainer.StartDrainFound(ctx, cluster, ci)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return nil
	}
	return err
}

// DrainStatusSeen implements SeenDrainer: the tasks of the ARN the view saw (ListTasks, DescribeTasks), without
// describing the container instance again, when the view saw it DRAINING or the caller set it DRAINING since.
// Otherwise (the view saw it ACTIVE and nobody drained it since, or saw no container instance) it is
// DrainStatus: the instance is looked up afresh.
func (p ECSPlatform) DrainStatusSeen(ctx context.Context, cluster, instanceID string, seen NodeState, draining bool) (DrainProgress, error) {
	ci, ok := seenContainerInstance(instanceID, seen)
	if !ok || (!draining && !seen.Draining) {
		return p.DrainStatus(ctx, cluster, instanceID)
	}
	ci.Status = ecsdrain.StatusDraining
	return p.tasksLeft(ctx, cluster, ci)
}

// Undrain implements Platform.
func (p ECSPlatform) Undrain(ctx context.Context, cluster, instanceID string) error {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return nil
	}
	if err != nil {
		return err
	}
	return p.Drainer.UndrainFound(ctx, cluster, ci)
}
