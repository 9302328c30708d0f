package lifecycleaction

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// hookDrainTimeout returns the drain deadline of a terminating action of hook (Policy.DrainTimeout, capped at
// the hook's providers.HookDrainLimit), from the hooks cache; Policy.DrainTimeout when the hook cannot be described.
func (h *Hooks) hookDrainTimeout(ctx context.Context, group, hook string) time.Duration {
	hooks, err := h.groupHooks(ctx, group, false)
	if err != nil {
		h.Log.Warn("describing lifecycle hook failed; the drain deadline is --drain-timeout", zap.String(logging.Group, group),
			zap.String(logging.LifecycleHook, hook), zap.Error(err))
		return h.Policy.DrainTimeout
	}
	info, ok := hooks[hook]
	if !ok || info.global <= 0 {
		return h.Policy.DrainTimeout
	}
	return min(h.Policy.DrainTimeout, providers.HookDrainLimit(info.global))
}

// HookCheck is what CheckOwnedHooks found about a managed group's lifecycle hooks.
type HookCheck struct {
	// Missing says what the group lacks for drained terminations ("" when the group has a terminating hook or ECS drains it).
	Missing string
	// Capped says, per terminating hook whose global timeout is too short for drainTimeout, that its drains
	// are cut at the hook's limit (providers.HookDrainLimit); empty when none is.
	Capped []string
	// Heartbeat is the shortest HeartbeatTimeout among the group's hooks of the agent's own (HookOwned; ECS's
	// managed draining hook aside, ECS works on it), Auto Scaling's default 3600 s for a hook that reports
	// none; zero when the group has none (set by CheckOwnedHooks only). The lifecycle sweep of an event-driven
	// agent looks at least three times within it (agent, hooksweep.go).
	Heartbeat time.Duration
}

// Note is the status note of the check: Missing and Capped in one sentence ("" when all is well).
func (c HookCheck) Note() string {
	return strings.Join(append([]string{c.Missing}[:min(1, len(c.Missing))], c.Capped...), "; ")
}

func checkHooks(hooks []model.GroupHook, drainTimeout time.Duration) HookCheck {
	var c HookCheck
	terminating, ecsDrains := false, false
	for _, lh := range hooks {
		name := lh.Name
		if name == model.ECSManagedDrainingHookName {
			ecsDrains = true
			continue
		}
		if lh.Transition != "autoscaling:EC2_INSTANCE_TERMINATING" {
			continue
		}
		terminating = true
		heartbeat := providers.DefaultHeartbeatTimeout
		if lh.HeartbeatTimeout != 0 {
			heartbeat = lh.HeartbeatTimeout
		}
		global := lh.GlobalTimeout
		if global == 0 {
			global = providers.HookGlobalTimeout(heartbeat, nil)
		}
		if limit := providers.HookDrainLimit(global); drainTimeout > limit {
			c.Capped = append(c.Capped, fmt.Sprintf("--drain-timeout %s is longer than lifecycle hook %s allows (global timeout %s = min(100 x HeartbeatTimeout %s, 48h)): its drains end at %s; raise its HeartbeatTimeout to at least %s or lower --drain-timeout",
				drainTimeout, name, global, heartbeat, limit, neededHeartbeat(drainTimeout)))
		}
	}
	if !terminating && !ecsDrains {
		c.Missing = missingHookNote
	}
	return c
}

// neededHeartbeat is the smallest HeartbeatTimeout (whole seconds) whose hook lets a drain of d finish
// (providers.HookDrainLimit(min(100 x heartbeat, 48h)) >= d); 48h/100 when no hook can.
func neededHeartbeat(d time.Duration) time.Duration {
	global := time.Duration(float64(d) / 0.9) // the margin is a tenth while that is at most 30 minutes
	if global/10 > providers.GlobalTimeoutMarginCap {
		global = d + providers.GlobalTimeoutMarginCap
	}
	global = min(global, providers.MaxGlobalTimeout)
	return time.Duration(math.Ceil(global.Seconds()/100)) * time.Second
}
