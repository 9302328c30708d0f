package lifecycleaction

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// missingHookNote is the sentence of a group without a terminating hook.
const missingHookNote = "no terminating lifecycle hook: scale-in, rebalancing and instance refresh terminate instances " +
	"without a drain (docs/deploy.md: add one that notifies the agent's queue)"

// CheckOwnedHooks is CheckHooks with hook ownership (HookOwned) applied: only the group's own terminating hooks
// count, since another tool's hook (aws-node-termination-handler, a backup hook, a hook notifying an SNS topic)
// is rejected as ForeignHook on every action and drains nothing for the agent. It also reports every hook the
// group's TagLifecycleHooks names that the group does not have (a typo, a deleted hook): with the tag present,
// only the hooks it names are the agent's, so a misspelt name leaves the group with none. Both go into
// HookCheck.Missing (a status note and a warning, like a group without any hook); Capped considers the agent's
// own hooks only. Hooks are read once with DescribeLifecycleHooks (Amazon EC2 Auto Scaling API Reference,
// DescribeLifecycleHooks), into the cache the lifecycle actions' later looks read (a first look reads them
// afresh).
// Errors: the DescribeLifecycleHooks error, wrapped.
func (h *Hooks) CheckOwnedHooks(ctx context.Context, group string, drainTimeout time.Duration, o model.HookOwnership) (HookCheck, error) {
	hooks, _, err := h.describeHooks(ctx, group)
	if err != nil {
		return HookCheck{}, err
	}
	return checkOwnedHooks(hooks, drainTimeout, o), nil
}

func checkOwnedHooks(hooks []model.GroupHook, drainTimeout time.Duration, o model.HookOwnership) HookCheck {
	var own []model.GroupHook
	var foreign []string
	for _, h := range hooks {
		if owned, why := model.HookOwned(h, o); owned || h.Name == model.ECSManagedDrainingHookName {
			own = append(own, h) // ECS's managed draining hook still drains (checkHooks counts it)
		} else if h.Transition == "autoscaling:EC2_INSTANCE_TERMINATING" {
			foreign = append(foreign, why)
		}
	}
	c := checkHooks(own, drainTimeout)
	for _, h := range own {
		if h.Name == model.ECSManagedDrainingHookName {
			continue
		}
		beat := h.HeartbeatTimeout
		if beat <= 0 {
			beat = providers.DefaultHeartbeatTimeout
		}
		if c.Heartbeat == 0 || beat < c.Heartbeat {
			c.Heartbeat = beat
		}
	}
	var notes []string
	if c.Missing != "" && len(foreign) > 0 {
		notes = append(notes, "no terminating lifecycle hook of the agent's ("+strings.Join(foreign, "; ")+
			"): every scale-in, rebalancing and instance refresh termination is another tool's, rejected as ForeignHook and never drained by the agent")
	} else if c.Missing != "" {
		notes = append(notes, c.Missing)
	}
	for _, n := range o.Listed {
		if !slices.ContainsFunc(hooks, func(h model.GroupHook) bool { return h.Name == n }) {
			notes = append(notes, fmt.Sprintf("tag %s names lifecycle hook %q, which the group does not have", model.TagLifecycleHooks, n))
		}
	}
	c.Missing = strings.Join(notes, "; ")
	return c
}
