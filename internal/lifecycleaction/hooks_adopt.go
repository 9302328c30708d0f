package lifecycleaction

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// record reads the record of action a, under ActionKey: one strongly consistent GetItem. Errors: the store's,
// wrapped.
//
// A record keyed by the message's lifecycle action token instead of ActionKey is not read: looking there too
// would cost every action's first look a second GetItem. An action whose record is keyed that way is then found
// without a record: it is confirmed with Auto Scaling again (invariant 9) and driven under its ActionKey.
// Setting an instance DRAINING twice changes nothing, a drain check finds it as it is, and of two completions
// Auto Scaling accepts one and answers the other "No active Lifecycle Action found" (C6).
func (h *Hooks) record(ctx context.Context, a events.LifecycleAction) (state.Hook, bool, error) {
	k := model.ActionKey(a.GroupName, a.InstanceID, a.HookName)
	rec, err := h.getHook(ctx, k)
	switch {
	case err == nil:
		return rec, true, nil
	case !errors.Is(err, state.ErrNotFound):
		return state.Hook{}, false, fmt.Errorf("reading lifecycle action %s: %w", k, err)
	}
	return state.Hook{}, false, nil
}

// AdoptAfter is how long an instance waits on one of the agent's hooks, as the ticks' group descriptions
// show it, without any record of the action before the reconcile loop takes the action up itself: a third of
// the hook's HeartbeatTimeout, at most a minute. Its message normally arrives within seconds; the first
// heartbeat, sent at once, then still comes before the timeout, which is at least 30 s after the action began
// (a tick or so before it was first seen).
// The lifecycle sweep of an event-driven agent runs often enough for it (agent/hooksweep.go sweepInterval).
func AdoptAfter(heartbeat time.Duration) time.Duration { return min(heartbeat/3, time.Minute) }

// hookInfoMaxAge is how old the cached hooks of a group may be when an instance is first seen waiting on one
// without its message (adopt): older ones are read again. Short: a stack update that lowered the
// HeartbeatTimeout (180 s to 30 s, say) must be seen before the wait for the action's message (AdoptAfter)
// is decided on the old one; at most one DescribeLifecycleHooks per group in that time, and only while such an
// instance is first seen.
const hookInfoMaxAge = 10 * time.Second

