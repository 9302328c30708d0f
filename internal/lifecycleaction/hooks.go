package lifecycleaction

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// launchVisibilityGrace is how long a LAUNCHING action for an instance EC2 does not describe yet is kept:
// DescribeInstances is eventually consistent right after RunInstances (Amazon EC2 API Reference, "Eventual
// consistency in the Amazon EC2 API").
const launchVisibilityGrace = 5 * time.Minute

// HookOutcome says what became of a lifecycle action after one look at it. It is the queue message's
// disposition itself (one Disposition: events.Disposition), so the agent hands it to the consumer as it is.
type HookOutcome = events.Disposition

const (
	// HookDone (events.Done): the action is completed (now or before) or there is nothing to complete; the
	// message may go.
	HookDone = events.Done
	// HookInProgress (events.Hold): the drain (or launch health wait) goes on; keep the message and look again.
	HookInProgress = events.Hold
	// HookIgnored (events.Ignored): the action names an instance EC2 does not know, or Auto Scaling does not
	// confirm it (field case C19); there is nothing to drain or complete.
	HookIgnored = events.Ignored
)

// Hooks drains instances on TERMINATING lifecycle actions and completes them with CONTINUE (a drain of the
// agent's instance refresh undrained at its deadline is held instead: hooks_hold.go), and completes LAUNCHING
// actions once the instance is healthy in its cluster (ABANDON at the deadline). Progress is kept in
// the Store, keyed by the lifecycle action token, so a duplicate delivery or a restart never completes an
// action twice (invariant 4, docs/architecture.md).
type Hooks struct {
	// Owner names this replica: a replica works on an action only while it holds the action's claim.
	Owner string
	// LeaseTTL is how long a claim on a lifecycle action lasts without renewal (`--lease-ttl`; <= 0:
	// state.DefaultLeaseTTL). The skew margin is a quarter of it (state.LeaseRule).
	LeaseTTL    time.Duration
	Store       state.Store
	AutoScaling awsapi.AutoScaling
	EC2         awsapi.EC2
	Platforms   model.Platforms
	Clock       clock.PassiveClock
	Log         *zap.Logger
	Policy      model.Policy
	// Observer is told every completed action; nil observes nothing.
	Observer model.Observer
	// Retries backs off, per lifecycle action token, the look of an action whose last look failed (an
	// instance or drain status that could not be read): the next poll only sends the heartbeat when one is
	// due (C4), and the drain or health deadline still holds. Nil: every poll looks.
	Retries *model.Retries
	// QueueURL is the agent's queue: a hook that notifies another target is not the agent's (HookOwned).
	QueueURL string
	// HeartbeatTimeoutRead, when set, is told the HeartbeatTimeout of the agent's hook on group that an action
	// first seen without its message waits on (adopt, after reading the hooks again when they are over
	// hookInfoMaxAge old), and answers whether the lifecycle sweep had been running on a longer one: it then
	// shortens its interval at once (agent/hooksweep.go) instead of at the next hook check, and the action,
	// perhaps seen a whole sweep late, is taken up at once.
	HeartbeatTimeoutRead func(group string, heartbeat time.Duration) (shortened bool)
	// RolloutKept, when set, returns the rollout record of group that the agent keeps between its looks (as
	// it last read or wrote it; false when it keeps none): a launching action's look at a refresh group reads
	// it instead of the store (haltedRefreshLaunch).
	RolloutKept func(group string) (state.Rollout, bool)

	mu    sync.Mutex
	hooks map[string]map[string]hookInfo // group -> hook name -> what DescribeLifecycleHooks said
	// hooksAt: group -> when hooks[group] was read
	hooksAt map[string]time.Time
	// described: group -> its hooks as that read described them (KnownHooks)
	described map[string][]model.GroupHook
	// waiting: ActionKey -> when the tick first saw the instance waiting on that hook without a record, and its
	// group (AdoptWaiting)
	waiting map[string]waitSeen
	// poolLooks: group -> the last DescribeWarmPool of AdoptWaiting (hooks_adopt.go)
	poolLooks map[string]poolLook
	// driven: record key -> this process's last look at the action through its message; rescued: record key
	// -> this replica's last heartbeat for an owner whose heartbeat was overdue (hooks_takeover.go)
	driven, rescued map[string]time.Time
	// beats: record key -> this process's last heartbeat of the action that Auto Scaling accepted, recorded or
	// not (a failed write of LastHeartbeat must not make a live action look ended: adoptedActionEnded)
	beats map[string]time.Time
	// prunedAt: when beats and kept were last pruned of the entries no action can need any more (prune)
	prunedAt time.Time
	// kept: ActionKey -> the action's record as this process last read or wrote it, while it holds the
	// action's claim (hookrecords.go)
	kept map[string]state.Hook
	// instanceSeen: record key -> when EC2 last described the action's instance running (instanceChecked)
	instanceSeen map[string]time.Time
	// lookedAt: record key -> this process's last drain or health check of the action (lookDue)
	lookedAt map[string]time.Time
	// marks: the last ListDrainMarks of Recover, taken at marksAt when marksWrites was marksGen (recover.go
	// drainMarks); marksWrites counts this process's writes and deletions of drain marks
	marks                 []state.DrainMark
	marksAt               time.Time
	marksGen, marksWrites uint64
	marksListed           bool
}

