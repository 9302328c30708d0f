package lifecycleaction

import (
	"context"
	"fmt"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// verdict is what Auto Scaling says of a lifecycle action.
type verdict int

const (
	verdictConfirmed verdict = iota // the instance waits in the group, on that hook, in the action's wait state
	verdictGone                     // the instance is already leaving or terminated: nothing waits (C5)
	verdictNotYet                   // the instance is on its way into the wait state: look again
	verdictRejected                 // not confirmed: drain nothing (C19)
)

// confirmation is Auto Scaling's answer; the detail of a confirmed action is the wait state it described.
type confirmation struct {
	verdict        verdict
	reason, detail string
}

// waitStates are the Auto Scaling lifecycle states in which an instance waits on a lifecycle action of each
// transition (Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling instance lifecycle", "Lifecycle
// state transitions for instances in a warm pool", and "Replace root volumes during instance refresh": an
// instance whose root volume an instance refresh replaces waits in ReplacingRootVolume:Wait on the group's
// terminating hooks). "Use lifecycle hooks with a warm pool": with an instance reuse policy, an instance that a
// scale in returns to the warm pool waits on the terminating hooks in Warmed:Pending:Wait (field case C18).
var waitStates = map[string][]astypes.LifecycleState{
	events.TransitionTerminating: {astypes.LifecycleStateTerminatingWait, astypes.LifecycleStateWarmedTerminatingWait,
		astypes.LifecycleStateReplacingRootVolumeWait, astypes.LifecycleStateWarmedPendingWait},
	events.TransitionLaunching: {astypes.LifecycleStatePendingWait, astypes.LifecycleStateWarmedPendingWait},
}

// beforeWait are the states an instance passes through just before it waits on an action of the transition:
// the notification can overtake the state Auto Scaling describes, so the message is looked at again.
var beforeWait = map[string][]astypes.LifecycleState{
	events.TransitionTerminating: {astypes.LifecycleStateTerminating, astypes.LifecycleStateWarmedTerminating,
		astypes.LifecycleStateReplacingRootVolume, astypes.LifecycleStateWarmedPending},
	events.TransitionLaunching: {astypes.LifecycleStatePending, astypes.LifecycleStateWarmedPending},
}

// pastWait are the states of an instance whose wait is over and that is leaving or gone.
var pastWait = []astypes.LifecycleState{astypes.LifecycleStateTerminatingProceed, astypes.LifecycleStateTerminated,
	astypes.LifecycleStateWarmedTerminatingProceed, astypes.LifecycleStateWarmedTerminated}

func stateIn(s string, list []astypes.LifecycleState) bool {
	for _, l := range list {
		if string(l) == s {
			return true
		}
	}
	return false
}

// confirm asks Auto Scaling whether the action the message claims is real: one DescribeAutoScalingInstances
// call for the instance (its group and lifecycle state), the group's hooks from the hooks cache (asked again
// once when the cache does not know the hook), and — only for an instance Auto Scaling no longer lists — one
// DescribeInstances to tell a terminated instance (C5) from one that never existed (C3), and — only for a
// terminating action of an instance in Warmed:Pending:Wait — one RecordLifecycleActionHeartbeat by instance and
// hook. An error means nothing is known; the caller keeps the message.
func (h *Hooks) confirm(ctx context.Context, a events.LifecycleAction) (confirmation, error) {
	inst, found, err := h.actions().Instance(ctx, a.InstanceID)
	if err != nil {
		return confirmation{}, fmt.Errorf("confirming lifecycle action %s with Auto Scaling: %w", a.Token, err)
	}
	if !found {
		switch exists, err := h.instanceState(ctx, a.InstanceID); {
		case err != nil:
			return confirmation{}, err
		case exists == instanceTerminated:
			return confirmation{verdict: verdictGone, detail: "instance already terminated"}, nil
		case exists == instanceUnknown:
			return confirmation{verdictRejected, model.RejectInstanceNotFound,
				fmt.Sprintf("neither Auto Scaling nor EC2 knows instance %s", a.InstanceID)}, nil
		}
		return confirmation{verdictRejected, model.RejectInstanceNotInGroup,
			fmt.Sprintf("instance %s is in no Auto Scaling group", a.InstanceID)}, nil
	}
	if g := inst.Group; g != a.GroupName {
		return confirmation{verdictRejected, model.RejectInstanceNotInGroup,
			fmt.Sprintf("instance %s is in group %s, not %s", a.InstanceID, g, a.GroupName)}, nil
	}
	hooks, err := h.groupHooks(ctx, a.GroupName, false)
	if err == nil {
		if _, ok := hooks[a.HookName]; !ok {
			hooks, err = h.groupHooks(ctx, a.GroupName, true) // added since it was cached?
		}
	}
	if err != nil {
		return confirmation{}, fmt.Errorf("confirming lifecycle action %s: %w", a.Token, err)
	}
	if hook, ok := hooks[a.HookName]; !ok || hook.transition != a.Transition {
		return confirmation{verdictRejected, model.RejectUnknownHook,
			fmt.Sprintf("group %s has no %s lifecycle hook named %q", a.GroupName, a.Transition, a.HookName)}, nil
	}
	st := inst.LifecycleState
	if a.Terminating() && st == string(astypes.LifecycleStateWarmedPendingWait) {
		// Warmed:Pending:Wait is a launch into the pool (on the launching hooks) or, in a pool with an instance
		// reuse policy, a scale in back to it (on the terminating hooks). Auto Scaling's own answer tells which:
		// a heartbeat by instance and this terminating hook is accepted only while an action waits on it
		// (active; it restarts that action's timeout, which the agent then drives). The group's reuse policy is
		// not asked: it may have been removed while a real scale in waits, and a launch into a pool that reuses
		// instances would pass it. A claim that nothing backs is rejected.
		switch active, err := h.active(ctx, a); {
		case err != nil:
			return confirmation{}, fmt.Errorf("confirming lifecycle action %s: %w", a.Token, err)
		case !active:
			return confirmation{verdictRejected, model.RejectLifecycleState,
				fmt.Sprintf("instance %s is %s on its way into the warm pool of %s, and Auto Scaling has no action of it waiting on terminating hook %s", a.InstanceID, st, a.GroupName, a.HookName)}, nil
		}
	}
	switch {
	case stateIn(st, waitStates[a.Transition]):
		return confirmation{verdict: verdictConfirmed, detail: st}, nil
	case stateIn(st, beforeWait[a.Transition]):
		return confirmation{verdict: verdictNotYet, detail: "instance is " + st}, nil
	case a.Terminating() && stateIn(st, pastWait):
		return confirmation{verdict: verdictGone, detail: "instance already " + st + ": no lifecycle action waits"}, nil
	}
	return confirmation{verdictRejected, model.RejectLifecycleState,
		fmt.Sprintf("instance %s is %s, not in a wait state of %s", a.InstanceID, st, a.Transition)}, nil
}

// conflictingTransition handles a message that names an action in progress (rec: confirmed, not completed)
// with a transition other than the record's. The message is confirmed on its own (confirm: the hook's
// transition from DescribeLifecycleHooks, the instance's lifecycle state from DescribeAutoScalingInstances):
// one Auto Scaling does not confirm is rejected (HookIgnored: the message is deleted, one warning,
// Observer.LifecycleMessageRejected) without closing rec, so the real action's drain or launch goes on; one it
// confirms (the hook was replaced by one of the other transition) or may yet confirm waits (HookInProgress:
// the message is kept) until rec's action ends, and is then taken as a new action. Nothing is drained,
// undrained, heartbeated or completed for the message. An Auto Scaling error is returned with the message
// kept.
func (h *Hooks) conflictingTransition(ctx context.Context, t model.Target, a events.LifecycleAction, rec state.Hook, log *zap.Logger) (HookOutcome, error) {
	c, err := h.confirm(ctx, a)
	if err != nil {
		return HookInProgress, err
	}
	if c.verdict != verdictRejected {
		log.Info("lifecycle message with another transition than the action in progress on its instance and hook; kept until that action ends",
			zap.String(logging.Reason, "in progress: "+rec.Transition+"; "+c.detail))
		return HookInProgress, nil
	}
	c.detail += fmt.Sprintf(" (the %s action of instance %s on hook %s is in progress)", rec.Transition, a.InstanceID, a.HookName)
	return HookIgnored, h.reject(ctx, t, a, rec, false, c, log)
}

// reject tells of an action Auto Scaling did not confirm: one warning, the observer (metric, notification).
// A record an earlier agent wrote before confirming is closed, without counting it as completed.
func (h *Hooks) reject(ctx context.Context, t model.Target, a events.LifecycleAction, rec state.Hook, known bool, c confirmation, log *zap.Logger) error {
	if c.reason == model.RejectForeignHook {
		log.Info("lifecycle action of another tool's hook; nothing drained or completed, message deleted",
			zap.String(logging.LifecycleHook, a.HookName), zap.String(logging.Reason, c.reason+": "+c.detail))
	} else {
		log.Warn("lifecycle message not confirmed by Auto Scaling; nothing drained, message deleted",
			zap.String(logging.Reason, c.reason+": "+c.detail))
	}
	if known {
		rec.State, rec.Note, rec.CompletedAt = state.HookCompleted, "rejected: "+c.detail, h.Clock.Now()
		if _, err := h.putHook(ctx, rec); err != nil {
			return fmt.Errorf("closing unconfirmed lifecycle action %s: %w", a.Token, err)
		}
	}
	if h.Observer != nil {
		h.Observer.LifecycleMessageRejected(model.Rejection{Reason: c.reason, Detail: c.detail, Action: a, Platform: t.Platform,
			Cluster: t.Cluster, At: h.Clock.Now()})
	}
	return nil
}