// AdoptWaiting takes up lifecycle actions whose message has not come: instances that the tick's
// DescribeAutoScalingGroups (d.Groups, no further call) shows in Terminating:Wait or Pending:Wait in a managed
// group, on a hook of the agent's (HookOwned) with no record under ActionKey, seen so on two ticks at least
// adoptAfter apart. A ReceiveMessage answer lost on its way leaves the message invisible for the visibility
// timeout, longer than a short HeartbeatTimeout: without this the action would time out and the instance
// terminate undrained. The group's description is Auto Scaling's own answer on the instance's group and wait
// state, so the action is recorded confirmed (invariant 9), marked Adopted, and driven here every tick like a
// held message: drained, heartbeated at once and then at a third of the HeartbeatTimeout, and completed by
// InstanceId and LifecycleHookName (Amazon EC2 Auto Scaling API Reference, CompleteLifecycleAction and
// RecordLifecycleActionHeartbeat: "either the token or the instance ID"). Its message, when it comes, finds
// the record: held while the action is driven here, then deleted as done — never a second drain. A record its
// message drives whose owner has stopped (died after recording it) is heartbeated and taken over by the rule
// of takeOver (hooks_takeover.go; docs/state.md, "Lifecycle action records left by their owner").
// Warm pool instances (field case C18) are not in the group's description: for a group whose description
// has a WarmPoolConfiguration, DescribeWarmPool (WarmPoolInstances) is read when the pool may hold an instance
// the last read did not account for (poolLookDue), and its instances in Warmed:Pending:Wait (a launch into the
// pool on the launching hooks; with an instance reuse policy, a scale in back to the pool on the terminating
// hooks: both are looked at whatever the group's reuse policy says now, and Auto Scaling's answer to a
// heartbeat by instance and hook (confirm) tells which one waits) or
// Warmed:Terminating:Wait (terminating hooks) are taken up the same way; an instance leaving the pool waits in
// Pending:Wait in the group's description. Amazon EC2 Auto Scaling User Guide, "Warm pool instance lifecycle
// state transitions"; API Reference, "DescribeWarmPool". Errors of one action (or of one group's warm pool
// read) are logged and do not stop the others.
func (h *Hooks) AdoptWaiting(ctx context.Context, d providers.Discovered) {
	now := h.Clock.Now()
	seen := map[string]waitSeen{}
	for _, name := range d.Names() {
		t, g := d.Targets[name], d.Groups[name]
		view := providers.BuildView(g, nil, nil, nil, now)
		candidates := view.Instances
		if providers.HasWarmPool(g) {
			candidates = append(candidates, h.poolWaiting(ctx, name, g, now)...)
		}
		for _, inst := range candidates {
			transitions := waitTransitions(inst.LifecycleState)
			if len(transitions) == 0 {
				continue
			}
			hooks, err := h.groupHooks(ctx, name, false)
			if err != nil {
				h.Log.Warn("describing lifecycle hooks failed; waiting instances not looked at this tick", zap.String(logging.Group, name), zap.Error(err))
				break
			}
			names := make([]string, 0, len(hooks))
			for n := range hooks {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, hook := range names {
				info := hooks[hook]
				if !slices.Contains(transitions, info.transition) {
					continue
				}
				transition := info.transition
				if owned, _ := model.HookOwned(model.GroupHook{Name: hook, Transition: info.transition, NotificationTargetARN: info.target},
					model.HookOwnership{QueueURL: h.QueueURL, Listed: t.LifecycleHooks}); !owned {
					continue
				}
				a := events.LifecycleAction{GroupName: name, HookName: hook, InstanceID: inst.ID, Transition: transition}
				key := model.ActionKey(name, inst.ID, hook)
				if err := h.adopt(ctx, t, a, inst.LifecycleState, key, AdoptAfter(info.heartbeat), seen, now); err != nil {
					h.Log.Warn("lifecycle action found without its message: look failed; retrying next tick", zap.String(logging.Group, name),
						zap.String(logging.InstanceID, inst.ID), zap.String(logging.LifecycleHook, hook), zap.Error(err))
				}
			}
		}
	}
	h.mu.Lock()
	for key, w := range h.waiting {
		if _, looked := d.Groups[w.group]; !looked {
			seen[key] = w // a look at some groups (the lifecycle sweep) keeps the others' first sightings
		}
	}
	h.waiting = seen
	h.mu.Unlock()
}

// waitSeen is when AdoptWaiting first saw an instance waiting on a hook without a record, in which group.
type waitSeen struct {
	group string
	first time.Time
}

// adopt records (once it has waited for after, and Auto Scaling confirms it as it confirms a message) and
// drives one action found without its message.
func (h *Hooks) adopt(ctx context.Context, t model.Target, a events.LifecycleAction, waitState, key string, after time.Duration, seen map[string]waitSeen, now time.Time) error {
	rec, err := h.getHook(ctx, key)
	found := err == nil
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return fmt.Errorf("reading lifecycle action %s: %w", key, err)
	}
	if found && rec.State != state.HookCompleted {
		if !rec.Adopted {
			return h.takeOver(ctx, t, a, rec, now) // its message drives it, unless its owner left it (hooks_takeover.go)
		}
		if !h.adoptedActionEnded(ctx, rec, now) {
			_, err = h.Handle(ctx, t, a)
			return err
		}
		// Its action ended without the agent; the instance waits on a later one. Closed, then taken up like
		// one after a "no active" close: once seen for AdoptAfter, and only if Auto Scaling has it waiting.
		if rec, err = h.closeEnded(ctx, rec, now); err != nil {
			return err
		}
	}
	// Closed without a completion Auto Scaling accepted (it answered that no action of this instance and hook
	// waits: C6, a heartbeat refused, a crash between the completion and its record) and seen again in the same
	// wait state: the record cannot tell that answer's action from a later one in the same state (a warm pool
	// that scales the instance in to the pool again, a second root volume replacement). Auto Scaling tells,
	// below: the action is taken up only if a heartbeat by instance and hook is accepted (active).
	askFirst := found && rec.Result == "" && rec.WaitState == waitState
	// No record, or a completed one: the record is one per instance and hook, so an instance waiting again on
	// the same hook after Auto Scaling accepted the completion of its action (or in another wait state) waits
	// on a later action (a warm pool cycle, a scale in back to the pool and then a termination, another root
	// volume replacement), taken up like one without a record. Only sightings after the completion count.
	h.mu.Lock()
	w, ok := h.waiting[key]
	h.mu.Unlock()
	if !ok || (found && !w.first.After(rec.CompletedAt)) {
		w = waitSeen{group: a.GroupName, first: now}
		// A first sighting reads the hooks again unless the cache is fresh: a stack update may have shortened
		// the HeartbeatTimeout since they were cached, and the wait before taking the action up (after), its
		// first heartbeat and every later one rest on it. Only an action without its message gets here. When
		// the timeout is shorter than the one the wait was planned on (after) or the sweep ran on (a stack
		// update lowered it since the hook check read it), this first sighting may come a whole sweep interval
		// after the action began: it is taken up at once (a message that comes meanwhile loses, or wins, the
		// conditional write), and the sweep runs on this hook's timeout from now on.
		refresh := h.hooksReadBefore(a.GroupName, now.Add(-hookInfoMaxAge))
		if hooks, err := h.groupHooks(ctx, a.GroupName, refresh); err == nil {
			if info, ok := hooks[a.HookName]; ok {
				if AdoptAfter(info.heartbeat) < after {
					after = 0 // lowered since it was cached
				}
				if h.HeartbeatTimeoutRead != nil && h.HeartbeatTimeoutRead(a.GroupName, info.heartbeat) {
					after = 0 // lowered since the sweep's interval was set
				}
			}
		}
	}
	seen[key] = w
	first := w.first
	if now.Sub(first) < after || (found && !first.After(rec.CompletedAt)) {
		return nil
	}
	// The same confirmation as a message's (invariant 9): DescribeAutoScalingInstances places the instance
	// in the group, in the wait state, and the group has the hook.
	c, err := h.confirm(ctx, a)
	if err != nil || c.verdict != verdictConfirmed {
		if err == nil && c.verdict != verdictNotYet {
			// Not waiting on this hook (a launch into the warm pool, on the launching hooks, asked about its
			// terminating hook: a refused heartbeat): asked again only after another full wait.
			seen[key] = waitSeen{group: a.GroupName, first: now}
		}
		return err // not (or no longer) waiting: nothing to take up
	}
	if askFirst {
		switch active, err := h.active(ctx, a); {
		case err != nil:
			return err
		case !active:
			// The closed action itself, still described in its wait state: nothing waits on the hook. Asked
			// again only after another full wait, so an instance that stays so costs one heartbeat a wait.
			seen[key] = waitSeen{group: a.GroupName, first: now}
			return nil
		}
	}
	rec = state.Hook{Token: key, Group: a.GroupName, HookName: a.HookName, InstanceID: a.InstanceID, Transition: a.Transition,
		State: state.HookWaiting, ReceivedAt: first, Confirmed: true, WaitState: c.detail, Adopted: true, Version: rec.Version,
		HeartbeatTimeout: h.heartbeatTimeout(ctx, a.GroupName, a.HookName)}
	if a.Terminating() {
		rec.State = state.HookDraining
	}
	if _, err := h.putHook(ctx, rec); errors.Is(err, state.ErrConflict) {
		return nil // its message (or another replica) recorded it first
	} else if err != nil {
		// Confirmed just now: heartbeated while the store cannot record it, as a message's action is.
		return errors.Join(fmt.Errorf("recording lifecycle action %s: %w", key, err), h.heartbeatUnrecorded(ctx, a, key, h.Log))
	}
	h.Log.Warn("lifecycle action waiting without its message (lost or late); taken up by the reconcile loop",
		zap.String(logging.Group, a.GroupName), zap.String(logging.InstanceID, a.InstanceID),
		zap.String(logging.LifecycleHook, a.HookName), zap.String(logging.Transition, a.Transition))
	_, err = h.Handle(ctx, t, a)
	return err
}