// actions returns the provider of the lifecycle action calls to Auto Scaling and EC2, over the hooks' clients.
func (h *Hooks) actions() providers.LifecycleActions {
	return providers.LifecycleActions{AutoScaling: h.AutoScaling, EC2: h.EC2}
}

// beatAccepted notes that Auto Scaling accepted a heartbeat of the action of record key at at.
func (h *Hooks) beatAccepted(key string, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.beats == nil {
		h.beats = map[string]time.Time{}
	}
	h.beats[key] = at
	h.pruneLocked()
}

// pruneEvery is how often beats and kept are pruned at most: each prune walks both maps.
const pruneEvery = time.Minute

// pruneLocked forgets, at most every pruneEvery, what no action can need any more, so that a process running
// for months does not grow with every action it ever handled: heartbeats older than the longest a lifecycle
// action can last (providers.MaxGlobalTimeout, 48 h), and kept records whose claim lapsed (Kept no longer
// serves them; the next look reads the store). The caller holds h.mu.
func (h *Hooks) pruneLocked() {
	now := h.Clock.Now()
	if now.Sub(h.prunedAt) < pruneEvery {
		return
	}
	h.prunedAt = now
	for k, at := range h.beats {
		if now.Sub(at) > providers.MaxGlobalTimeout {
			delete(h.beats, k)
		}
	}
	for k, rec := range h.kept {
		if !h.leases().MayAct(rec.Lease(), h.Owner, now) {
			delete(h.kept, k)
		}
	}
}

// lastBeat returns this process's last accepted heartbeat of the action of record key (zero: none).
func (h *Hooks) lastBeat(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.beats[key]
}

// hookInfo is one lifecycle hook of a group as DescribeLifecycleHooks describes it.
type hookInfo struct {
	transition string
	heartbeat  time.Duration
	global     time.Duration // HookGlobalTimeout
	target     string        // NotificationTargetARN ("" = none: EventBridge)
}

