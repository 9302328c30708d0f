// Package operator holds the controls an operator uses on the agent's records: pause and resume (pause
// locks), approve, manual rollback, status and history. They are plain functions over a state.Store with the
// time passed in, shared by the CLI and its tests. None calls AWS: the agent acts on what they write at its
// next reconcile tick, through its normal, crash-safe steps.
package operator

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// ErrNotPaused is returned by Resume when the scope it names has no pause lock.
var ErrNotPaused = errors.New("not paused")

// ErrAlreadyPaused is returned (wrapped) by CheckNotPaused when the scope already has an active pause lock.
var ErrAlreadyPaused = errors.New("already paused")

// UnrecordedImageError is PlanRollback's refusal of a --to AMI that neither the group's history names nor is
// its previous AMI (without force). HistoryCommand is the command line that shows the history, named in the
// message: "patch-agent history GROUP" when empty; a command sets it with the store flags it was given.
type UnrecordedImageError struct {
	Image, Group, HistoryCommand string
}

func (e *UnrecordedImageError) Error() string {
	show := e.HistoryCommand
	if show == "" {
		show = "patch-agent history " + e.Group
	}
	return fmt.Sprintf("%s is not in the history of group %s (nor its previous AMI): check the id with `%s`, or pass --force to roll back to it anyway",
		e.Image, e.Group, show)
}

// RolloutInProgressError is PlanRollback's refusal of a rollout in progress (Active, not Waiting, not in an
// instance refresh): Position is its phase and step ("Replacing/Draining"). PauseCommand is the command line
// that holds the rollout where it is, named in the message: "patch-agent pause --group GROUP --reason '...'"
// when empty; a command sets it with the store flags it was given.
type RolloutInProgressError struct {
	Group, Position, PauseCommand string
}

func (e *RolloutInProgressError) Error() string {
	hold := e.PauseCommand
	if hold == "" {
		hold = "patch-agent pause --group " + e.Group + " --reason '...'"
	}
	return fmt.Sprintf("rollout in progress at %s: let it finish (or halt) first; to hold it where it is: %s", e.Position, hold)
}

// WaitingForSoakError is Approve's refusal of a group that waits for its soak, not for approval: Reason is
// the rollout's reason, Image its target AMI. ApproveCommand is the command line that skips the soak, named
// in the message: "patch-agent approve GROUP --skip-soak --reason '...'" when empty; a command sets it with
// the store flags it was given.
type WaitingForSoakError struct {
	Group, Reason, Image, ApproveCommand string
}

func (e *WaitingForSoakError) Error() string {
	skip := e.ApproveCommand
	if skip == "" {
		skip = "patch-agent approve " + e.Group + " --skip-soak --reason '...'"
	}
	return fmt.Sprintf("group %s waits for its soak, not for approval (%s): to roll %s before the soak ends: %s", e.Group, e.Reason, e.Image, skip)
}

// History events the operator's commands append.
const (
	// HistoryManualRollback is the Event of the history entry Rollback appends.
	HistoryManualRollback = "manual-rollback"
	// HistoryApproved is the Event of the history entry Approve appends (Detail: who approved).
	HistoryApproved = "approved"
)

// ApprovalReasonPrefix starts the Reason of a rollout that waits (phase Waiting) for `patch-agent approve`.
const ApprovalReasonPrefix = "approval:"

// approvingImage refuses an approval that names image ("" names none) when the group's target is another AMI: the
// source moved on between the operator's look and the approval, and the new AMI was not the one reviewed.
func approvingImage(group, image string, r state.Rollout) error {
	if image == "" || image == r.TargetImageID {
		return nil
	}
	return fmt.Errorf("group %s waits for AMI %s, not %s: nothing approved (its source moved on since; look at it with patch-agent status %s)",
		group, r.TargetImageID, image, group)
}

// WaitingForApproval reports whether r waits for an operator's approval: phase Waiting with a reason that
// starts with ApprovalReasonPrefix. A pause hides the gate (its reason is "paused ..."), so a paused rollout
// does not count, even when its AMI is not approved yet.
func WaitingForApproval(r state.Rollout) bool {
	return r.Phase == state.PhaseWaiting && strings.HasPrefix(r.Reason, ApprovalReasonPrefix)
}