// adoptedActionEnded reports whether the open record rec of an action the reconcile loop took up (Adopted)
// tracks an action Auto Scaling has ended without the agent: nothing heartbeated it (the agent heartbeats and
// records every heartbeat of an adopted action) for longer than the hook's HeartbeatTimeout, after which Auto
// Scaling applies the hook's default result (Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling
// lifecycle hooks": heartbeat timeout). That is how an action someone completed by hand, or one that timed out
// while the agent was away, looks once its instance waits on the hook again: the record must not be driven for
// the later action (its drain deadline long past, it would be continued undrained) nor hold that action's
// message. A record whose message drives it is left to the take-over rule (hooks_takeover.go).
func (h *Hooks) adoptedActionEnded(ctx context.Context, rec state.Hook, now time.Time) bool {
	if !rec.Adopted || rec.State == state.HookCompleted {
		return false
	}
	return now.Sub(latest(rec.ReceivedAt, rec.LastHeartbeat, h.lastBeat(rec.Token))) > h.heartbeatTimeout(ctx, rec.Group, rec.HookName)
}

// closeEnded closes the record of an adopted action that ended without the agent (adoptedActionEnded): one
// conditional write, nothing sent to Auto Scaling, no completion counted. It returns the record as stored.
func (h *Hooks) closeEnded(ctx context.Context, rec state.Hook, now time.Time) (state.Hook, error) {
	rec.State, rec.Result, rec.CompletedAt = state.HookCompleted, "", now
	rec.Note = "ended without the agent: no heartbeat within the hook's HeartbeatTimeout (completed by hand, or timed out while the agent was away)"
	stored, err := h.putHook(ctx, rec)
	if err != nil {
		return rec, fmt.Errorf("closing lifecycle action %s that ended without the agent: %w", rec.Token, err)
	}
	h.Log.Warn("lifecycle action record closed: its action ended without the agent", zap.String(logging.Group, rec.Group),
		zap.String(logging.InstanceID, rec.InstanceID), zap.String(logging.LifecycleHook, rec.HookName))
	return stored, nil
}