// Handle takes one look at a lifecycle action of target t: it confirms the action with Auto Scaling the first
// time it sees its token (confirm: the message is a claim, DescribeAutoScalingInstances and
// DescribeLifecycleHooks are the facts), records it, starts or checks the drain, sends a heartbeat when one is
// due, and completes the action when the work is done. Call it again (with the same action) until it returns
// HookDone or HookIgnored. An action Auto Scaling does not confirm returns HookIgnored with nothing drained,
// one warning and an Observer.LifecycleMessageRejected (field case C19); an Auto Scaling error returns it
// with the error, so the message is kept and tried again. An action of a hook that is not the agent's
// (HookOwned) returns HookIgnored with reason model.RejectForeignHook, logged at info. The action's record is the
// one of its instance and hook (ActionKey): an action the reconcile loop took up without its message
// (AdoptWaiting; a.Token empty) is driven there, and its late message is held until it is completed.
func (h *Hooks) Handle(ctx context.Context, t model.Target, a events.LifecycleAction) (HookOutcome, error) {
	if a.HookName == model.ECSManagedDrainingHookName {
		// ECS's own hook (an EventBridge rule sees every hook of the group): ECS drains and completes it.
		// Completing it here would cut ECS's drain short (field case C17).
		return HookIgnored, nil
	}
	rec, known, err := h.record(ctx, a)
	if err != nil {
		if key := model.ActionKey(a.GroupName, a.InstanceID, a.HookName); !h.lastBeat(key).IsZero() {
			// The table unreadable (throttled, down) once the claim this process keeps has lapsed: an action whose
			// heartbeats Auto Scaling accepted from this process (it confirmed the action first) is heartbeated
			// all the same, or a long outage lets it time out and its instance terminate undrained. Nothing is
			// drained further or completed until its record can be read.
			log := h.Log.With(zap.String(logging.Group, a.GroupName), zap.String(logging.InstanceID, a.InstanceID))
			err = errors.Join(err, h.heartbeatUnrecorded(ctx, a, key, log))
		}
		return HookInProgress, err
	}
	if known && a.Token != "" && h.adoptedActionEnded(ctx, rec, h.Clock.Now()) {
		// Taken up without its message, and ended without the agent since (adoptedActionEnded): this message
		// is of a later action, or a late copy. Never held behind the old record, nor driven on it.
		if rec, err = h.closeEnded(ctx, rec, h.Clock.Now()); err != nil {
			return HookInProgress, err
		}
	}
	version := rec.Version
	if known && rec.State == state.HookCompleted {
		if a.Token == "" {
			return HookDone, nil
		}
		// A hook that is another tool's now (its notification target moved) is not asked about: the heartbeat
		// would restart that tool's action's timeout.
		if why, err := h.foreignHook(ctx, t, a, true); err != nil {
			return HookInProgress, err
		} else if why != "" {
			h.Log.Info("lifecycle action of another tool's hook; nothing asked, drained or completed, message deleted",
				zap.String(logging.Group, a.GroupName), zap.String(logging.InstanceID, a.InstanceID),
				zap.String(logging.LifecycleHook, a.HookName), zap.String(logging.Reason, why))
			return HookIgnored, nil
		}
		// One record per instance and hook: a message for a completed one is a late copy of that action, or a
		// later action on the same instance and hook (warm pool, root volume replacement). Auto Scaling tells.
		if active, err := h.active(ctx, a); err != nil || !active {
			return HookDone, err
		}
		known = false
	}
	if known && rec.Adopted && a.Token != "" {
		// The reconcile loop found this action without its message and works on it (AdoptWaiting); the message,
		// late, waits for its end.
		return HookInProgress, nil
	}
	log := h.Log.With(zap.String(logging.Group, a.GroupName), zap.String(logging.InstanceID, a.InstanceID),
		zap.String(logging.LifecycleToken, a.Token), zap.String(logging.Transition, a.Transition))
	confirming := !known || !rec.Confirmed
	untold := false // a confirmed record without a transition (not written by this agent): confirmed again
	if known && rec.Confirmed && a.Transition != rec.Transition {
		if rec.Transition != "" {
			// A message naming an action in progress (its instance and hook) with another transition: a hook has
			// one transition, so it is a claim the action Auto Scaling confirmed contradicts (a forged or garbled
			// message). Every later step would follow the message's transition (drain or launch path, which
			// completes the real action on its own terms), so it is confirmed afresh on its own, and the record
			// in progress goes on untouched whatever the answer.
			return h.conflictingTransition(ctx, t, a, rec, log)
		}
		// The record does not tell its transition (edited, restored, written by another tool): the message's is
		// confirmed like a first one's, and a rejection leaves the record open.
		confirming, untold = true, true
	}
	// Another tool's hook (aws-node-termination-handler, a backup hook) waits for that tool: its actions are
	// never drained or completed here. Checked on every look, on a fresh DescribeLifecycleHooks the first: a
	// hook pointed at another tool since it was read, or whose HeartbeatTimeout a stack update lowered, is
	// seen before anything is drained or heartbeated on it.
	if why, err := h.foreignHook(ctx, t, a, confirming); err != nil {
		return HookInProgress, err
	} else if why != "" {
		return HookIgnored, h.reject(ctx, t, a, rec, known, confirmation{verdictRejected, model.RejectForeignHook, why}, log)
	}
	if confirming {
		// Invariant 9 (docs/architecture.md): once per action, before anything is drained or cordoned.
		c, err := h.confirm(ctx, a)
		if err != nil {
			return HookInProgress, err // nothing is known: keep the message, drain nothing
		}
		switch c.verdict {
		case verdictNotYet:
			log.Debug("instance not yet in the lifecycle action's wait state; looking again", zap.String(logging.Reason, c.detail))
			return HookInProgress, nil
		case verdictRejected:
			return HookIgnored, h.reject(ctx, t, a, rec, known && !untold, c, log)
		}
		if untold {
			rec.Transition = a.Transition // Auto Scaling confirmed it
		}
		if !known {
			rec = state.Hook{Token: model.ActionKey(a.GroupName, a.InstanceID, a.HookName), Group: a.GroupName, HookName: a.HookName,
				InstanceID: a.InstanceID, Transition: a.Transition, State: state.HookWaiting, ReceivedAt: h.Clock.Now(), Version: version,
				HeartbeatTimeout: h.heartbeatTimeout(ctx, a.GroupName, a.HookName)} // the hooks were read afresh for the confirmation
			if a.Terminating() {
				rec.State = state.HookDraining
			}
		}
		rec.Confirmed = c.verdict == verdictConfirmed
		if c.verdict == verdictConfirmed {
			rec.WaitState = c.detail
			if now := h.Clock.Now(); !h.leases().HeldByOther(rec.Lease(), h.Owner, now) {
				// The claim (below) rides on the confirmation's write: one conditional write instead of two.
				rec = rec.WithLease(h.leases().Claim(h.Owner, now))
			}
		}
		confirmed := rec
		if rec, err = h.putHook(ctx, rec); errors.Is(err, state.ErrConflict) {
			return HookInProgress, nil // another copy of the message (or replica) recorded it first: look again
		} else if err != nil {
			err = fmt.Errorf("recording lifecycle action %s: %w", a.Token, err)
			if confirmed.Confirmed {
				// The store failing (throttled, down) must not let an action Auto Scaling has just confirmed time
				// out unrecorded, as for a claim that cannot be renewed: it is heartbeated all the same.
				err = errors.Join(err, h.heartbeatUnrecorded(ctx, a, confirmed.Token, log))
			}
			return HookInProgress, err
		}
		if c.verdict == verdictGone {
			// Field case C5: the instance is already leaving or gone: nothing to drain, no action waits.
			log.Info("instance already terminated; lifecycle action treated as done", zap.String(logging.Reason, c.detail))
			return HookDone, h.finish(ctx, rec, "", c.detail)
		}
		if rec.Confirmed {
			// Auto Scaling has just described the instance in the action's wait state: the first ask of EC2
			// whether it went away comes instanceCheckEvery from now, like every later one.
			h.instanceChecked(rec.Token)
		}
	}
	held := rec
	if rec, err = h.claim(ctx, rec); errors.Is(err, errClaimedElsewhere) || errors.Is(err, state.ErrConflict) {
		return HookInProgress, nil // another replica works on it; this copy of the message waits for its end
	} else if err != nil {
		// The store failing (throttled, down) must not let the action time out: the heartbeat that is due is
		// sent all the same (its time is not recorded, so the next look sends one again), even once the claim
		// has run out — a heartbeat of an action Auto Scaling confirmed only keeps it waiting, whichever
		// replica drives it — and the claim is renewed at the next look that can write.
		if held.Confirmed {
			if herr := h.heartbeat(ctx, a, &held, log); herr != nil {
				log.Warn("heartbeat while the lifecycle action's claim could not be renewed", zap.Error(herr))
			}
		}
		return HookInProgress, err
	}
	if a.Token != "" {
		h.drivenByMessage(rec.Token, h.Clock.Now()) // its own reconcile loop leaves it to the message (staleRule)
	}

	deadline, from := h.Policy.HealthTimeout, rec.ReceivedAt
	if a.Terminating() {
		deadline = h.hookDrainTimeout(ctx, a.GroupName, a.HookName) // --drain-timeout, capped by the hook's global timeout
		from = rec.DrainStart()
	}
	if !confirming && !h.lookDue(rec.Token) && h.Clock.Since(from) < deadline {
		// Looked at less than LookEvery ago: the drain or health check waits, the heartbeat never does (C4).
		return HookInProgress, h.heartbeat(ctx, a, &rec, log)
	}
	if h.Retries == nil {
		out, err := h.look(ctx, t, a, rec, !confirming, log)
		if err == nil {
			h.looked(rec.Token) // a failed look is tried again on the next handling
		}
		return out, err
	}
	if !h.Retries.Due(rec.Token) && h.Clock.Since(from) < deadline {
		// The last look failed: the next one waits for its backoff, the heartbeat never does (C4).
		return HookInProgress, h.heartbeat(ctx, a, &rec, log)
	}
	out, err := h.look(ctx, t, a, rec, !confirming, log)
	if err != nil {
		h.Retries.Failed(rec.Token, from.Add(deadline)) // its backoff, not LookEvery, spaces the next try
	} else {
		h.looked(rec.Token)
		h.Retries.Succeeded(rec.Token)
	}
	return out, err
}

