package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
)

// GroupHook is one lifecycle hook of a group as DescribeLifecycleHooks reports it.
type GroupHook struct {
	Name string
	// Transition is "autoscaling:EC2_INSTANCE_TERMINATING" or "autoscaling:EC2_INSTANCE_LAUNCHING".
	Transition string
	// HeartbeatTimeout is the hook's HeartbeatTimeout; zero when Auto Scaling reports none (its default is
	// 3600 s: Amazon EC2 Auto Scaling API Reference, LifecycleHook).
	HeartbeatTimeout time.Duration
	// GlobalTimeout is how long an instance may stay in the hook's wait state, heartbeats or not
	// (HookGlobalTimeout: the reported GlobalTimeout, else min(100 x HeartbeatTimeout, 48 h)).
	GlobalTimeout time.Duration
	// NotificationTargetARN is the hook's notification target (an SQS queue or SNS topic ARN); "" when the
	// hook has none and its actions reach consumers only as EventBridge events (Amazon EC2 Auto Scaling API
	// Reference, LifecycleHook; HookOwned decides on it).
	NotificationTargetARN string
}

// HookDescriber is the one call DescribeGroupHooks makes: awsapi.AutoScaling and the audit's read-only
// awsapi.ReadOnlyAutoScaling have it.
type HookDescriber interface {
	DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error)
}

// DescribeGroupHooks reads every lifecycle hook of group with one DescribeLifecycleHooks call (Amazon EC2 Auto
// Scaling API Reference: DescribeLifecycleHooks without LifecycleHookNames describes all of them). It is the
// one reader of lifecycle hooks: the strategy's traits, the missing-hook check and the lifecycle action
// handler (which caches its answers per group) all ask it. Errors are Auto Scaling's, wrapped with the group.
func DescribeGroupHooks(ctx context.Context, api HookDescriber, group string) ([]GroupHook, error) {
	out, err := api.DescribeLifecycleHooks(ctx, &autoscaling.DescribeLifecycleHooksInput{AutoScalingGroupName: aws.String(group)})
	if err != nil {
		return nil, fmt.Errorf("describing lifecycle hooks of %s: %w", group, err)
	}
	hooks := make([]GroupHook, 0, len(out.LifecycleHooks))
	for _, h := range out.LifecycleHooks {
		gh := GroupHook{Name: aws.ToString(h.LifecycleHookName), Transition: aws.ToString(h.LifecycleTransition),
			NotificationTargetARN: aws.ToString(h.NotificationTargetARN)}
		if h.HeartbeatTimeout != nil {
			gh.HeartbeatTimeout = time.Duration(*h.HeartbeatTimeout) * time.Second
		}
		heartbeat := gh.HeartbeatTimeout
		if heartbeat == 0 {
			heartbeat = defaultHeartbeatTimeout
		}
		gh.GlobalTimeout = HookGlobalTimeout(heartbeat, h.GlobalTimeout)
		hooks = append(hooks, gh)
	}
	return hooks, nil
}
