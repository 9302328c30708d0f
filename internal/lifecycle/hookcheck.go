package lifecycle

import (
	"context"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// MissingHooks returns what a managed group lacks for safe terminations: without a terminating lifecycle
// hook of its own (ECS's managed draining hook aside), scale-in, rebalancing and instance refresh terminate
// instances without the agent draining them first. The answer is a sentence for status and logs, or "".
func MissingHooks(ctx context.Context, api awsapi.AutoScaling, group string) (string, error) {
	hooks, err := DescribeGroupHooks(ctx, api, group)
	if err != nil {
		return "", err
	}
	ecsDrains := false
	for _, h := range hooks {
		if h.Name == ECSManagedDrainingHookName {
			ecsDrains = true
			continue
		}
		if h.Transition == "autoscaling:EC2_INSTANCE_TERMINATING" {
			return "", nil
		}
	}
	if ecsDrains {
		return "", nil // ECS drains every terminating instance itself
	}
	return "no terminating lifecycle hook: scale-in, rebalancing and instance refresh terminate instances " +
		"without a drain (docs/deploy.md: add one that notifies the agent's queue)", nil
}