// Pause writes the pause lock of group (state.GlobalScope, "", pauses every target), replacing any pause of
// the same scope. From the agent's next tick no new instance refresh, rollout drain or termination starts in that scope;
// lifecycle-hook drains go on and waits already in flight stay as they are. until (zero: until Resume) ends
// the pause by itself. Errors: reason or who empty, until not after now, or the store's write error.
func Pause(ctx context.Context, store state.Store, group, reason, who string, until, now time.Time) error {
	l, err := pauseLock(group, reason, who, until, now)
	if err != nil {
		return err
	}
	if err := store.PutLock(ctx, l); err != nil {
		return fmt.Errorf("pausing %s: %w", l.Scope(), err)
	}
	return nil
}

// PauseIfAbsent writes the pause lock of group as Pause does, but only when the scope has no lock that holds
// at now, in one conditional write (state.Store.PutLockIfAbsent): it returns the holding lock and false when
// one stops the write. Errors: as Pause's.
func PauseIfAbsent(ctx context.Context, store state.Store, group, reason, who string, until, now time.Time) (state.Lock, bool, error) {
	l, err := pauseLock(group, reason, who, until, now)
	if err != nil {
		return state.Lock{}, false, err
	}
	held, written, err := store.PutLockIfAbsent(ctx, l, now)
	if err != nil {
		return state.Lock{}, false, fmt.Errorf("pausing %s: %w", l.Scope(), err)
	}
	return held, written, nil
}

