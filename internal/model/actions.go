package model

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/events"
)

// TagLifecycleHooks names, comma-separated, the lifecycle hooks of a group that are the agent's
// ("patch-agent-drain,patch-agent-launch"). Without it every hook of the group without a notification target,
// or whose target is the agent's queue, is the agent's (HookOwned). Set it on a group whose other hooks have
// no notification target either (another tool's EventBridge rule, say), which the agent cannot tell apart.
const TagLifecycleHooks = "patch-agent/lifecycle-hooks"

// ParseLifecycleHooksTag returns the hook names the group's TagLifecycleHooks lists (spaces around a name are
// trimmed, empty names dropped), or nil when the group has no such tag. A tag present with no name in it
// gives an empty, non-nil list: no hook of the group is the agent's.
func ParseLifecycleHooksTag(tags map[string]string) []string {
	v, ok := tags[TagLifecycleHooks]
	if !ok {
		return nil
	}
	names := []string{}
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// HookOwnership is what decides whose a lifecycle hook of a group is.
type HookOwnership struct {
	// QueueURL is the agent's SQS queue (`--queue-url`, https://sqs.<region>.amazonaws.com/<account>/<name>).
	QueueURL string
	// Listed are the hook names of the group's TagLifecycleHooks; nil when the group has no such tag.
	Listed []string
}

// HookOwned reports whether hook h of a group is the agent's: only then does the agent drain for its actions
// and complete them. A hook that is not the agent's belongs to another tool (aws-node-termination-handler, a
// backup or bootstrap hook, ECS managed draining) that waits for its own actions: completing one would end
// that tool's wait early. The rule, on what DescribeLifecycleHooks reports (Amazon EC2 Auto Scaling API
// Reference, LifecycleHook: NotificationTargetARN; User Guide, "Configure a notification target for lifecycle
// notifications": a hook notifies its SQS queue or SNS topic, and every hook's actions are also EventBridge
// events, which the stack's lifecycle rule sends to the agent's queue):
//   - ECS's managed draining hook (ECSManagedDrainingHookName) is ECS's (field case C17);
//   - a hook whose notification target is not the agent's queue (an SNS topic, another queue) is foreign;
//   - when the group carries TagLifecycleHooks, only the hooks it lists are the agent's;
//   - otherwise a hook whose target is the agent's queue, or that has none (actions routed by EventBridge),
//     is the agent's.
//
// When the hook is not the agent's, why says so in a sentence.
func HookOwned(h GroupHook, o HookOwnership) (owned bool, why string) {
	if h.Name == ECSManagedDrainingHookName {
		return false, fmt.Sprintf("hook %q is ECS's managed draining hook", h.Name)
	}
	if h.NotificationTargetARN != "" && !IsQueue(h.NotificationTargetARN, o.QueueURL) {
		return false, fmt.Sprintf("hook %q notifies %s, not the agent's queue", h.Name, h.NotificationTargetARN)
	}
	if o.Listed != nil {
		for _, n := range o.Listed {
			if n == h.Name {
				return true, ""
			}
		}
		return false, fmt.Sprintf("hook %q is not listed in the group's tag %s=%s", h.Name, TagLifecycleHooks, strings.Join(o.Listed, ","))
	}
	return true, ""
}

// IsQueue reports whether arn (arn:<partition>:sqs:<region>:<account>:<name>) names the queue of queueURL
// (<scheme>://<host>/<account>/<name>): same account and name, and same region when the host names one
// (sqs.<region>.amazonaws.com, <region>.queue.amazonaws.com). An SNS topic or anything unparsable is not.
func IsQueue(arn, queueURL string) bool {
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" {
		return false
	}
	region, account, name := parts[3], parts[4], parts[5]
	u, err := url.Parse(queueURL)
	if err != nil {
		return false
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(path) != 2 || path[0] != account || path[1] != name {
		return false
	}
	host := strings.Split(u.Hostname(), ".")
	switch {
	case len(host) >= 3 && host[0] == "sqs" && host[2] == "amazonaws":
		return host[1] == region
	case len(host) >= 3 && host[1] == "queue" && host[2] == "amazonaws":
		return host[0] == region
	}
	return true // an emulator's host names no region
}

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

// Lifecycle action results (Amazon EC2 Auto Scaling API Reference: CompleteLifecycleAction).
const (
	ResultContinue = "CONTINUE"
	ResultAbandon  = "ABANDON"
)

// ActionKey is the key of the one record (state.Hook.Token) of the lifecycle action that instance waits on
// for hook of group, whether its message or the reconcile loop (AdoptWaiting) found it first. An instance waits
// on at most one action per hook at a time; a later action on the same instance and hook (a warm pool cycle,
// another root volume replacement) reuses the record once it is completed.
func ActionKey(group, instance, hook string) string {
	return "asg/" + group + "/" + instance + "/" + hook
}

// heldDrainPrefix starts the halt of a refresh whose drain the agent held at its deadline (heldDrainHalt).
const heldDrainPrefix = "drain of "

// heldDrainHalt is the halt reason of a refresh whose drain of instance on hook the agent held: what blocked
// it (note, the action's record note), that the instance is back in service but stays in Terminating:Wait,
// and the way forward.
func HeldDrainHalt(group, instance, hook, note string) string {
	return heldDrainPrefix + instance + " on lifecycle hook " + hook + " held: " + note + "; fix what blocks the drain, then " +
		"`patch-agent retry " + group + "` (the drain starts again with a fresh deadline), or `patch-agent rollback " + group + "`"
}

// isHeldDrainHalt reports whether a refresh halt is for a drain held at its deadline: such a halt never rolls
// back, and its cancel does not wait for the held termination (it would wait until the hook's global timeout).
func IsHeldDrainHalt(halt string) bool {
	return strings.HasPrefix(halt, heldDrainPrefix) && strings.Contains(halt, " held: ")
}

// Rejection is a lifecycle message that Auto Scaling did not confirm: nothing was drained or cordoned, and the
// message was deleted as ignored.
type Rejection struct {
	// Reason is one of the Reject* constants; Detail says it in a sentence naming what AWS answered.
	Reason, Detail string
	// Action is what the message claimed.
	Action events.LifecycleAction
	// Platform and Cluster of the group the message names, when the agent manages it ("" otherwise).
	Platform, Cluster string
	At                time.Time
}