// look checks the drain (or launch health) of a claimed action once — and first, when checkInstance is set,
// whether EC2 still has the instance — sends a due heartbeat and completes the action when its work is done.
func (h *Hooks) look(ctx context.Context, t model.Target, a events.LifecycleAction, rec state.Hook, checkInstance bool, log *zap.Logger) (HookOutcome, error) {
	if checkInstance && h.instanceCheckDue(rec.Token) {
		// Auto Scaling answered on the first look; later looks ask EC2 whether the instance went away meanwhile,
		// at most every instanceCheckEvery (instanceCheckDue).
		exists, err := h.instanceState(ctx, a.InstanceID)
		if err == nil && exists == instanceRunning {
			h.instanceChecked(rec.Token)
		}
		switch {
		case err != nil:
			return HookInProgress, err
		case exists == instanceUnknown && !a.Terminating() && h.Clock.Since(rec.ReceivedAt) < launchVisibilityGrace:
			// EC2 is eventually consistent: a just-launched instance may not be described yet. Look again.
			return HookInProgress, nil
		case exists == instanceUnknown:
			// Field case C3: no such instance. Nothing to drain and no action can be waiting for it.
			log.Info("lifecycle action for an instance EC2 does not know; ignored")
			return HookIgnored, h.finish(ctx, rec, "", "instance does not exist")
		case exists == instanceTerminated:
			// Field case C5: EC2 already reports the instance terminated: nothing to drain, nothing waits.
			log.Info("instance already terminated; lifecycle action treated as done")
			return HookDone, h.finish(ctx, rec, "", "instance already terminated")
		}
	}

	if !a.Terminating() {
		return h.launching(ctx, t, a, rec, log)
	}
	if !rec.DrainHeldAt.IsZero() {
		// Held at its deadline (holdDrain): only heartbeated while the rollout stays halted, drained again
		// with a fresh deadline once an operator's retry or rollback makes it active.
		held, err := h.drainStaysHeld(ctx, rec)
		if err != nil || held {
			return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
		}
		if rec, err = h.restartHeldDrain(ctx, rec, log); err != nil {
			return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
		}
	}
	prog, err := h.drain(ctx, t, &rec)
	limit := h.hookDrainTimeout(ctx, a.GroupName, a.HookName)
	if err != nil {
		if h.Clock.Since(rec.DrainStart()) < limit {
			// The heartbeat does not depend on the drain's status: a passing ECS or Kubernetes API fault
			// must not let the action time out and the instance terminate undrained.
			return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
		}
		// The deadline holds even when the drain cannot be checked: heartbeating on would hold the
		// instance in Terminating:Wait until Auto Scaling's global timeout (up to 48 h).
		prog = model.DrainProgress{Detail: "drain status unknown: " + err.Error()}
	}
	if !prog.Drained && h.Clock.Since(rec.DrainStart()) < limit {
		return HookInProgress, h.heartbeat(ctx, a, &rec, log)
	}
	if !prog.Drained && a.InstanceLeaves() {
		// A termination of the agent's instance refresh is held, not continued: the rollout halts and the
		// instance serves again (field case C9).
		hold, err := h.refreshHoldsDrain(ctx, rec)
		if err != nil {
			return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
		}
		if hold {
			return h.holdDrain(ctx, t, a, rec, limit, prog.Detail, log)
		}
	}
	note := "drained"
	if !prog.Drained {
		// Not a termination of the agent's refresh (a scale in, a person's), or one of an instance that fails
		// its health check (refreshHoldsDrain): the action's own timeout would
		// continue the termination anyway; completing now at least does not leave the instance half-drained
		// for the rest of the heartbeat window. It is an alert, not a silent CONTINUE.
		note = fmt.Sprintf("drain deadline %s reached (%s); continuing", limit, prog.Detail)
		log.Warn("drain did not finish before its deadline", zap.String(logging.Reason, note))
	}
	if a.Action == events.ActionReplaceRootVolume {
		note += "; root volume replacement: the instance comes back"
	}
	out, err := h.complete(ctx, a, rec, model.ResultContinue, note, log)
	if err == nil && out == HookDone && !prog.Drained {
		model.SendAlert(h.Observer, model.Alert{Kind: model.AlertDrainDeadline, Target: t, Detail: a.InstanceID + ": " + note, At: h.Clock.Now()})
	}
	return out, err
}

