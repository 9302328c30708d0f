package providers

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Groups is the provider of the Auto Scaling reads the rollout engine decides on: it owns the SDK inputs, so the
// engine (internal/engine) never builds one (TestProductImportRules). The engine writes
// nothing to a group itself: Auto Scaling's instance refresh (Refreshes) replaces its instances. Errors are Auto
// Scaling's, unwrapped; the caller adds what it was doing.
type Groups interface {
	// Traits reads a group's traits: its tags (as described) and its lifecycle hooks (one DescribeLifecycleHooks),
	// which it returns with them (GroupTraits.Hooks) for the refresh's hook check.
	Traits(ctx context.Context, group string, tags map[string]string) (model.GroupTraits, error)
}

// AutoScalingGroups is the Groups provider over the Auto Scaling API.
type AutoScalingGroups struct {
	API awsapi.AutoScaling
}

var _ Groups = AutoScalingGroups{}

// Traits implements Groups.
func (g AutoScalingGroups) Traits(ctx context.Context, group string, tags map[string]string) (model.GroupTraits, error) {
	return DescribeTraits(ctx, g.API, group, tags)
}

// TemplateProvider is the provider of launch template versions the rollout engine decides on (Templates over
// EC2 and Auto Scaling).
type TemplateProvider interface {
	// Resolve returns the version a reference resolves to now ("$Default" and "$Latest" as Auto Scaling does).
	Resolve(ctx context.Context, ref state.LaunchTemplateRef) (TemplateVersion, error)
	// EnsureVersion returns a version of ref's template that is ref's version with ImageId = imageID, creating
	// it unless the agent already did (idempotent after a crash).
	EnsureVersion(ctx context.Context, ref state.LaunchTemplateRef, imageID, why string) (TemplateVersion, error)
}

var _ TemplateProvider = Templates{}

// DescribeTraits reads a group's traits: its tags (from the group as described) and its lifecycle hooks, with
// one DescribeLifecycleHooks whose answer it keeps in the traits (Hooks).
func DescribeTraits(ctx context.Context, api awsapi.AutoScaling, group string, tags map[string]string) (model.GroupTraits, error) {
	var tr model.GroupTraits
	_, tr.ECSManagedScaling = tags[model.TagECSManaged]
	hooks, err := DescribeGroupHooks(ctx, api, group)
	if err != nil {
		return tr, err
	}
	tr.Hooks = hooks
	for _, h := range hooks {
		if h.Name == model.ECSManagedDrainingHookName {
			tr.ECSManagedDraining = true
		}
	}
	return tr, nil
}
