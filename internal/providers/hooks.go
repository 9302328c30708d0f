package providers

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/patch-agent/patch-agent/internal/model"
)

// HookDescriber is the one call DescribeGroupHooks makes: awsapi.AutoScaling and the audit's read-only
// awsapi.ReadOnlyAutoScaling have it.
type HookDescriber interface {
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
}

// DescribeGroupHooks reads every lifecycle hook of group with one DescribeLifecycleHooks call (Amazon EC2 Auto
// Scaling API Reference: DescribeLifecycleHooks without LifecycleHookNames describes all of them). It is the
// one reader of lifecycle hooks: the strategy's traits, the missing-hook check and the lifecycle action
// handler (which caches its answers per group) all ask it. Errors are Auto Scaling's, wrapped with the group.
func DescribeGroupHooks(ctx context.Context, api HookDescriber, group string) ([]model.GroupHook, error) {
	out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	if err != nil {
		return nil, fmt.Errorf("describing lifecycle hooks of %s: %w", group, err)
	}
	hooks := make([]model.GroupHook, 0, len(out.LifecycleHooks))
	for _, h := range out.LifecycleHooks {
		gh := model.GroupHook{Name: aws.ToString(h.LifecycleHookName), Transition: aws.ToString(h.LifecycleTransition),
			NotificationTargetARN: aws.ToString(h.NotificationTargetARN)}
		if h.HeartbeatTimeout != nil {
			gh.HeartbeatTimeout = time.Duration(*h.HeartbeatTimeout) * time.Second
		}
		heartbeat := gh.HeartbeatTimeout
		if heartbeat == 0 {
			heartbeat = DefaultHeartbeatTimeout
		}
		gh.GlobalTimeout = HookGlobalTimeout(heartbeat, h.GlobalTimeout)
		hooks = append(hooks, gh)
	}
	return hooks, nil
}

// defaultHeartbeatTimeout is Auto Scaling's default HeartbeatTimeout of a lifecycle hook (3600 s), used
// when the hook cannot be described.
const DefaultHeartbeatTimeout = time.Hour

// maxGlobalTimeout is the longest an instance can stay in a lifecycle wait state: Amazon EC2 Auto Scaling API
// Reference, "LifecycleHook" (GlobalTimeout: 48 hours or 100 times HeartbeatTimeout, whichever is smaller) and
// User Guide, "Amazon EC2 Auto Scaling lifecycle hooks" (heartbeats extend the wait up to the global timeout).
const MaxGlobalTimeout = 48 * time.Hour

// HookGlobalTimeout returns a lifecycle hook's global timeout: the GlobalTimeout DescribeLifecycleHooks
// reports (seconds) when it is given, else min(100 x heartbeat, 172800 s).
func HookGlobalTimeout(heartbeat time.Duration, globalSeconds *int32) time.Duration {
	if globalSeconds != nil && *globalSeconds > 0 {
		return time.Duration(*globalSeconds) * time.Second
	}
	return min(100*heartbeat, MaxGlobalTimeout)
}

// HookDrainLimit returns how long the agent may drain for a lifecycle action of a hook whose global timeout
// is global, counted from when the instance entered the wait state: the global timeout less a margin of a
// tenth of it, at most 30 minutes, for the notification's way through the queue and the last heartbeat
// interval. Past the global timeout Auto Scaling ends the action itself (its DefaultResult) whatever the
// heartbeats, so a drain deadline beyond the limit would let the instance go without the agent completing
// the action or saying so.
func HookDrainLimit(global time.Duration) time.Duration {
	return global - min(global/10, GlobalTimeoutMarginCap)
}

// GlobalTimeoutMarginCap bounds the margin HookDrainLimit keeps before a hook's global timeout.
const GlobalTimeoutMarginCap = 30 * time.Minute