// drain starts the platform drain when needed and reports its progress. On a group with ECS managed
// draining ECS drains the instance itself: the agent only watches (field case C17). Before the agent first
// sets the instance DRAINING (or cordons it) for the action, it writes a drain mark (state.DrainMark) and
// records it on the hook record, so an instance it left drained can be put back in service (Recover).
func (h *Hooks) drain(ctx context.Context, t model.Target, rec *state.Hook) (model.DrainProgress, error) {
	platform, err := h.Platforms.For(t)
	if err != nil {
		return model.DrainProgress{}, err
	}
	prog, err := platform.DrainStatus(ctx, t.Cluster, rec.InstanceID)
	if err != nil || prog.Drained {
		return prog, err
	}
	if h.ecsDrains(ctx, rec.Group) {
		prog.Detail = "ECS managed draining: " + prog.Detail
		return prog, nil
	}
	if !rec.AgentDrained {
		// The drain of a refresh group's termination takes a slot of the per-cluster budget first; over budget
		// the action waits undrained, and its heartbeats (look) keep it alive until a slot frees.
		if wait, err := h.claimHookDrainSlot(ctx, t, *rec); err != nil || wait != "" {
			return model.DrainProgress{Detail: wait}, err
		}
		mark := state.DrainMark{InstanceID: rec.InstanceID, Group: rec.Group, Platform: t.Platform, Cluster: t.Cluster,
			Token: rec.Token, At: h.Clock.Now()}
		h.marksWritten()
		if err := h.Store.PutDrainMark(ctx, mark); err != nil {
			return prog, fmt.Errorf("recording the drain of %s: %w", rec.InstanceID, err)
		}
		rec.AgentDrained = true
		next, err := h.putHook(ctx, *rec)
		if err != nil {
			return prog, fmt.Errorf("recording the drain of %s on lifecycle action %s: %w", rec.InstanceID, rec.Token, err)
		}
		*rec = next
	}
	if prog.Started {
		// The drain is under way (the agent's, or someone's): StartDrain would do nothing, and the look above
		// checked it.
		return prog, nil
	}
	if found, ok := platform.(model.FoundDrainer); ok && prog.Node.Registered {
		return found.StartDrainFound(ctx, t.Cluster, rec.InstanceID, prog.Node)
	}
	if err := platform.StartDrain(ctx, t.Cluster, rec.InstanceID); err != nil {
		return prog, err
	}
	return platform.DrainStatus(ctx, t.Cluster, rec.InstanceID)
}

