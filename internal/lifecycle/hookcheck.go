package lifecycle

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// MissingHooks returns what a managed group lacks for safe terminations: without a terminating lifecycle
// hook of its own (ECS's managed draining hook aside), scale-in, rebalancing and instance refresh terminate
// instances without the agent draining them first. The answer is a sentence for status and logs, or "".
func MissingHooks(ctx context.Context, api awsapi.AutoScaling, group string) (string, error) {
	out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	if err != nil {
		return "", fmt.Errorf("describing lifecycle hooks of %s: %w", group, err)
	}
	ecsDrains := false
	for _, h := range out.LifecycleHooks {
		name := aws.ToString(h.LifecycleHookName)
		if name == ECSManagedDrainingHookName {
			ecsDrains = true
			continue
		}
		if aws.ToString(h.LifecycleTransition) == "autoscaling:EC2_INSTANCE_TERMINATING" {
			return "", nil
		}
	}
	if ecsDrains {
		return "", nil // ECS drains every terminating instance itself
	}
	return "no terminating lifecycle hook: scale-in, rebalancing and instance refresh terminate instances " +
		"without a drain (docs/deploy.md: add one that notifies the agent's queue)", nil
}
