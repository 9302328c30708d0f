// Package operator holds the controls an operator uses on the agent's records: pause and resume (pause
// locks), approve, manual rollback, status and history. They are plain functions over a state.Store with the
// time passed in, shared by the CLI and its tests. None calls AWS: the agent acts on what they write at its
// next reconcile tick, through its normal, crash-safe steps.
package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// ErrNotPaused is returned by Resume when the scope it names has no pause lock.
var ErrNotPaused = errors.New("not paused")

// HistoryManualRollback is the Event of the history entry Rollback appends.
const HistoryManualRollback = "manual-rollback"

// Pause writes the pause lock of group (state.GlobalScope, "", pauses every target), replacing any pause of
// the same scope. From the agent's next tick no new surge, rollout drain or termination starts in that scope;
// lifecycle-hook drains go on and waits already in flight stay as they are. until (zero: until Resume) ends
// the pause by itself. Errors: reason or who empty, until not after now, or the store's write error.
func Pause(ctx context.Context, store state.Store, group, reason, who string, until, now time.Time) error {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return errors.New("a pause needs a reason: it is shown in status and in the agent's logs (e.g. \"incident 4711\")")
	}
	if strings.TrimSpace(who) == "" {
		return errors.New("a pause needs to say who paused")
	}
	if !until.IsZero() && !until.After(now) {
		return fmt.Errorf("pause until %s is not in the future (now %s)", until.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	l := state.Lock{Group: group, Reason: reason, Who: who, Since: now, Until: until}
	if err := store.PutLock(ctx, l); err != nil {
		return fmt.Errorf("pausing %s: %w", l.Scope(), err)
	}
	return nil
}

// Resume deletes the pause lock of group (state.GlobalScope for the global one); the agent resumes at its
// next tick. A lock that already expired is deleted too. Errors: ErrNotPaused (wrapped, the message says
// whether a global pause still holds) when the scope has no lock, or the store's error.
func Resume(ctx context.Context, store state.Store, group string) error {
	locks, err := store.ListLocks(ctx)
	if err != nil {
		return fmt.Errorf("reading pause locks: %w", err)
	}
	var own, global *state.Lock
	for i := range locks {
		switch locks[i].Group {
		case group:
			own = &locks[i]
		case state.GlobalScope:
			global = &locks[i]
		}
	}
	if own == nil {
		if group == state.GlobalScope {
			return fmt.Errorf("the agent is %w globally", ErrNotPaused)
		}
		err := fmt.Errorf("group %s is %w", group, ErrNotPaused)
		if global != nil {
			err = fmt.Errorf("%w by its own lock; the global pause by %s (%s) holds every group: resume that instead", err, global.Who, global.Reason)
		}
		return err
	}
	if err := store.DeleteLock(ctx, group); err != nil {
		return fmt.Errorf("resuming %s: %w", own.Scope(), err)
	}
	return nil
}

// Approve records that who approved the group's current target AMI (ApprovedImage = TargetImageID,
// ApprovedBy = who) with a conditional write; when the agent moved the record in between (state.ErrConflict)
// it re-reads and writes once more. Approving the same AMI again by the same person writes nothing. It
// returns the record as stored. Errors: group or who empty, no rollout record (wraps state.ErrNotFound), no
// target AMI yet, a second conflict (wraps state.ErrConflict), or the store's error.
func Approve(ctx context.Context, store state.Store, group, who string) (state.Rollout, error) {
	if group == "" {
		return state.Rollout{}, errors.New("approve needs a group")
	}
	if strings.TrimSpace(who) == "" {
		return state.Rollout{}, errors.New("an approval needs to say who approved")
	}
	return update(ctx, store, group, func(r *state.Rollout) (bool, error) {
		if r.TargetImageID == "" {
			return false, fmt.Errorf("group %s has no target AMI to approve yet (phase %s)", group, r.Phase)
		}
		if r.ApprovedImage == r.TargetImageID && r.ApprovedBy == who {
			return false, nil
		}
		r.ApprovedImage, r.ApprovedBy = r.TargetImageID, who
		return true, nil
	})
}

// RollbackPlan is what a manual rollback of one group will do, for a confirmation prompt.
type RollbackPlan struct {
	Group string
	// Phase is the rollout's phase now (Completed, RolledBack, Halted, Waiting, Idle).
	Phase state.Phase
	// From is the current target AMI, which the group leaves; To the AMI it is rolled to.
	From, To string
	// Instances is the group's instance count and OnFrom how many of them run From, as last observed by the
	// agent: those are replaced one at a time (surge, drain, terminate).
	Instances, OnFrom int
	// Halted is the replacement a halted rollout stopped in, if any: its surge instance stays in the group.
	Halted *state.Replacement
}

// PlanRollback says what Rollback(ctx, store, group, to, ...) would do now, without writing. to == ""
// picks the AMI the group ran before its current target (see Rollback). Errors are those of Rollback.
func PlanRollback(ctx context.Context, store state.Store, group, to string) (RollbackPlan, error) {
	r, err := getRollout(ctx, store, group)
	if err != nil {
		return RollbackPlan{}, err
	}
	return planRollback(ctx, store, r, to)
}

func planRollback(ctx context.Context, store state.Store, r state.Rollout, to string) (RollbackPlan, error) {
	if r.Active() && r.Phase != state.PhaseWaiting {
		return RollbackPlan{}, fmt.Errorf("rollout in progress at %s/%s: let it finish (or halt) first; pause holds it where it is", r.Phase, stepOf(r))
	}
	if r.TargetImageID == "" {
		return RollbackPlan{}, fmt.Errorf("group %s has no target AMI yet: nothing to roll back from", r.Group)
	}
	if to == "" {
		var err error
		if to, err = previousImage(ctx, store, r); err != nil {
			return RollbackPlan{}, err
		}
	}
	if !strings.HasPrefix(to, "ami-") {
		return RollbackPlan{}, fmt.Errorf("%q is not an AMI id (ami-...)", to)
	}
	if to == r.TargetImageID {
		return RollbackPlan{}, fmt.Errorf("group %s already targets %s: nothing to roll back", r.Group, to)
	}
	p := RollbackPlan{Group: r.Group, Phase: r.Phase, From: r.TargetImageID, To: to, Instances: r.Instances, OnFrom: r.OnTarget}
	if r.Current != nil {
		c := *r.Current
		p.Halted = &c
	}
	return p, nil
}

// previousImage is the AMI the group ran before its current target: the PreviousImage of the last
// "completed" history entry that completed the current target, else the record's PreviousImageID (a halted
// or rolled-back target never completed, and the group still runs the previous one).
func previousImage(ctx context.Context, store state.Store, r state.Rollout) (string, error) {
	hist, err := store.History(ctx, r.Group)
	if err != nil {
		return "", fmt.Errorf("reading history of %s: %w", r.Group, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if e := hist[i]; e.Event == "completed" && e.NewImage == r.TargetImageID && e.PreviousImage != "" {
			return e.PreviousImage, nil
		}
	}
	if r.PreviousImageID != "" && r.PreviousImageID != r.TargetImageID {
		return r.PreviousImageID, nil
	}
	return "", fmt.Errorf("no previous AMI is recorded for group %s: name the AMI to roll back to (--to ami-...)", r.Group)
}

// Rollback starts a manual rollback of group to the AMI to (default: the AMI the group ran before its
// current target — the PreviousImage of the "completed" history entry of the current target, else the
// record's PreviousImageID). One conditional write (re-read and retried once on state.ErrConflict) turns the
// record into a new rollout: RollbackFrom = PreviousImageID = the current target, TargetImageID = to,
// Phase Detected, Source "manual rollback by <who>", progress cleared, ApprovedImage = to (the operator's
// request is its approval). Then a "manual-rollback" history entry is appended. The agent rolls the group to
// `to` through its normal steps (launch template version, surge, drain, terminate) and does not roll the old
// target again while the source still names it. It returns the record as stored.
//
// Errors: who empty; no rollout record (wraps state.ErrNotFound); a rollout in progress (Active and not
// Waiting: "rollout in progress at <phase>/<step>: ..."); no target AMI; no previous AMI known and to empty;
// to not an AMI id or the current target; a second conflict (wraps state.ErrConflict); the store's errors.
func Rollback(ctx context.Context, store state.Store, group, to, who string, now time.Time) (state.Rollout, error) {
	if group == "" {
		return state.Rollout{}, errors.New("rollback needs a group")
	}
	if strings.TrimSpace(who) == "" {
		return state.Rollout{}, errors.New("a rollback needs to say who asked for it")
	}
	var plan RollbackPlan
	next, err := update(ctx, store, group, func(r *state.Rollout) (bool, error) {
		p, err := planRollback(ctx, store, *r, to)
		if err != nil {
			return false, err
		}
		plan = p
		r.RollbackFrom, r.PreviousImageID, r.TargetImageID = p.From, p.From, p.To
		r.Phase, r.Reason = state.PhaseDetected, ""
		r.Source, r.SourceVersion, r.SourceModified, r.DetectedAt = "manual rollback by "+who, 0, time.Time{}, now
		r.Current, r.Replaced, r.NewTemplateVersion, r.PreviousTemplate = nil, nil, "", nil
		r.ApprovedImage, r.ApprovedBy = p.To, who
		r.OnTarget = 0 // counted against the new target at the agent's next tick
		r.Steps++
		r.UpdatedAt = now
		return true, nil
	})
	if err != nil {
		return state.Rollout{}, err
	}
	if err := store.AppendHistory(ctx, state.HistoryEntry{Group: group, At: now, Event: HistoryManualRollback,
		PreviousImage: plan.From, NewImage: plan.To, Detail: who}); err != nil {
		return next, fmt.Errorf("rollback of %s to %s is recorded, but its history entry is not: %w", group, plan.To, err)
	}
	return next, nil
}

// update reads the rollout of group, lets change edit it and writes it conditionally on the version read.
// On state.ErrConflict it re-reads and tries once more. change returns false to write nothing.
func update(ctx context.Context, store state.Store, group string, change func(*state.Rollout) (bool, error)) (state.Rollout, error) {
	for attempt := 1; ; attempt++ {
		r, err := getRollout(ctx, store, group)
		if err != nil {
			return state.Rollout{}, err
		}
		write, err := change(&r)
		if err != nil {
			return state.Rollout{}, err
		}
		if !write {
			return r, nil
		}
		next, err := store.PutRollout(ctx, r)
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

// getRollout reads the rollout of group with an operator's error when there is none.
func getRollout(ctx context.Context, store state.Store, group string) (state.Rollout, error) {
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
	return string(r.Current.Step)
}
