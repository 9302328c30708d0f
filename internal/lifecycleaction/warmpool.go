package lifecycleaction

import (
	"context"
	"fmt"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// Warm pools (field case C18). Amazon EC2 Auto Scaling User Guide, "Decrease latency for applications with long
// boot times using warm pools" and "Use lifecycle hooks with a warm pool":
//   - an instance launched into the pool waits on the launching hooks in Warmed:Pending:Wait (notification
//     Origin EC2, Destination WarmPool), then stops (or hibernates, or keeps running) in the pool;
//   - leaving the pool for the group it waits again, in Pending:Wait (Origin WarmPool, Destination
//     AutoScalingGroup);
//   - with an instance reuse policy (ReuseOnScaleIn) a scale in returns InService instances to the pool: they
//     wait on the terminating hooks in Warmed:Pending:Wait (Origin AutoScalingGroup, Destination WarmPool);
//   - a pool instance that is terminated waits in Warmed:Terminating:Wait (Origin WarmPool, Destination EC2).
// Amazon ECS Developer Guide, "Configuring pre-initialized instances for your Amazon ECS Auto Scaling group":
// with ECS_WARM_POOLS_CHECK the container agent does not register an instance while it warms, so a launch into
// the pool never becomes healthy in the cluster; an instance that restarts from the pool reconnects with the
// container instance it had, in the status it had.
//
// "Update the instances in a warm pool" (same guide): instances in a warm pool keep the launch template version
// (and AMI) they launched with; a new version applies only to instances launched afterwards. To replace them,
// an instance refresh replaces the warm pool after the group, or the pool's instances are terminated and Auto
// Scaling launches their replacements into the pool from the group's current version. A rollout does the
// former: its instance refresh replaces the pool too.

// warmPoolLaunchNote is the note of a launch into the warm pool completed without a cluster health wait.
const warmPoolLaunchNote = "launched into the warm pool (Warmed:Pending:Wait): the instance stops there and joins no cluster until it leaves the pool"

// undrainReturning puts back in service an instance the agent drained (it holds the instance's drain mark)
// that comes back from the warm pool in Pending:Wait, before its launch action is completed (field case C18):
// ECS ACTIVE (the container agent reconnects with the same, still DRAINING, container instance), EKS uncordon.
// It reports whether it put the instance back; an instance drained by someone else is left as it is (its launch
// action waits for health, and is abandoned at the health deadline).
func (h *Hooks) undrainReturning(ctx context.Context, t model.Target, a events.LifecycleAction, log *zap.Logger) (bool, error) {
	marks, err := h.Store.ListDrainMarks(ctx)
	if err != nil {
		return false, fmt.Errorf("reading drain marks: %w", err)
	}
	for _, m := range marks {
		if m.InstanceID != a.InstanceID || m.Group != a.GroupName {
			continue
		}
		if err := h.undrain(ctx, t, m, "instance the agent drained is back from the warm pool; put back in service before its launch action completes",
			"origin "+a.Origin, false); err != nil {
			return false, err
		}
		return true, nil
	}
	log.Info("instance comes back draining, and not drained by this agent; left as it is")
	return false, nil
}

// poolLook is what AdoptWaiting's last DescribeWarmPool of a group found: when, the pool's size, and whether
// any instance was on its way (not settled in its pool state: it may wait on a hook now or soon).
type poolLook struct {
	at        time.Time
	size      int32
	unsettled bool
}

// poolWaiting returns the instances of the group's warm pool for AdoptWaiting when a look is due
// (poolLookDue), else none; a failed read is logged and tried again next tick.
func (h *Hooks) poolWaiting(ctx context.Context, name string, g astypes.AutoScalingGroup, now time.Time) []model.InstanceView {
	h.mu.Lock()
	last, ok := h.poolLooks[name]
	h.mu.Unlock()
	if ok && !poolLookDue(last, g, now, h.poolLookEvery(ctx, name)) {
		return nil
	}
	pool, err := providers.WarmPoolInstances(ctx, h.AutoScaling, name)
	if err != nil {
		h.Log.Warn("describing the warm pool failed; its waiting instances not looked at this tick", zap.String(logging.Group, name), zap.Error(err))
		return nil
	}
	v := providers.WithWarmPool(model.GroupView{}, pool, nil, nil)
	look := poolLook{at: now, size: int32(len(v.WarmPool))}
	for _, i := range v.WarmPool {
		look.unsettled = look.unsettled || !i.Warmed()
	}
	h.mu.Lock()
	if h.poolLooks == nil {
		h.poolLooks = map[string]poolLook{}
	}
	h.poolLooks[name] = look
	h.mu.Unlock()
	return v.WarmPool
}

// poolLookDue reports whether a group's warm pool may hold an instance that the last look did not account
// for: the description's WarmPoolSize differs from the count the look saw (a launch into the pool, a scale
// in back to it, a termination out of it), the look saw an instance on its way (Warmed:Pending...,
// Warmed:Terminating...), or every (a duration) has passed since it (a settled instance terminated out of the pool keeps
// the pool's size until it is gone). A steady pool is read once per every, not once per tick.
func poolLookDue(last poolLook, g astypes.AutoScalingGroup, now time.Time, every time.Duration) bool {
	return last.unsettled || providers.PoolSize(g) != last.size || now.Sub(last.at) >= every
}

// poolLookEvery is how often a steady warm pool is read again: the shortest adoptAfter of the group's
// hooks (at most a minute), so an action on a settled pool instance is seen as soon as one in the group.
func (h *Hooks) poolLookEvery(ctx context.Context, group string) time.Duration {
	every := time.Minute
	if hooks, err := h.groupHooks(ctx, group, false); err == nil {
		for _, info := range hooks {
			every = min(every, AdoptAfter(info.heartbeat))
		}
	}
	return every
}

// waitTransitions returns the transitions whose hooks an instance in lifecycle state waits on (none: it
// waits on no hook): Pending:Wait launching, Terminating:Wait and ReplacingRootVolume:Wait terminating (an
// instance refresh that replaces root volumes runs the group's terminating hooks: Amazon EC2 Auto Scaling User
// Guide, "Replace root volumes during instance refresh", as confirm's waitStates); in a warm pool Warmed:Pending:Wait
// launching (a launch into the pool) and terminating (a scale in back to a pool that reuses instances waits
// there on the terminating hooks; confirm asks Auto Scaling which one waits, not the group's reuse policy, which
// may have changed while it waits), Warmed:Terminating:Wait terminating.
// Amazon EC2 Auto Scaling User Guide, "Use lifecycle hooks with a warm pool" (lifecycle state transitions).
func waitTransitions(state string) []string {
	switch astypes.LifecycleState(state) {
	case astypes.LifecycleStatePendingWait:
		return []string{events.TransitionLaunching}
	case astypes.LifecycleStateTerminatingWait, astypes.LifecycleStateWarmedTerminatingWait, astypes.LifecycleStateReplacingRootVolumeWait:
		return []string{events.TransitionTerminating}
	case astypes.LifecycleStateWarmedPendingWait:
		return []string{events.TransitionLaunching, events.TransitionTerminating}
	}
	return nil
}
