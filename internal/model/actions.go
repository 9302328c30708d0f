package model

import (
	"fmt"
	"net/url"
	"strings"
	"time"
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
	Action LifecycleAction
	// Platform and Cluster of the group the message names, when the agent manages it ("" otherwise).
	Platform, Cluster string
	At                time.Time
}

// Lifecycle transitions as Auto Scaling names them (Amazon EC2 Auto Scaling API Reference, LifecycleHook:
// LifecycleTransition).
const (
	TransitionLaunching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
	TransitionTerminating = "autoscaling:EC2_INSTANCE_TERMINATING"
)

// ActionReplaceRootVolume is the lifecycle action's "Action" for a root volume replacement (instance refresh
// with ReplaceRootVolume strategy): the instance is not going away, it comes back with a new root volume.
const ActionReplaceRootVolume = "ReplaceRootVolume"

// LifecycleAction is an Auto Scaling lifecycle action that waits for CompleteLifecycleAction.
type LifecycleAction struct {
	GroupName            string `json:"autoScalingGroupName"`
	HookName             string `json:"lifecycleHookName"`
	InstanceID           string `json:"instanceId"`
	Token                string `json:"lifecycleActionToken"`
	Transition           string `json:"lifecycleTransition"`   // TransitionLaunching or TransitionTerminating
	Action               string `json:"action,omitempty"`      // "ReplaceRootVolume" when the instance is not leaving
	Origin               string `json:"origin,omitempty"`      // EC2, AutoScalingGroup, WarmPool
	Destination          string `json:"destination,omitempty"` // EC2, AutoScalingGroup, WarmPool
	NotificationMetadata string `json:"notificationMetadata,omitempty"`
	// SentAt is when SQS accepted the message that carried the action (its SentTimestamp system attribute,
	// set by the consumer; zero when the message had none, or the action did not come by message). It is
	// AWS's fact, not the sender's claim, and the action began no later: the first heartbeat is counted from
	// it (internal/lifecycleaction), so a message received late still gets its heartbeat before the hook's
	// HeartbeatTimeout. Amazon SQS API Reference, ReceiveMessage, MessageSystemAttributeNames: SentTimestamp
	// (epoch milliseconds).
	SentAt time.Time `json:"-"`
}

// Terminating reports whether the action is for an instance leaving service (or being taken out for a root
// volume replacement).
func (l *LifecycleAction) Terminating() bool { return l.Transition == TransitionTerminating }

// InstanceLeaves reports whether the instance goes away for good once the action completes. A
// ReplaceRootVolume action drains the instance but it comes back (field case C14).
func (l *LifecycleAction) InstanceLeaves() bool {
	return l.Terminating() && l.Action != ActionReplaceRootVolume
}

// refreshHookCommand is the CLI command that adds a missing hook of the agent's (docs/deploy.md).
func refreshHookCommand(group, transition string) string {
	name, result := "patch-agent-drain", "CONTINUE"
	if transition == TransitionLaunching {
		name, result = "patch-agent-launch", "ABANDON"
	}
	return fmt.Sprintf("aws autoscaling put-lifecycle-hook --auto-scaling-group-name %s --lifecycle-hook-name %s "+
		"--lifecycle-transition %s --heartbeat-timeout 300 --default-result %s", group, name, transition, result)
}

// RefreshHooks judges a group's lifecycle hooks (DescribeGroupHooks) for a rollout by instance refresh: the
// names of the agent's launching and terminating hooks ("" for a terminating hook when only ECS's managed
// draining hook drains), and "" or the reason the group is not rolled, naming each missing hook with the
// command that adds it. A terminating hook is the agent's or ECS's managed draining hook. With own.QueueURL ""
// (an audit, which does not know the agent's queue) any hook of the right transition counts.
func RefreshHooks(group string, hooks []GroupHook, own HookOwnership) (launching, terminatingHook, missing string) {
	terminating := false
	foreign := map[string][]string{} // transition -> why each hook of it is not the agent's
	for _, h := range hooks {
		if h.Name == ECSManagedDrainingHookName {
			terminating = true // ECS drains each terminating instance on its own hook; the agent only watches
			continue
		}
		if owned, why := HookOwned(h, own); !owned && own.QueueURL != "" {
			foreign[h.Transition] = append(foreign[h.Transition], why)
			continue
		}
		switch h.Transition {
		case TransitionLaunching:
			if launching == "" {
				launching = h.Name
			}
		case TransitionTerminating:
			terminating = true
			if terminatingHook == "" {
				terminatingHook = h.Name
			}
		}
	}
	// A hook of the transition that is not the agent's is named with why: a group tagged TagLifecycleHooks
	// before it had the agent's launching hook lists only the terminating one, and the fix is the tag.
	whyNot := func(transition string) string {
		if len(foreign[transition]) == 0 {
			return ""
		}
		return " (" + strings.Join(foreign[transition], "; ") + ")"
	}
	var lacks []string
	if launching == "" {
		lacks = append(lacks, "no launching lifecycle hook of the agent's (new instances would count as healthy before they serve)"+
			whyNot(TransitionLaunching)+": "+refreshHookCommand(group, TransitionLaunching))
	}
	if !terminating {
		lacks = append(lacks, "no terminating lifecycle hook of the agent's (old instances would be terminated undrained)"+
			whyNot(TransitionTerminating)+": "+refreshHookCommand(group, TransitionTerminating))
	}
	if len(lacks) > 0 {
		missing = "instance refresh needs the agent's lifecycle hooks: " + strings.Join(lacks, "; ") + " (docs/deploy.md)"
	}
	return launching, terminatingHook, missing
}

// Reasons a lifecycle message is rejected: the Reason dimension of the LifecycleMessagesRejected metric and
// of the "Lifecycle Message Rejected" notification (field case C19). A message is a claim; Auto Scaling's
// DescribeAutoScalingInstances and DescribeLifecycleHooks are the facts.
const (
	// RejectGroupNotManaged: the message names a group the agent does not manage (field case C3; routine on
	// a shared queue, so logged at info and not notified).
	RejectGroupNotManaged = "GroupNotManaged"
	// RejectInstanceNotFound: neither Auto Scaling nor EC2 knows the instance.
	RejectInstanceNotFound = "InstanceNotFound"
	// RejectInstanceNotInGroup: Auto Scaling places the instance in another group, or in none.
	RejectInstanceNotInGroup = "InstanceNotInGroup"
	// RejectUnknownHook: the group has no lifecycle hook of that name for that transition.
	RejectUnknownHook = "UnknownHook"
	// RejectLifecycleState: the instance is not in the wait state the action implies (InService, say).
	RejectLifecycleState = "LifecycleStateMismatch"
	// RejectForeignHook: the hook is another tool's (HookOwned: it notifies another target, or the group's
	// TagLifecycleHooks leaves it out), which waits for that tool; routine, so logged at info.
	RejectForeignHook = "ForeignHook"
)
