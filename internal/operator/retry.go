package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// HistoryRetried is the history event of an operator's retry of a rolled-back AMI (Detail: who).
const HistoryRetried = "retried"

// ErrRetryAlreadyRequested is returned (wrapped) by RearmForRetry and Retry when a retry of the group is
// already requested and the agent has not taken it yet (Rearmed): nothing is written.
var ErrRetryAlreadyRequested = errors.New("a retry is already requested")

// Retry lets the agent roll again the AMI a group's rollout rolled back from (RearmForRetry), with a
// conditional write and a "retried" history entry (NewImage: the AMI or EKS release tried again; Detail: who)
// in the same atomic write. The agent detects it at its next look and takes it through every gate (AMI gate,
// soak, approval, window, alarms, pause). It returns the record as stored and the AMI (or release) to be tried
// again. Errors: group or who empty, no record (wraps state.ErrNotFound), a retry already requested (wraps
// ErrRetryAlreadyRequested; the record as stored is returned with it), a phase with nothing to retry (the
// error says what to do instead), a second conflict (wraps state.ErrConflict), or the store's error.
func Retry(ctx context.Context, store RolloutStore, group, who string, now time.Time) (state.Rollout, string, error) {
	if group == "" {
		return state.Rollout{}, "", errors.New("retry needs a group")
	}
	if strings.TrimSpace(who) == "" {
		return state.Rollout{}, "", errors.New("a retry needs to say who asked for it")
	}
	var again string
	r, err := update(ctx, store, group, func(r *state.Rollout) (bool, error) {
		var err error
		again, err = RearmForRetry(r)
		if err != nil {
			return false, err
		}
		r.Reason = "retry of " + again + " requested by " + who + ": the agent rolls it again at its next look, through every gate"
		return true, nil
	}, func(r state.Rollout) []state.HistoryEntry {
		return []state.HistoryEntry{{Group: group, At: now, Event: HistoryRetried, NewImage: again, Detail: who}}
	})
	if errors.Is(err, ErrRetryAlreadyRequested) {
		stored, gerr := getRollout(ctx, store, group)
		if gerr != nil {
			return state.Rollout{}, "", err
		}
		return stored, "", err
	}
	return r, again, err
}

// PendingRetry returns the AMI (or EKS release) an operator's retry of r, not taken by the agent yet
// (Rearmed), rolls again: the NewImage of the group's last "retried" history entry, "" when none names one.
// Errors: the store's.
func PendingRetry(ctx context.Context, store state.Store, r state.Rollout) (string, error) {
	hist, err := store.History(ctx, r.Group)
	if err != nil {
		return "", fmt.Errorf("reading history of %s: %w", r.Group, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if e := hist[i]; e.Event == HistoryRetried && e.NewImage != "" {
			return e.NewImage, nil
		}
	}
	return "", nil
}

// Rearmed reports whether r is a rolled-back rollout an operator's retry re-armed (RearmForRetry) and the
// agent has not detected again yet: RolledBack with its failed target forgotten.
func Rearmed(r state.Rollout) bool {
	if r.Phase != state.PhaseRolledBack {
		return false
	}
	if p := r.Nodegroup; p != nil && !p.Custom() {
		return p.TargetRelease == ""
	}
	return r.TargetImageID == ""
}

// RearmForRetry edits a rollout record so that the agent rolls the AMI (or EKS release) its source names once
// more, through every gate, after that AMI failed and was rolled back: what keeps the agent from rolling it
// again (RollbackFrom, and the failed target of a RolledBack record) is forgotten, and nothing else changes.
// The agent's next look detects the source's AMI as new (the agent's detection of a new AMI or release) and starts a rollout from the
// AMI the group runs now. It returns the AMI (or release) to be tried again, for the operator's history.
//
// Accepted: RolledBack (an automatic rollback after a halt, or an EKS update rolled back), Completed or Idle
// after a manual rollback (RollbackFrom set), a rollout by instance refresh Halted (its refresh ended: it
// starts over from Detected with the same target, and the next refresh skips the instances already on it), and a
// rollout an older agent left mid-replacement, halted (state.Rollout.ByOlderEngine: it starts over by refresh).
// Refused with an error that names the way forward: a record in any other phase (an active rollout, another
// halted rollout: roll it back first), and one with nothing to retry.
func RearmForRetry(r *state.Rollout) (string, error) {
	switch r.Phase {
	case state.PhaseRolledBack:
		if Rearmed(*r) {
			return "", fmt.Errorf("group %s: %w (%s); status shows when the agent takes it", r.Group, ErrRetryAlreadyRequested, r.Reason)
		}
		failed := r.RollbackFrom
		if p := r.Nodegroup; p != nil {
			if failed == "" {
				failed = p.TargetRelease
				if p.Custom() {
					failed = r.TargetImageID
				}
			}
			if p.Custom() {
				r.TargetImageID = ""
			} else {
				p.TargetRelease = ""
			}
		} else {
			// A rollback keeps the failed AMI as the target (an older agent's automatic one without RollbackFrom,
			// a rollback by instance refresh with it): the group runs PreviousImageID, which the next detection
			// takes as the AMI it rolls from.
			if failed == "" {
				failed = r.TargetImageID
			}
			if r.TargetImageID == failed {
				r.TargetImageID = ""
			}
		}
		if failed == "" {
			return "", fmt.Errorf("group %s has no rolled-back AMI to retry", r.Group)
		}
		r.RollbackFrom = ""
		return failed, nil
	case state.PhaseCompleted, state.PhaseIdle:
		if r.RollbackFrom == "" {
			return "", fmt.Errorf("group %s is %s and nothing was rolled back: there is nothing to retry", r.Group, r.Phase)
		}
		failed := r.RollbackFrom
		r.RollbackFrom = ""
		return failed, nil
	case state.PhaseHalted:
		byRefresh := r.Refresh != nil && (r.Current == nil || r.Current.Step == state.StepInstanceRefresh)
		if (byRefresh || r.ByOlderEngine()) && r.TargetImageID != "" {
			// A rollout by instance refresh halts once its refresh ended (cancelled, failed): nothing of it is in
			// flight, and a new refresh skips the instances already on the target. It starts over from Detected
			// with the same target and the same launch template version to roll back to. So does a rollout an
			// older agent left mid-replacement, once the operator checked what its reason names: by refresh.
			r.Phase, r.Current, r.Strategy = state.PhaseDetected, nil, ""
			return r.TargetImageID, nil
		}
		return "", fmt.Errorf("group %s is Halted (%s): roll it back first (`patch-agent rollback %s`), or fix the cause and let the agent roll back; retry once it is RolledBack",
			r.Group, r.Reason, r.Group)
	}
	return "", fmt.Errorf("group %s is %s: a retry applies to a rolled-back or halted rollout only (status shows where it is)", r.Group, r.Phase)
}