// LookEvery is the shortest time between two drain or health checks of one lifecycle action by this process.
// The consumer hands a held action's message back on each receive of the queue, at least every long poll
// (20 s), and more often while other messages arrive: in a fleet's rollout each of them would check every held
// drain again (ECS: DescribeContainerInstances, ListTasks x2, DescribeTasks) without anything having had time
// to change. 15 s keeps every long poll's look (a receive that waited its 20 s always checks) and bounds the
// rest; the heartbeat that is due is sent on every handling all the same (Handle), a deadline that passed is
// acted on at once, and a look that failed is spaced by its backoff (Hooks.Retries) instead. Handlings that
// come just under LookEvery apart check every other one: at most about twice LookEvery between two checks.
const LookEvery = 15 * time.Second

// lookDue reports whether the action of record key may be checked now: this process has not checked it within
// LookEvery.
func (h *Hooks) lookDue(key string) bool { return h.lastDone(&h.lookedAt, key, LookEvery) }

// looked notes that this process checks the action of record key now.
func (h *Hooks) looked(key string) { h.noteDone(&h.lookedAt, key, LookEvery) }

// lastDone reports whether the time noted for key in *m (under h.mu) is at least every ago, or none is noted.
func (h *Hooks) lastDone(m *map[string]time.Time, key string, every time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := (*m)[key]
	return !ok || h.Clock.Since(at) >= every
}

