package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/state"
)

// StrategyCapacityProvider replaces the instances of an ECS capacity-provider group with managed scaling
// (field case C23; docs/ecs.md): surge first, drain the outdated instance of the Availability Zone
// the replacement landed in once the rest of the cluster can take its tasks and no other container instance of
// the cluster is DRAINING, then terminate it with decrement. The group keeps its size and its AZ spread.
//
// It relies on the Amazon ECS Developer Guide, "Automatically manage Amazon ECS capacity with cluster auto
// scaling" (managed scaling scales in only after the CapacityProviderReservation metric stayed below target for
// 15 consecutive minutes, so the empty replacement outlives the few minutes before the drain moves tasks onto
// it) and "Managed termination protection" (ECS protects the instances that run non-daemon tasks from scale-in,
// so the replacement is kept once tasks land). The surge may be scaled away anyway (a drain held by a gate or by
// another drain of the cluster for 15 minutes): the rollout then surges again (capacityProviderResurge); it
// never counts that as a replacement done nor as capacity gone.
const StrategyCapacityProvider = "capacity-provider"

// surgeSpacing is how long the next surge waits after a replacement ended: two CapacityProviderReservation
// periods (Amazon ECS publishes the metric once a minute; Developer Guide, "Automatically manage Amazon ECS
// capacity with cluster auto scaling"), so that one datapoint sees the group at M = N (100 %) and ECS's count of
// 15 consecutive datapoints below target restarts. Without it, surges chained across replacements keep the
// metric below target for longer than 15 minutes, and ECS scales an empty replacement in.
const surgeSpacing = 2 * time.Minute

// capacityProviderHoldSurge returns why the next replacement may not surge yet ("" when it may).
func capacityProviderHoldSurge(r state.Rollout, now time.Time) string {
	if r.Strategy != StrategyCapacityProvider || !now.Before(r.NextSurgeAt) {
		return ""
	}
	return fmt.Sprintf("letting ECS managed scaling see the group at target before the next surge (until %s)", r.NextSurgeAt.UTC().Format(time.RFC3339))
}

// maxResurges bounds how often one replacement surges again after ECS scaled its replacement in.
const maxResurges = 4

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

// capacityProviderChooseOld is called once the replacement nw serves: it chooses the instance the replacement
// stands in for. Normally the oldest outdated serving instance of nw's Availability Zone, so that the
// termination with decrement leaves every zone with the count it had. When nw's zone has no outdated instance
// left (Auto Scaling launched into a zone already on the target), the original pick stays and Rebalance is
// set: it is terminated without decrement, so Auto Scaling launches its successor into its own zone, the one
// with the fewest instances (Amazon EC2 Auto Scaling User Guide, "Balance across Availability Zones"). For a
// GiveBack replacement (the surge going back), the old instance is the most recently launched serving instance
// of the zone with the most instances besides nw.
func capacityProviderChooseOld(v GroupView, r *state.Rollout, nw InstanceView) {
	cur := r.Current
	if cur.GiveBack {
		perAZ := map[string]int{}
		for _, i := range v.Instances {
			if i.InService() {
				perAZ[i.AvailabilityZone]++
			}
		}
		var pick *InstanceView
		for _, i := range v.Instances {
			if i.ID == nw.ID || !i.Serving() || i.ImageID != r.TargetImageID {
				continue
			}
			if pick == nil || perAZ[i.AvailabilityZone] > perAZ[pick.AvailabilityZone] ||
				perAZ[i.AvailabilityZone] == perAZ[pick.AvailabilityZone] && !i.LaunchTime.Before(pick.LaunchTime) {
				pick = &i
			}
		}
		if pick != nil {
			cur.OldInstanceID, cur.ContainerInstanceARN = pick.ID, pick.Node.Name
		}
		return
	}
	for _, i := range v.Instances { // oldest first
		if i.AvailabilityZone == nw.AvailabilityZone && i.Serving() && i.ImageID != r.TargetImageID && !slices.Contains(r.Replaced, i.ID) {
			cur.OldInstanceID, cur.ContainerInstanceARN, cur.Rebalance = i.ID, i.Node.Name, false
			return
		}
	}
	cur.Rebalance = true
}

