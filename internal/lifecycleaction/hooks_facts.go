package lifecycleaction

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

type instanceExistence int

const (
	instanceRunning instanceExistence = iota
	instanceTerminated
	instanceUnknown
)

// failedHealthCheck reports whether Auto Scaling reports the instance unhealthy (DescribeAutoScalingInstances'
// HealthStatus): it leaves because its health check failed, by Auto Scaling's health check replacement or
// while the refresh's termination of it waits, and putting it back in service would serve from an instance
// that fails its health check.
func (h *Hooks) failedHealthCheck(ctx context.Context, id string) (bool, error) {
	inst, found, err := h.actions().Instance(ctx, id)
	if err != nil {
		return false, fmt.Errorf("reading the health status of %s at its drain deadline: %w", id, err)
	}
	return found && inst.Unhealthy(), nil
}

// instanceState asks EC2 whether the instance exists and is not yet shutting down.
func (h *Hooks) instanceState(ctx context.Context, id string) (instanceExistence, error) {
	inst, found, err := h.actions().EC2Instance(ctx, id)
	switch {
	case awsapi.IsInstanceNotFound(err):
		return instanceUnknown, nil
	case err != nil:
		return instanceRunning, fmt.Errorf("describing instance %s: %w", id, err)
	case !found:
		return instanceUnknown, nil
	case inst.ShuttingDownOrTerminated():
		return instanceTerminated, nil
	}
	return instanceRunning, nil
}

// originWarmPool is a lifecycle action's Origin for an instance leaving the group's warm pool (Amazon EC2 Auto
// Scaling User Guide, "Use lifecycle hooks with a warm pool": Origin WarmPool, Destination AutoScalingGroup).
const originWarmPool = "WarmPool"

// outdatedPoolLaunch reports whether an instance leaving the warm pool for the group runs an AMI other than the
// target of the group's rollout by instance refresh under way (Replacing or Verifying): such an instance is
// abandoned, and Auto Scaling launches another, so that no old-AMI instance enters service from the pool once a
// rollout started. Instances in a warm pool keep the AMI they launched with, and a refresh replaces the pool only
// after the group's InService instances (User Guide, "Update the instances in a warm pool"); whether a scale out
// during the refresh draws them is not documented. fromPool says the action's message named Origin WarmPool; an
// action found waiting without its message (adopted: its origin unknown) counts as one from the pool only while
// the rollout's refresh is InProgress, when every other launch uses the refresh's desired configuration, the
// target AMI (User Guide, "Instance refresh": scale outs during a refresh launch with the desired
// configuration). why says so for the action's record.
func (h *Hooks) outdatedPoolLaunch(ctx context.Context, t model.Target, instanceID string, fromPool bool) (bool, string, error) {
	r, err := h.rolloutOf(ctx, t.Group)
	if err != nil || r.Strategy != model.StrategyRefresh || r.TargetImageID == "" ||
		(r.Phase != state.PhaseReplacing && r.Phase != state.PhaseVerifying) {
		return false, "", nil // no record (or none readable now): the launch is held for health as any other
	}
	if !fromPool && (r.Refresh == nil || r.Refresh.Status != providers.RefreshInProgress) {
		return false, "", nil
	}
	image, err := h.imageOf(ctx, instanceID)
	if err != nil || image == "" || image == r.TargetImageID {
		return false, "", err
	}
	return true, "from the warm pool on " + image + " while the rollout to " + r.TargetImageID +
		" replaces the group: abandoned so that no old AMI enters service; Auto Scaling launches another", nil
}

// rolloutOf returns the group's rollout record: the one the agent keeps between looks (RolloutKept), else
// the store's.
func (h *Hooks) rolloutOf(ctx context.Context, group string) (state.Rollout, error) {
	if h.RolloutKept != nil {
		if r, ok := h.RolloutKept(group); ok {
			return r, nil
		}
	}
	return h.Store.GetRollout(ctx, group)
}

// imageOf returns the AMI instanceID runs ("" when EC2 does not describe it).
func (h *Hooks) imageOf(ctx context.Context, instanceID string) (string, error) {
	inst, _, err := h.actions().EC2Instance(ctx, instanceID)
	if err != nil {
		return "", fmt.Errorf("describing instance %s: %w", instanceID, err)
	}
	return inst.ImageID, nil
}

// haltedRefreshLaunch reports whether a launch waiting on the agent's launching hook is one of a halted
// instance refresh's bad AMI: the rollout of its group (strategy refresh) halted with the target AMI, and the
// instance runs it. Such a launch is abandoned at once rather than at the health deadline, so the cancel or
// rollback that waits for the launches in flight goes on (API Reference, CancelInstanceRefresh and
// RollbackInstanceRefresh). why says so for the action's record. The record is the one this process keeps
// for the group (RolloutKept: as its last look read or wrote it, so a halt of its own is seen at once) when it
// keeps one, else the store's; a halt another replica wrote after taking the group over is then seen once
// this process's next look at the group reads the store, and until then the health deadline abandons the launch.
func (h *Hooks) haltedRefreshLaunch(ctx context.Context, t model.Target, instanceID string) (bool, string, error) {
	if st, err := model.ChooseStrategy(t.Policy.Strategy, model.GroupTraits{}); err != nil || st != model.StrategyRefresh {
		return false, "", nil
	}
	r, err := h.rolloutOf(ctx, t.Group)
	if err != nil || r.Refresh == nil || r.Refresh.Halt == "" || r.TargetImageID == "" ||
		(r.Phase != state.PhaseRollingBack && r.Phase != state.PhaseHalted && r.Phase != state.PhaseReplacing) {
		return false, "", nil // no record (or none readable now): the health deadline still holds
	}
	image, err := h.imageOf(ctx, instanceID)
	if err != nil {
		return false, "", err
	}
	if image == r.TargetImageID {
		return true, "the group's instance refresh halted (" + providers.Truncate(r.Refresh.Halt, 200) + "): a launch of " + r.TargetImageID + " is abandoned", nil
	}
	return false, "", nil
}