// noteDone notes now for key in *m (under h.mu) and forgets the keys noted more than ten times every ago.
func (h *Hooks) noteDone(m *map[string]time.Time, key string, every time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.Clock.Now()
	if *m == nil {
		*m = map[string]time.Time{}
	}
	for k, at := range *m {
		if now.Sub(at) > 10*every {
			delete(*m, k)
		}
	}
	(*m)[key] = now
}

// instanceCheckEvery is how often the looks at a lifecycle action after its first ask EC2 whether its instance
// still exists (look): the answer only ends an action whose instance went away early (field cases C3, C5),
// which nothing waits on, and every effect of a look is made on an instance Auto Scaling confirmed in the
// action's wait state (a completion of a gone instance's action is answered "No active Lifecycle Action
// found", C6). Looks come every tick or message redelivery: this keeps one DescribeInstances a minute.
const instanceCheckEvery = time.Minute

// instanceCheckDue reports whether the look at the action of record key asks EC2 about its instance: no
// answer "running" (nor Auto Scaling's confirmation) within instanceCheckEvery.
func (h *Hooks) instanceCheckDue(key string) bool {
	return h.lastDone(&h.instanceSeen, key, instanceCheckEvery)
}

// instanceChecked notes that EC2 described the instance of the action of record key running now (or Auto
// Scaling confirmed it in the action's wait state).
func (h *Hooks) instanceChecked(key string) { h.noteDone(&h.instanceSeen, key, instanceCheckEvery) }

// launching completes a LAUNCHING action once the instance is healthy in its cluster, or abandons it at the
// health deadline so Auto Scaling replaces it. A launch into the warm pool is completed at once (field case
// C18, warmpool.go); an instance the agent drained that comes back from the warm pool is put back in service
// first.
func (h *Hooks) launching(ctx context.Context, t model.Target, a events.LifecycleAction, rec state.Hook, log *zap.Logger) (HookOutcome, error) {
	if rec.WaitState == string(astypes.LifecycleStateWarmedPendingWait) {
		return h.complete(ctx, a, rec, model.ResultContinue, warmPoolLaunchNote, log)
	}
	if a.Origin == originWarmPool || rec.Adopted {
		if abandon, why, err := h.outdatedPoolLaunch(ctx, t, a.InstanceID, a.Origin == originWarmPool); err != nil || abandon {
			if err != nil {
				return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
			}
			return h.complete(ctx, a, rec, model.ResultAbandon, why, log)
		}
	}
	platform, err := h.Platforms.For(t)
	if err != nil {
		return HookInProgress, err
	}
	nodes, err := platform.Observe(ctx, t.Cluster)
	if err != nil {
		return HookInProgress, err
	}
	if n := nodes[a.InstanceID]; n.Registered && n.Draining {
		// Only an instance whose launch still waits on this hook is back from the warm pool: one whose launch
		// ended since (terminated mid-launch, and drained for that) is never put back in service. Auto Scaling
		// accepts a heartbeat by instance and hook only while the action waits.
		switch active, err := h.active(ctx, a); {
		case err != nil:
			return HookInProgress, err
		case !active:
			log.Info("launching action no longer active while its instance drains; not put back in service")
			return HookDone, h.finish(ctx, rec, "", "action no longer active (completed elsewhere, timed out, or the instance is leaving)")
		}
		if undrained, err := h.undrainReturning(ctx, t, a, log); err != nil || undrained {
			return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log)) // healthy on a later look
		}
	}
	if n := nodes[a.InstanceID]; n.Healthy {
		return h.complete(ctx, a, rec, model.ResultContinue, "healthy in cluster", log)
	}
	if abandon, why, err := h.haltedRefreshLaunch(ctx, t, a.InstanceID); err != nil || abandon {
		if err != nil {
			return HookInProgress, errors.Join(err, h.heartbeat(ctx, a, &rec, log))
		}
		return h.complete(ctx, a, rec, model.ResultAbandon, why, log)
	}
	if h.Clock.Since(rec.ReceivedAt) >= h.Policy.HealthTimeout {
		return h.complete(ctx, a, rec, model.ResultAbandon, fmt.Sprintf("not healthy in cluster after %s", h.Policy.HealthTimeout), log)
	}
	return HookInProgress, h.heartbeat(ctx, a, &rec, log)
}