// capacityProviderResurge handles a replacement that ECS managed scaling scaled in before it was used: while the
// rollout waits for its replacement, desired capacity is back at (or below) DesiredBefore and no instance
// launched since the surge is left. The rollout goes back to the surge step (at most maxResurges times, then it
// halts): it never treats the lost replacement as capacity it may take away. ok reports whether it acted.
func (o *Orchestrator) capacityProviderResurge(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, bool, error) {
	cur := r.Current
	if r.Strategy != StrategyCapacityProvider || v.Desired > cur.DesiredBefore {
		return r, false, nil
	}
	for _, i := range v.Instances {
		if !slices.Contains(cur.InstancesBefore, i.ID) && !i.Leaving() {
			return r, false, nil // a replacement is still on its way
		}
	}
	if cur.Resurges >= maxResurges {
		next, err := o.halt(ctx, r, fmt.Sprintf("ECS managed scaling scaled the replacement for %s in %d times before it could take tasks",
			cur.OldInstanceID, cur.Resurges), true)
		return next, true, err
	}
	// Desired capacity is ECS's decision now: the new surge is one above it, and whatever launches next is the
	// replacement.
	ids := make([]string, 0, len(v.Instances))
	for _, i := range v.Instances {
		ids = append(ids, i.ID)
	}
	cur.Resurges++
	cur.Step, cur.StepStartedAt, cur.NewInstanceID = state.StepSurge, o.Clock.Now(), ""
	cur.DesiredBefore, cur.InstancesBefore, cur.SurgeTo = v.Desired, ids, 0
	next, err := o.save(ctx, r, fmt.Sprintf("desired capacity back at %d without a replacement (ECS managed scaling scaled it in): surging again", v.Desired))
	return next, true, err
}

// capacityProviderDrainGate returns why the old instance may not be drained yet ("" when it may): another
// container instance of the cluster is DRAINING (one drain per cluster, whichever group it belongs to: the
// cluster is looked at afresh, so two targets reconciled one after the other cannot both start a drain), or
// the other ACTIVE container instances of the cluster — the replacement included, whatever group they belong
// to — lack the CPU or memory for the old instance's service tasks. A drain that waits for room longer than
// the drain deadline halts the rollout, without a rollback: the AMI is not at fault.
func (o *Orchestrator) capacityProviderDrainGate(ctx context.Context, t Target, platform Platform, r state.Rollout, old InstanceView) (string, bool, error) {
	if r.Strategy != StrategyCapacityProvider {
		return "", false, nil
	}
	rp, ok := platform.(ClusterRoom)
	if !ok {
		return "", false, nil
	}
	room, err := rp.Room(ctx, t.Cluster, old.ID)
	if errors.Is(err, ecsdrain.ErrNotRegistered) {
		return "", false, nil // nothing to drain
	}
	if err != nil {
		return "", false, err
	}
	if len(room.OtherDraining) >= max(o.Policy.ClusterBudget, 1) {
		// The per-cluster budget (rollout_budget.go) as ECS sees it now: drains the store does not know of (an
		// operator's, a lifecycle action's) count too.
		return fmt.Sprintf("per-cluster budget of %d: container instance(s) %s of cluster %s DRAINING; next step: drain %s",
			max(o.Policy.ClusterBudget, 1), strings.Join(room.OtherDraining, ", "), t.Cluster, old.ID), false, nil
	}
	if !room.Fits() {
		reason := fmt.Sprintf("the rest of cluster %s has room for %d of the %d task(s) of %s; next step: drain it",
			t.Cluster, room.Tasks-room.Unplaced, room.Tasks, old.ID)
		return reason, o.Clock.Now().Sub(r.Current.StepStartedAt) > o.Policy.DrainTimeout, nil
	}
	return "", false, nil
}

// capacityProviderTerminated closes a replacement whose old instance was just terminated. A Rebalance
// termination kept desired capacity (Auto Scaling launches into the old instance's zone): the surge goes back
// through a GiveBack replacement, which waits for that launch and then drains and terminates, with decrement,
// one instance of the zone that has one too many.
func (o *Orchestrator) capacityProviderTerminated(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	if !cur.Rebalance {
		r.NextSurgeAt = o.Clock.Now().Add(surgeSpacing)
		return o.retire(ctx, r, "old instance terminating")
	}
	ids := make([]string, 0, len(v.Instances))
	for _, i := range v.Instances {
		ids = append(ids, i.ID)
	}
	r.Replaced = append(r.Replaced, cur.OldInstanceID)
	r.Current = &state.Replacement{Step: state.StepReplacementHealthy, OldInstanceID: cur.OldInstanceID, DesiredBefore: cur.DesiredBefore,
		InstancesBefore: ids, StepStartedAt: o.Clock.Now(), GiveBack: true}
	return o.save(ctx, r, fmt.Sprintf("old instance %s terminating without decrement so Auto Scaling launches into %s; the surge goes back once that instance serves",
		cur.OldInstanceID, zoneOf(v, cur.OldInstanceID)))
}

func zoneOf(v GroupView, id string) string {
	if i, ok := v.Instance(id); ok {
		return i.AvailabilityZone
	}
	return "its zone"
}

// errOr returns err when set, else def.
func errOr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}
