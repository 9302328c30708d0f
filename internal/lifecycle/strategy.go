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
	// displaced tasks need, then terminates it explicitly. The default for ECS capacity-provider groups with
	// managed instance draining (ECS drains on termination, Auto Scaling launches the replacement); for other
	// capacity-provider groups only by tag: with room to spare it shrinks the group (issue #18, field case C23),
	// which StrategyCapacityProvider (capacityprovider.go) does not.
	StrategyDrainFirst = "drain-first"
)

// TagStrategy overrides the automatic choice: "surge" (deprecated), "drain-first", "capacity-provider",
// "refresh" (plain ECS groups and EKS self-managed node groups: rollout_refresh.go) or "auto" (default).
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
// draining hook; a group without them waits with a reason naming the missing hook), except for groups ECS
// managed scaling owns: capacity-provider, or drain-first with ECS managed draining, unless tagged refresh.
// The tags surge (deprecated: SurgeDeprecatedNote), drain-first and capacity-provider choose the older
// strategies, which write desired capacity. An unknown tag value is an error naming the accepted ones.
func ChooseStrategy(tag string, tr GroupTraits) (string, error) {
	switch strings.ToLower(tag) {
	case StrategySurge:
		return StrategySurge, nil
	case StrategyDrainFirst:
		return StrategyDrainFirst, nil
	case StrategyCapacityProvider:
		return StrategyCapacityProvider, nil
	case StrategyRefresh:
		return StrategyRefresh, nil
	case "", "auto":
		// ECS managed scaling decides the size of its groups from CapacityProviderReservation: under a refresh
		// it scales in a replacement the service's spread left empty (docs/ecs.md), which field case C23 does
		// not accept, so those groups keep their strategy until the tag chooses refresh.
		if tr.ECSManagedScaling && !tr.ECSManagedDraining {
			return StrategyCapacityProvider, nil
		}
		if tr.ECSManagedScaling {
			return StrategyDrainFirst, nil
		}
		return StrategyRefresh, nil
	}
	return "", fmt.Errorf("tag %s=%q: want refresh, auto, capacity-provider, drain-first or surge (deprecated)", TagStrategy, tag)
}

// SurgeDeprecatedNote is the status warning of a group tagged patch-agent/strategy=surge ("" for any other
// tag): the surge raises and lowers desired capacity with absolute writes (SetDesiredCapacity has no
// compare-and-set), so beside an autoscaler it can leave the group below what others set. The capacity-provider
// and drain-first strategies are the defaults of groups ECS managed scaling owns, where ECS is the other writer
// they account for: not deprecated while instance refresh does not keep those groups' size (docs/ecs.md).
func SurgeDeprecatedNote(tag string) string {
	if !strings.EqualFold(tag, StrategySurge) {
		return ""
	}
	return fmt.Sprintf("tag %s=%s is deprecated and will be removed (the surge writes desired capacity beside the group's "+
		"other writers): remove the tag to roll by instance refresh once the group has the agent's launching and terminating "+
		"lifecycle hooks (docs/deploy.md)", TagStrategy, StrategySurge)
}