// actionHeartbeatTimeout is the HeartbeatTimeout the action of rec is heartbeated on: the hook's as last read,
// or the shorter one its record kept (raised since the action was recorded, Auto Scaling may still time the
// action out on the shorter one).
func (h *Hooks) actionHeartbeatTimeout(ctx context.Context, a events.LifecycleAction, rec state.Hook) time.Duration {
	timeout := h.heartbeatTimeout(ctx, a.GroupName, a.HookName)
	if rec.HeartbeatTimeout > 0 && rec.HeartbeatTimeout < timeout {
		return rec.HeartbeatTimeout
	}
	return timeout
}

// heartbeatUnrecorded sends the heartbeat of an action Auto Scaling confirmed but the store could not record
// (record key key): at once, then a third of the hook's HeartbeatTimeout after the last one Auto Scaling accepted
// from this process. Nothing is written.
func (h *Hooks) heartbeatUnrecorded(ctx context.Context, a events.LifecycleAction, key string, log *zap.Logger) error {
	if last := h.lastBeat(key); !last.IsZero() && h.Clock.Since(last) < h.heartbeatTimeout(ctx, a.GroupName, a.HookName)/3 {
		return nil
	}
	active, err := h.actions().Heartbeat(ctx, a, true)
	if err != nil {
		return fmt.Errorf("recording heartbeat for unrecorded lifecycle action %s: %w", a.Token, err)
	}
	if active {
		h.beatAccepted(key, h.Clock.Now())
		log.Debug("heartbeat of a lifecycle action the store could not record")
	}
	return nil
}

// heartbeat records a lifecycle action heartbeat when a third of the hook's HeartbeatTimeout has passed since
// the last one (field case C4), so the action never times out while the work goes on. The first one is due a
// third of the timeout after the action began, as far as the agent knows it: when its message was sent
// (a.SentAt, SQS's SentTimestamp) or, without one, when the agent first recorded it — not when this copy was
// received, since a message received late (redelivered after a lost receive or a restart, behind a backlog)
// comes with the action's timeout already running. An adopted action began before it was found: its first
// heartbeat is due at once. The timeout runs from the action's start and restarts at each heartbeat (Amazon
// EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling lifecycle hooks": heartbeat timeout; API Reference,
// RecordLifecycleActionHeartbeat).
func (h *Hooks) heartbeat(ctx context.Context, a events.LifecycleAction, rec *state.Hook, log *zap.Logger) error {
	last := rec.LastHeartbeat
	if last.IsZero() && !rec.Adopted {
		last = rec.ReceivedAt
		if !a.SentAt.IsZero() && a.SentAt.Before(last) {
			last = a.SentAt // a message received late: the action's timeout has run since it was sent
		}
	}
	timeout := h.actionHeartbeatTimeout(ctx, a, *rec)
	if h.Clock.Since(last) < timeout/3 {
		return nil
	}
	rec.HeartbeatTimeout = timeout // lowered since it was recorded: written with the heartbeat's time below
	// The limiter's priority lane: a heartbeat never queues behind a fleet pass's reads (urgent).
	active, err := h.actions().Heartbeat(ctx, a, true)
	if err != nil {
		return fmt.Errorf("recording heartbeat for lifecycle action %s: %w", a.Token, err)
	}
	if !active {
		log.Info("lifecycle action no longer active while draining; continuing the drain without it")
		return h.finish(ctx, *rec, "", "action no longer active (completed elsewhere or timed out)")
	}
	h.beatAccepted(rec.Token, h.Clock.Now())
	rec.LastHeartbeat = h.Clock.Now()
	next, err := h.putHook(ctx, *rec)
	if err != nil {
		return fmt.Errorf("recording heartbeat time of %s: %w", a.Token, err)
	}
	*rec = next
	log.Debug("lifecycle action heartbeat sent")
	return nil
}
