package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// Replacement strategies.
const (
	// StrategySurge launches the replacement first (desired+1), then drains and terminates the old
	// instance: capacity never drops. Only by tag, and deprecated (SurgeDeprecatedNote): it writes desired
	// capacity beside the group's other writers; plain groups roll by StrategyRefresh.
	StrategySurge = "surge"
	// StrategyDrainFirst drains the old instance first and lets ECS managed scaling add the capacity the
	// displaced tasks need, then terminates it explicitly. Only by tag, and deprecated (DeprecatedStrategyNote);
	// with room to spare it shrinks a capacity-provider group, which StrategyCapacityProvider
	// (capacityprovider.go), also deprecated, does not.
	StrategyDrainFirst = "drain-first"
)

// TagStrategy overrides the automatic choice, "refresh" (rollout_refresh.go): "auto" (default) and "refresh"
// roll by instance refresh; "surge", "drain-first" and "capacity-provider" are deprecated.
const TagStrategy = "patch-agent/strategy"

// Names ECS gives to what it manages on an Auto Scaling group (Amazon ECS Developer Guide: "Amazon ECS
// capacity providers for EC2 workloads" — ECS tags groups it scales with AmazonECSManaged; "Safely stop
// Amazon ECS workloads running on EC2 instances" — managed instance draining adds its own terminating hook).
const (
	TagECSManaged              = "AmazonECSManaged"
	ECSManagedDrainingHookName = "ecs-managed-draining-termination-hook"
)

// GroupTraits are the facts about a group that decide how its instances are replaced.
type GroupTraits struct {
	// ECSManagedScaling: a capacity provider with managed scaling sets the group's desired capacity.
	ECSManagedScaling bool
	// ECSManagedDraining: ECS drains every instance on termination through its own lifecycle hook; the agent
	// never sets DRAINING itself and never completes ECS's hook.
	ECSManagedDraining bool
}

// DescribeTraits reads a group's traits: its tags (from the group as described) and its lifecycle hooks.
func DescribeTraits(ctx context.Context, api awsapi.AutoScaling, group string, tags map[string]string) (GroupTraits, error) {
	var tr GroupTraits
	_, tr.ECSManagedScaling = tags[TagECSManaged]
	hooks, err := DescribeGroupHooks(ctx, api, group)
	if err != nil {
		return tr, err
	}
	for _, h := range hooks {
		if h.Name == ECSManagedDrainingHookName {
			tr.ECSManagedDraining = true
		}
	}
	return tr, nil
}

// ChooseStrategy returns the strategy for a group: the tag's choice, else refresh (one instance refresh, which
// needs the agent's launching lifecycle hook and a terminating hook that drains: the agent's, or ECS's managed
// draining hook; a group without them waits with a reason naming the missing hook). Groups ECS managed scaling
// owns roll by refresh too: the refresh replaces the instances ECS protects from scale-in, ECS keeps the size,
// and the services' Availability Zone rebalancing (the default of services ECS creates) moves displaced tasks
// back to the zone of each new instance (docs/ecs.md). The tags surge, drain-first and capacity-provider
// choose the older strategies, which write desired capacity and are deprecated (DeprecatedStrategyNote). An
// unknown tag value is an error naming the valid ones.
func ChooseStrategy(tag string, _ GroupTraits) (string, error) {
	switch strings.ToLower(tag) {
	case StrategySurge:
		return StrategySurge, nil
	case StrategyDrainFirst:
		return StrategyDrainFirst, nil
	case StrategyCapacityProvider:
		return StrategyCapacityProvider, nil
	case StrategyRefresh, "", "auto":
		return StrategyRefresh, nil
	}
	return "", fmt.Errorf("tag %s=%q: want refresh or auto; capacity-provider, drain-first and surge are deprecated", TagStrategy, tag)
}

// DeprecatedStrategyNote is the status warning of a group tagged with one of the strategies that write desired
// capacity (surge, drain-first, capacity-provider; "" for any other tag): SetDesiredCapacity has no
// compare-and-set, so beside an autoscaler or ECS managed scaling those strategies can leave the group below
// what the others set. Removing the tag rolls the group by instance refresh.
func DeprecatedStrategyNote(tag string) string {
	switch t := strings.ToLower(tag); t {
	case StrategySurge, StrategyDrainFirst, StrategyCapacityProvider:
		return fmt.Sprintf("tag %s=%s is deprecated and will be removed (it writes desired capacity beside the group's "+
			"other writers): remove the tag to roll by instance refresh once the group has the agent's launching and terminating "+
			"lifecycle hooks (docs/deploy.md)", TagStrategy, t)
	}
	return ""
}
