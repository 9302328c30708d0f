package providers

import (
	"context"
	"errors"
	"fmt"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/model"
)

// ECSPlatform drains ECS container instances through DRAINING (internal/ecsdrain).
type ECSPlatform struct {
	Drainer *ecsdrain.Drainer
}

var (
	_ model.Platform      = ECSPlatform{}
	_ model.FoundDrainer  = ECSPlatform{}
	_ model.KnownObserver = ECSPlatform{}
)

// Observe implements Platform: every container instance of the cluster, in one listing.
func (p ECSPlatform) Observe(ctx context.Context, cluster string) (map[string]model.NodeState, error) {
	all, err := p.Drainer.FindAll(ctx, cluster)
	if err != nil {
		return nil, err
	}
	out := make(map[string]model.NodeState, len(all))
	for id, ci := range all {
		out[id] = ecsNode(ci)
	}
	return out, nil
}

func ecsNode(ci ecsdrain.ContainerInstance) model.NodeState {
	return model.NodeState{Registered: true, Healthy: ci.Healthy(), Draining: ci.Status == ecsdrain.StatusDraining, Name: ci.ARN, Status: ci.Status,
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
func (p ECSPlatform) ObserveKnown(ctx context.Context, cluster string, instanceIDs []string) (map[string]model.NodeState, error) {
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
	out := make(map[string]model.NodeState, len(cis))
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

// DrainStatus implements Platform. An instance that is not (or no longer) registered is drained. The progress
// names the container instance described (DrainProgress.Node, for StartDrainFound).
func (p ECSPlatform) DrainStatus(ctx context.Context, cluster, instanceID string) (model.DrainProgress, error) {
	ci, err := p.Drainer.Find(ctx, cluster, instanceID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return model.DrainProgress{Drained: true, Detail: "no container instance registered"}, nil
	}
	if err != nil {
		return model.DrainProgress{}, err
	}
	prog, err := p.drainOf(ctx, cluster, ci)
	prog.Node = ecsNode(ci)
	return prog, err
}

// drainOf reports the drain of ci, just described.
func (p ECSPlatform) drainOf(ctx context.Context, cluster string, ci ecsdrain.ContainerInstance) (model.DrainProgress, error) {
	if ci.Status != ecsdrain.StatusDraining {
		return model.DrainProgress{Detail: fmt.Sprintf("container instance is %s, not DRAINING", ci.Status)}, nil
	}
	if p.Drainer.StillDrained(cluster, ci) {
		// A drain already found finished (the rollout's, before it terminated the instance) is not checked
		// a second time: still DRAINING, no task running or pending.
		return model.DrainProgress{Drained: true, Detail: "drained at the last check, still DRAINING with no task running or pending"}, nil
	}
	if n, standalone, ok := p.Drainer.StillBusy(cluster, ci); ok {
		// More tasks running or pending than the daemon tasks the last check listed: not drained, without
		// listing the tasks again.
		detail := fmt.Sprintf("at least %d task(s) still running or pending (ECS's task counts)", n)
		if standalone > 0 {
			detail += fmt.Sprintf("; %d of them standalone (started by no service, e.g. RunTask or AWS Batch; counted at the last listing of the tasks): ECS does not move them, they must end by themselves", standalone)
		}
		return model.DrainProgress{Remaining: n, Detail: detail, Started: true}, nil
	}
	return p.tasksLeft(ctx, cluster, ci)
}

// tasksLeft reports the drain of the DRAINING container instance ci from its tasks (ecsdrain.Drainer.Status).
func (p ECSPlatform) tasksLeft(ctx context.Context, cluster string, ci ecsdrain.ContainerInstance) (model.DrainProgress, error) {
	st, err := p.Drainer.Status(ctx, cluster, ci)
	if err != nil {
		return model.DrainProgress{}, err
	}
	detail := fmt.Sprintf("%d task(s) not yet STOPPED (%v)", st.Remaining, st.ByLastStatus)
	if st.Standalone > 0 { // ECS never moves these; they are never counted as drained
		detail += fmt.Sprintf("; %d of them standalone (started by no service, e.g. RunTask or AWS Batch): ECS does not move them, they must end by themselves", st.Standalone)
	}
	return model.DrainProgress{Drained: st.Drained, Remaining: st.Remaining, Detail: detail, Started: true}, nil
}

// seenContainerInstance returns the container instance the view saw for instanceID, and whether it saw one.
func seenContainerInstance(instanceID string, seen model.NodeState) (ecsdrain.ContainerInstance, bool) {
	if !seen.Registered || seen.Name == "" {
		return ecsdrain.ContainerInstance{}, false
	}
	return ecsdrain.ContainerInstance{ARN: seen.Name, EC2InstanceID: instanceID, Status: seen.Status}, true
}

// StartDrainFound implements FoundDrainer: UpdateContainerInstancesState on the container instance the look
// described (found), without describing it again, and the drain's progress. A drain this call starts has moved
// no task yet: while ECS counts a task running or pending on the instance (found.Tasks, daemon-service tasks
// included) it reports the drain under way and leaves the listing of the tasks (ListTasks x2, DescribeTasks)
// to the next look. With no task counted it lists them now (field case C8: stopping tasks count in neither),
// so an empty instance is drained in this look; one whose only tasks are daemon-service tasks is drained at
// the next. found already DRAINING is checked at once. A container instance ECS no longer knows (MISSING:
// deregistered since the look; the instance may have registered again under a new ARN) is found afresh
// (StartDrain, DrainStatus).
func (p ECSPlatform) StartDrainFound(ctx context.Context, cluster, instanceID string, found model.NodeState) (model.DrainProgress, error) {
	ci, ok := seenContainerInstance(instanceID, found)
	if !ok {
		return p.startAfresh(ctx, cluster, instanceID)
	}
	err := p.Drainer.StartDrainFound(ctx, cluster, ci)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return p.startAfresh(ctx, cluster, instanceID)
	}
	if err != nil {
		return model.DrainProgress{}, err
	}
	started := ci.Status != ecsdrain.StatusDraining
	ci.Status = ecsdrain.StatusDraining
	node := found
	node.Status, node.Draining = ecsdrain.StatusDraining, true
	if started && found.Tasks > 0 {
		return model.DrainProgress{Started: true, Node: node,
			Detail: fmt.Sprintf("DRAINING set; ECS counts %d task(s) running or pending, daemon tasks included; the tasks are listed from the next look", found.Tasks)}, nil
	}
	prog, err := p.tasksLeft(ctx, cluster, ci)
	prog.Node = node
	return prog, err
}

// startAfresh finds the instance's container instance again, starts its drain and checks it.
func (p ECSPlatform) startAfresh(ctx context.Context, cluster, instanceID string) (model.DrainProgress, error) {
	if err := p.StartDrain(ctx, cluster, instanceID); err != nil {
		return model.DrainProgress{}, err
	}
	return p.DrainStatus(ctx, cluster, instanceID)
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

// ClusterRoom is implemented by platforms that can tell whether the rest of a cluster can take the tasks of an
// instance about to be drained (ECSPlatform).
type ClusterRoom interface {
	// Room reports the room the other container instances of cluster have for the tasks of instanceID, and the
	// other DRAINING container instances of the cluster (ecsdrain.Room). An instance without a container
	// instance returns an error wrapping ecsdrain.ErrNotRegistered.
	Room(ctx context.Context, cluster, instanceID string) (ecsdrain.Room, error)
}

// Room implements ClusterRoom.
func (p ECSPlatform) Room(ctx context.Context, cluster, instanceID string) (ecsdrain.Room, error) {
	return p.Drainer.Room(ctx, cluster, instanceID)
}
