package model

import (
	"fmt"
	"slices"
	"strings"
)

// TagStrategy names how a group's instances are replaced: "auto" (default) and "refresh" roll by instance
// refresh (engine/rollout_refresh.go), the only strategy. The values of older agents ("surge", "drain-first",
// "capacity-provider") are accepted and also roll by instance refresh, with a status warning
// (DeprecatedStrategyNote).
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
	// Hooks are the group's lifecycle hooks as the one DescribeLifecycleHooks of the traits answered: a rollout
	// by instance refresh checks its launching and terminating hooks on them (RefreshHooks) without asking again.
	Hooks []GroupHook
}

// deprecatedStrategies are the TagStrategy values of older agents, whose strategies wrote desired capacity.
var deprecatedStrategies = []string{"surge", "drain-first", "capacity-provider"}

// ChooseStrategy returns the strategy for a group: refresh (one instance refresh, which needs the agent's
// launching lifecycle hook and a terminating hook that drains: the agent's, or ECS's managed draining hook; a
// group without them waits with a reason naming the missing hook). Groups ECS managed scaling owns roll by
// refresh too: the refresh replaces the instances ECS protects from scale-in, ECS keeps the size, and the
// services' Availability Zone rebalancing (the default of services ECS creates) moves displaced tasks back to
// the zone of each new instance (docs/ecs.md). The tag values of older agents' strategies roll by refresh as
// well (DeprecatedStrategyNote); any other value is an error naming the valid ones.
func ChooseStrategy(tag string, _ GroupTraits) (string, error) {
	t := strings.ToLower(tag)
	if t == StrategyRefresh || t == "" || t == "auto" || slices.Contains(deprecatedStrategies, t) {
		return StrategyRefresh, nil
	}
	return "", fmt.Errorf("tag %s=%q: want refresh or auto", TagStrategy, tag)
}

// DeprecatedStrategyNote is the status warning of a group tagged with the strategy of an older agent (surge,
// drain-first, capacity-provider; "" for any other tag): the tag no longer has an effect, the group rolls by
// instance refresh, which needs the agent's launching and terminating lifecycle hooks.
func DeprecatedStrategyNote(tag string) string {
	if t := strings.ToLower(tag); slices.Contains(deprecatedStrategies, t) {
		return fmt.Sprintf("tag %s=%s has no effect any more (that strategy wrote desired capacity beside the group's "+
			"other writers): the group rolls by instance refresh, which needs the agent's launching and terminating "+
			"lifecycle hooks (docs/deploy.md): remove the tag", TagStrategy, t)
	}
	return ""
}

// StrategyRefresh replaces instances by one instance refresh (engine/rollout_refresh.go). Chosen by TagStrategy for
// groups without ECS managed scaling.
const StrategyRefresh = "refresh"