// groupHooks returns the lifecycle hooks of a group by name, from DescribeLifecycleHooks (all hooks of the
// group in one call), cached per group: hooks rarely change. refresh asks again (a hook the cache does not
// know may have been added since).
func (h *Hooks) groupHooks(ctx context.Context, group string, refresh bool) (map[string]hookInfo, error) {
	h.mu.Lock()
	cached, ok := h.hooks[group]
	h.mu.Unlock()
	if ok && !refresh {
		return cached, nil
	}
	_, hooks, err := h.describeHooks(ctx, group)
	return hooks, err
}

// describeHooks reads the group's lifecycle hooks (DescribeLifecycleHooks), keeps them in the cache groupHooks
// reads, and returns them as described and by name. A failed read keeps the cache as it was.
func (h *Hooks) describeHooks(ctx context.Context, group string) ([]model.GroupHook, map[string]hookInfo, error) {
	described, err := providers.DescribeGroupHooks(ctx, h.AutoScaling, group)
	if err != nil {
		return nil, nil, err
	}
	return described, h.keepHooks(group, described), nil
}

// keepHooks caches the group's hooks as just described and returns them by name.
func (h *Hooks) keepHooks(group string, described []model.GroupHook) map[string]hookInfo {
	hooks := make(map[string]hookInfo, len(described))
	for _, lh := range described {
		info := hookInfo{transition: lh.Transition, heartbeat: providers.DefaultHeartbeatTimeout, target: lh.NotificationTargetARN}
		if lh.HeartbeatTimeout != 0 {
			info.heartbeat = lh.HeartbeatTimeout
		}
		info.global = lh.GlobalTimeout
		hooks[lh.Name] = info
	}
	h.mu.Lock()
	if h.hooks == nil {
		h.hooks, h.hooksAt, h.described = map[string]map[string]hookInfo{}, map[string]time.Time{}, map[string][]model.GroupHook{}
	}
	h.hooks[group], h.hooksAt[group], h.described[group] = hooks, h.Clock.Now(), slices.Clone(described)
	h.mu.Unlock()
	return hooks
}

// KnownHooks returns the group's lifecycle hooks as this process last described them (DescribeLifecycleHooks:
// the periodic hook check, the first look at each lifecycle action) and when; ok is false when it never did.
// It makes no call.
func (h *Hooks) KnownHooks(group string) (hooks []model.GroupHook, at time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok = h.hooksAt[group]
	return slices.Clone(h.described[group]), at, ok
}

// hooksReadBefore reports whether the group's cached hooks were read before at (or never).
func (h *Hooks) hooksReadBefore(group string, at time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	read, ok := h.hooksAt[group]
	return !ok || read.Before(at)
}

// foreignHook says why the action's hook is not the agent's (HookOwned: its notification target, the group's
// TagLifecycleHooks), or "" when it is the agent's or the group has no hook of that name (confirm rejects
// that as UnknownHook). refresh describes the group's hooks again first; a hook the cache lacks is asked
// again once. An error means nothing is known: the caller keeps the message.
func (h *Hooks) foreignHook(ctx context.Context, t model.Target, a events.LifecycleAction, refresh bool) (string, error) {
	hooks, err := h.groupHooks(ctx, a.GroupName, refresh)
	if err == nil && !refresh {
		if _, ok := hooks[a.HookName]; !ok {
			hooks, err = h.groupHooks(ctx, a.GroupName, true)
		}
	}
	if err != nil {
		return "", fmt.Errorf("checking whose lifecycle hook %s of %s is: %w", a.HookName, a.GroupName, err)
	}
	info, ok := hooks[a.HookName]
	if !ok {
		return "", nil
	}
	_, why := model.HookOwned(model.GroupHook{Name: a.HookName, Transition: info.transition, NotificationTargetARN: info.target},
		model.HookOwnership{QueueURL: h.QueueURL, Listed: t.LifecycleHooks})
	return why, nil
}

// ecsDrains reports whether the group has ECS's managed draining hook (from the hooks cache: a stale answer
// errs towards a drain the agent would have done anyway).
func (h *Hooks) ecsDrains(ctx context.Context, group string) bool {
	hooks, err := h.groupHooks(ctx, group, false)
	if err != nil {
		h.Log.Warn("describing lifecycle hooks failed; assuming no ECS managed draining", zap.String(logging.Group, group), zap.Error(err))
		return false
	}
	_, ok := hooks[model.ECSManagedDrainingHookName]
	return ok
}

// heartbeatTimeout returns the hook's HeartbeatTimeout from the hooks cache; Auto Scaling's default (3600 s)
// when the hooks cannot be described.
func (h *Hooks) heartbeatTimeout(ctx context.Context, group, hook string) time.Duration {
	hooks, err := h.groupHooks(ctx, group, false)
	if err != nil {
		h.Log.Warn("describing lifecycle hook failed; assuming the default heartbeat timeout", zap.String(logging.Group, group),
			zap.String(logging.LifecycleHook, hook), zap.Error(err))
		return providers.DefaultHeartbeatTimeout
	}
	if info, ok := hooks[hook]; ok {
		return info.heartbeat
	}
	return providers.DefaultHeartbeatTimeout
}
