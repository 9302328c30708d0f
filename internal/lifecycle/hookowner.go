package lifecycle

import (
	"fmt"
	"net/url"
	"strings"
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