// pauseLock checks a pause's fields and returns its lock.
func pauseLock(group, reason, who string, until, now time.Time) (state.Lock, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return state.Lock{}, errors.New("a pause needs a reason: it is shown in status and in the agent's logs (e.g. \"incident 4711\")")
	}
	if strings.TrimSpace(who) == "" {
		return state.Lock{}, errors.New("a pause needs to say who paused")
	}
	if !until.IsZero() && !until.After(now) {
		return state.Lock{}, fmt.Errorf("pause until %s is not in the future (now %s)", until.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	// Since at second precision: the status shows and compares it in RFC 3339 seconds.
	return state.Lock{Group: group, Reason: reason, Who: who, Since: now.Truncate(time.Second), Until: until}, nil
}

// CheckNotPaused returns an error wrapping ErrAlreadyPaused that names the active pause lock of group's own
// scope (state.GlobalScope: the global one) — who, since, until and why — or nil when the scope has none (an
// expired lock does not count). `patch-agent pause` asks it first, so a second pause never silently replaces
// an earlier one (shortening or lengthening an --until pause) unless --replace says so. Errors: the store's.
func CheckNotPaused(ctx context.Context, store state.Store, group string, now time.Time) error {
	locks, err := store.ListLocks(ctx)
	if err != nil {
		return fmt.Errorf("reading pause locks: %w", err)
	}
	for _, l := range locks {
		if l.Group != group || !l.Active(now) {
			continue
		}
		end := "until resumed"
		if !l.Until.IsZero() {
			end = "until " + l.Until.UTC().Format(time.RFC3339)
		}
		return fmt.Errorf("%s is %w by %s since %s %s: %s", l.Scope(), ErrAlreadyPaused, l.Who,
			l.Since.UTC().Format(time.RFC3339), end, l.Reason)
	}
	return nil
}

// Resume deletes the pause lock of group (state.GlobalScope for the global one) and returns the lock it
// deleted; the agent resumes at its next look. The delete and the answer are one strongly consistent request
// (state.Store.LiftLock): a pause taken a moment before is lifted and returned, never reported as "not paused"
// from a listing that does not show it yet. A lock that already expired is deleted too. Errors: ErrNotPaused
// (wrapped; the message says whether a global pause still holds at now, as the lock listing shows it) when the
// scope had no lock, or the store's error.
func Resume(ctx context.Context, store state.Store, group string, now time.Time) (state.Lock, error) {
	lifted, ok, err := store.LiftLock(ctx, group)
	if err != nil {
		return state.Lock{}, fmt.Errorf("resuming %s: %w", state.Lock{Group: group}.Scope(), err)
	}
	if ok {
		lifted.Group = group
		return lifted, nil
	}
	if group == state.GlobalScope {
		notPaused := fmt.Errorf("the agent is %w globally", ErrNotPaused)
		locks, err := store.ListLocks(ctx)
		if err != nil {
			return state.Lock{}, notPaused
		}
		var held []string
		for _, l := range locks {
			if l.Group != state.GlobalScope && l.Active(now) {
				held = append(held, l.Group)
			}
		}
		if len(held) > 0 {
			return state.Lock{}, fmt.Errorf("%w; group pauses hold %s", notPaused, strings.Join(held, ", "))
		}
		return state.Lock{}, notPaused
	}
	notPaused := fmt.Errorf("group %s is %w", group, ErrNotPaused)
	locks, err := store.ListLocks(ctx)
	if err != nil {
		return state.Lock{}, fmt.Errorf("%w by its own lock (the other pause locks could not be read: %v)", notPaused, err)
	}
	for _, l := range locks {
		if l.Group == state.GlobalScope && l.Active(now) {
			return state.Lock{}, fmt.Errorf("%w by its own lock; the global pause by %s (%s) holds every group", notPaused, l.Who, l.Reason)
		}
	}
	return state.Lock{}, notPaused
}

// Approve records that who approved the group's current target AMI (ApprovedImage = TargetImageID,
// ApprovedBy = who) with a conditional write; when the agent moved the record in between (state.ErrConflict)
// it re-reads and decides once more. An "approved" history entry (Detail: who) is written in the same atomic
// write (state.Store.PutRolloutWithHistory), so a lost race leaves none. Only a
// rollout waiting for its approval (WaitingForApproval) is approved, unless force: a forced approval is
// recorded in any phase and takes effect when the group waits for that AMI's approval. Approving the same
// AMI again by the same person writes nothing. A non-empty image is the AMI the operator reviewed: the
// approval is refused when the target is another one (the source moved on since). It returns the record as
// stored. Errors: group or who empty, no rollout record (wraps state.ErrNotFound), no target AMI yet, a target
// other than image, not waiting for approval (without force), a second conflict (wraps state.ErrConflict), or
// the store's error.
func Approve(ctx context.Context, store state.Store, group, image, who string, force bool, now time.Time) (state.Rollout, error) {
	if group == "" {
		return state.Rollout{}, errors.New("approve needs a group")
	}
	if strings.TrimSpace(who) == "" {
		return state.Rollout{}, errors.New("an approval needs to say who approved")
	}
	r, err := update(ctx, store, group, func(r *state.Rollout) (bool, error) {
		if r.TargetImageID == "" {
			return false, fmt.Errorf("group %s has no target AMI to approve yet (phase %s)", group, r.Phase)
		}
		if err := approvingImage(group, image, *r); err != nil {
			return false, err
		}
		if !force && !WaitingForApproval(*r) {
			reason := ""
			if r.Reason != "" {
				reason = ", reason: " + r.Reason
			}
			if r.Phase == state.PhaseWaiting && strings.HasPrefix(r.Reason, "soak:") {
				return false, &WaitingForSoakError{Group: group, Reason: r.Reason, Image: r.TargetImageID}
			}
			return false, fmt.Errorf("group %s is not waiting for approval (phase %s%s): nothing to approve; pass --force to record an approval of %s anyway",
				group, r.Phase, reason, r.TargetImageID)
		}
		if r.ApprovedImage == r.TargetImageID && r.ApprovedBy == who {
			return false, nil
		}
		r.ApprovedImage, r.ApprovedBy = r.TargetImageID, who
		return true, nil
	}, func(r state.Rollout) []state.HistoryEntry {
		return []state.HistoryEntry{{Group: group, At: now, Event: HistoryApproved, NewImage: r.ApprovedImage, Detail: who}}
	})
	return r, err
}

// RollbackPlan is what a manual rollback of one group will do, for a confirmation prompt.
type RollbackPlan struct {
	Group string
	// Platform is the group's platform (ecs or eks), which names its drain.
	Platform string
	// Phase is the rollout's phase now (Completed, RolledBack, Halted, Waiting, Idle).
	Phase state.Phase
	// From is the current target AMI, which the group leaves; To the AMI it is rolled to.
	From, To string
	// Instances is the group's instance count and OnFrom how many of them run From, as last observed by the
	// agent: an instance refresh replaces them.
	Instances, OnFrom int
	// Halted is the replacement an older agent's rollout stopped in (state.Rollout.ByOlderEngine), if any:
	// desired capacity and MaxSize may still hold that agent's extra instance.
	Halted *state.Replacement
	// Unrecorded is set when To appears nowhere in the group's history nor as its previous AMI, and force
	// let the rollback go on anyway.
	Unrecorded bool
	// Nodegroup is set for an EKS managed node group: From and To then name releases ("release
	// 1.31.7-20250610") or launch template versions, and EKS replaces the nodes itself.
	Nodegroup *NodegroupRollbackPlan
	// Refresh is set for a rollout in an instance refresh: the agent rolls that refresh back
	// (RollbackInstanceRefresh, or a refresh to the previous launch template version).
	Refresh *RefreshRollbackPlan
	// Source is the record's source of From: the SSM parameter the agent resolved it from, or "manual
	// rollback by WHO" when From was itself a rollback's target.
	Source string
}

// amiID is the form of an EC2 image id: ami- and 8 (older) or 17 lowercase hexadecimal digits.
var amiID = regexp.MustCompile(`^ami-([0-9a-f]{8}|[0-9a-f]{17})$`)

// ValidateAMIID returns a clear error when id is not an EC2 image id (ami- followed by 8 or 17 lowercase
// hexadecimal digits). Nothing is trimmed: surrounding spaces are an error of their own.
func ValidateAMIID(id string) error {
	switch {
	case amiID.MatchString(id):
		return nil
	case id != strings.TrimSpace(id) && amiID.MatchString(strings.TrimSpace(id)):
		return fmt.Errorf("%q is not an AMI id: remove the spaces around it", id)
	}
	return fmt.Errorf("%q is not an AMI id (ami- followed by 8 or 17 lowercase hexadecimal digits, e.g. ami-0a1b2c3d4e5f60718)", id)
}

// rollbackPhases are the phases a manual rollback may start from: nothing is moving.
var rollbackPhases = map[state.Phase]bool{state.PhaseIdle: true, state.PhaseCompleted: true, state.PhaseRolledBack: true,
	state.PhaseHalted: true, state.PhaseWaiting: true}

// PlanRollback says what Rollback(ctx, store, group, to, force, ...) would do now, without writing. to == ""
// picks the AMI the group ran before its current target (see Rollback). Errors are those of Rollback.
func PlanRollback(ctx context.Context, store state.Store, group, to string, force bool) (RollbackPlan, error) {
	r, err := getRollout(ctx, store, group)
	if err != nil {
		return RollbackPlan{}, err
	}
	return planRollback(ctx, store, r, to, force)
}

func planRollback(ctx context.Context, store state.Store, r state.Rollout, to string, force bool) (RollbackPlan, error) {
	if r.Nodegroup != nil {
		return planNodegroupRollback(r, to, force)
	}
	if refreshRollbackAllowed(r) { // refresh.go
		return planRefreshRollback(r, to, force)
	}
	if !rollbackPhases[r.Phase] {
		if r.Active() {
			return RollbackPlan{}, &RolloutInProgressError{Group: r.Group, Position: string(r.Phase) + "/" + stepOf(r)}
		}
		return RollbackPlan{}, fmt.Errorf("the rollout of %s is in phase %q, which this patch-agent does not know: refusing to roll back "+
			"(only Idle, Completed, RolledBack, Halted and Waiting rollouts are; is a newer agent writing the table?)", r.Group, r.Phase)
	}
	if Rearmed(r) {
		again, err := PendingRetry(ctx, store, r)
		if err != nil {
			return RollbackPlan{}, err
		}
		if again == "" {
			again = "the rolled-back AMI"
		}
		return RollbackPlan{}, fmt.Errorf("group %s: a retry of %s is requested; the agent rolls it at its next look, through every gate: "+
			"nothing to roll back until then (status shows when the agent takes it; roll it back then)", r.Group, again)
	}
	// The rollback leaves the AMI status shows as the group's target (an automatic rollback's record keeps the
	// AMI it rolled back from as TargetImageID, while the group is on the one restored), and counts the
	// instances status counts on it.
	from, _, onFrom := statusImages(r)
	if from == "" {
		return RollbackPlan{}, fmt.Errorf("group %s has no target AMI yet: nothing to roll back from", r.Group)
	}
	explicit := to != ""
	if !explicit {
		var err error
		if to, err = previousImage(ctx, store, r, from); err != nil {
			return RollbackPlan{}, err
		}
	}
	if err := ValidateAMIID(to); err != nil {
		return RollbackPlan{}, err
	}
	if to == from {
		if from != r.TargetImageID {
			return RollbackPlan{}, fmt.Errorf("group %s already targets %s (rolled back from %s): nothing to roll back; name another AMI with --to",
				r.Group, to, r.TargetImageID)
		}
		return RollbackPlan{}, fmt.Errorf("group %s already targets %s: nothing to roll back", r.Group, to)
	}
	if from != r.TargetImageID && to == r.TargetImageID {
		// An approved rollback skips the gates; the AMI the rollout rolled back from goes again only through them.
		return RollbackPlan{}, fmt.Errorf("%s is the AMI the rollout of %s rolled back from: a rollback would roll it again past every gate; "+
			"once its cause is fixed, patch-agent retry %s rolls it through them", to, r.Group, r.Group)
	}
	p := RollbackPlan{Group: r.Group, Platform: r.Platform, Phase: r.Phase, From: from, To: to, Instances: r.Instances, OnFrom: onFrom, Source: r.Source}
	if explicit {
		known, err := knownImage(ctx, store, r, to)
		if err != nil {
			return RollbackPlan{}, err
		}
		if !known && !force {
			return RollbackPlan{}, &UnrecordedImageError{Image: to, Group: r.Group}
		}
		p.Unrecorded = !known
	}
	if r.Current != nil && r.ByOlderEngine() {
		c := *r.Current
		p.Halted = &c
	}
	return p, nil
}

// knownImage reports whether ami is the record's previous AMI or the previous or new AMI of any entry of the
// group's history: an AMI the group ran or was meant to run.
func knownImage(ctx context.Context, store state.Store, r state.Rollout, ami string) (bool, error) {
	if ami == r.PreviousImageID {
		return true, nil
	}
	hist, err := store.History(ctx, r.Group)
	if err != nil {
		return false, fmt.Errorf("reading history of %s: %w", r.Group, err)
	}
	for _, e := range hist {
		if e.PreviousImage == ami || e.NewImage == ami {
			return true, nil
		}
	}
	return false, nil
}

// previousImage is the AMI the group ran before target, its current target as status shows it: the
// PreviousImage of the last "completed" history entry that completed target, else the record's
// PreviousImageID (a halted target never completed, and the group still runs the previous one; after an
// automatic rollback that is target itself, which the caller refuses).
func previousImage(ctx context.Context, store state.Store, r state.Rollout, target string) (string, error) {
	hist, err := store.History(ctx, r.Group)
	if err != nil {
		return "", fmt.Errorf("reading history of %s: %w", r.Group, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if e := hist[i]; e.Event == "completed" && e.NewImage == target && e.PreviousImage != "" {
			return e.PreviousImage, nil
		}
	}
	if r.PreviousImageID != "" && (r.PreviousImageID != target || target != r.TargetImageID) {
		return r.PreviousImageID, nil
	}
	return "", fmt.Errorf("no previous AMI is recorded for group %s: name the AMI to roll back to (--to ami-...)", r.Group)
}

// Rollback starts a manual rollback of group to the AMI to (default: the AMI the group ran before its
// current target — the PreviousImage of the "completed" history entry of the current target, else the
// record's PreviousImageID). One conditional write (re-read and retried once on state.ErrConflict) turns the
// record into a new rollout: RollbackFrom = PreviousImageID = the current target, TargetImageID = to,
// Phase Detected, Source "manual rollback by <who>", progress cleared, ApprovedImage = to (the operator's
// request is its approval), with a "manual-rollback" history entry in the same atomic write. The agent rolls the group to
// `to` through its normal steps (launch template version, then an instance refresh or the group's older strategy) and does not roll the old
// target again while the source still names it. It returns the record as stored.
//
// An EKS managed node group's record (Rollout.Nodegroup) is rolled back differently: from Completed or
// Halted/NodegroupUpdate only, to the previous release or launch template version (to and force must be
// empty), by recording a new ClientRequestToken and moving to RollingBack/NodegroupUpdate; the agent sends that
// UpdateNodegroupVersion (see nodegroup.go). Refused while the last EKS update is InProgress.
//
// A rollback starts only from Idle, Completed, RolledBack, Halted or Waiting. An explicit `to` must be an AMI
// id that the group's history (previous or new AMI of any entry) or the record's PreviousImageID names,
// unless force.
//
// Errors: who empty; no rollout record (wraps state.ErrNotFound); a rollout in progress (Active and not
// Waiting: "rollout in progress at <phase>/<step>: ..."); a phase this package does not know; no target
// AMI; no previous AMI known and to empty; to not an AMI id, the current target, or (without force) not in
// the group's history; a second conflict (wraps state.ErrConflict); the store's errors.
func Rollback(ctx context.Context, store state.Store, group, to, who string, force bool, now time.Time) (state.Rollout, error) {
	if group == "" {
		return state.Rollout{}, errors.New("rollback needs a group")
	}
	if strings.TrimSpace(who) == "" {
		return state.Rollout{}, errors.New("a rollback needs to say who asked for it")
	}
	var plan RollbackPlan
	next, err := update(ctx, store, group, func(r *state.Rollout) (bool, error) {
		p, err := planRollback(ctx, store, *r, to, force)
		if err != nil {
			return false, err
		}
		plan = p
		if r.Nodegroup != nil {
			return true, applyNodegroupRollback(r, who, now)
		}
		if refreshRollbackAllowed(*r) {
			applyRefreshRollback(r, who, now)
			return true, nil
		}
		r.RollbackFrom, r.PreviousImageID, r.TargetImageID = p.From, p.From, p.To
		r.Source, r.SourceVersion, r.SourceModified, r.DetectedAt = state.ManualRollbackSource+who, 0, time.Time{}, now
		r.Current, r.Strategy, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = nil, "", nil, "", nil
		r.Phase, r.Reason = state.PhaseDetected, ""
		r.ApprovedImage, r.ApprovedBy = p.To, who
		r.SetBacks, r.SetBackBy = 0, "" // set-backs count against the AMI rolled back from
		r.OnTarget = 0                  // counted against the new target at the agent's next tick
		r.Steps++
		r.UpdatedAt = now
		return true, nil
	}, func(state.Rollout) []state.HistoryEntry {
		return []state.HistoryEntry{{Group: group, At: now, Event: HistoryManualRollback, PreviousImage: plan.From, NewImage: plan.To, Detail: who}}
	})
	if err != nil {
		return state.Rollout{}, err
	}
	return next, nil
}

// update reads the rollout of group, lets change edit it and writes it conditionally on the version read,
// with the history entries that history returns for the changed record in the same atomic write. On
// state.ErrConflict it re-reads and tries once more. change returns false to write nothing. A change the
// transition table does not declare (state.Transitions) is not written: the error wraps state.ErrTransition.
func update(ctx context.Context, store RolloutStore, group string, change func(*state.Rollout) (bool, error),
	history func(state.Rollout) []state.HistoryEntry) (state.Rollout, error) {
	for attempt := 1; ; attempt++ {
		r, err := getRollout(ctx, store, group)
		if err != nil {
			return state.Rollout{}, err
		}
		before := r.Clone()
		write, err := change(&r)
		if err != nil {
			return state.Rollout{}, err
		}
		if !write {
			return r, nil
		}
		if err := state.CheckTransition(state.WriterOperator, before, r); err != nil {
			return state.Rollout{}, err
		}
		next, err := store.PutRolloutWithHistory(ctx, r, history(r))
		switch {
		case err == nil:
			return next, nil
		case errors.Is(err, state.ErrConflict) && attempt == 1:
			continue // the agent moved the record first: decide again on the new one
		case errors.Is(err, state.ErrConflict):
			return state.Rollout{}, fmt.Errorf("the rollout of %s changed twice while being updated; look at status and try again: %w", group, err)
		default:
			return state.Rollout{}, fmt.Errorf("writing rollout of %s: %w", group, err)
		}
	}
}

// RolloutStore is the part of state.Store an operator's change of one rollout record needs.
type RolloutStore interface {
	GetRollout(ctx context.Context, group string) (state.Rollout, error)
	PutRolloutWithHistory(ctx context.Context, r state.Rollout, history []state.HistoryEntry) (state.Rollout, error)
}

// getRollout reads the rollout of group with an operator's error when there is none.
func getRollout(ctx context.Context, store RolloutStore, group string) (state.Rollout, error) {
	r, err := store.GetRollout(ctx, group)
	if errors.Is(err, state.ErrNotFound) {
		return state.Rollout{}, fmt.Errorf("no rollout record for group %s: the agent has not managed it yet (is it tagged patch-agent/enabled=true, and is this the agent's table?): %w",
			group, state.ErrNotFound)
	}
	if err != nil {
		return state.Rollout{}, fmt.Errorf("reading rollout of %s: %w", group, err)
	}
	return r, nil
}

func stepOf(r state.Rollout) string {
	if r.Current == nil {
		return "-"
	}
	return r.Current.Step.String()
}
