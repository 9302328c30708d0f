package eksupgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// ErrSameApprover is wrapped by Approve's error when the workflow's two-person rule refuses an approval by
// the identity that requested the plan.
var ErrSameApprover = errors.New("two-person rule: the approver must not be the requester")

// ErrNothingToApprove is wrapped by Approve's error for a workflow that is not waiting for an approval: it
// completed, or halted (a halted workflow goes on with --retry, or a new run plans it again).
var ErrNothingToApprove = errors.New("there is no plan waiting for an approval")

// ErrNoWorkflow is wrapped by the errors of Approve and Status for a cluster that has no upgrade workflow.
var ErrNoWorkflow = errors.New("no upgrade workflow")

// Get returns the upgrade workflow of cluster. Errors: ErrNoWorkflow (wrapped, with how to start one) when
// there is none, or the store's error.
func Get(ctx context.Context, store Store, cluster string) (state.Workflow, error) {
	w, err := store.GetWorkflow(ctx, cluster)
	if errors.Is(err, state.ErrNotFound) {
		return w, fmt.Errorf("%w for EKS cluster %s: start one with `patch-agent eks upgrade --cluster %s --to 1.<minor>`", ErrNoWorkflow, cluster, cluster)
	}
	if err != nil {
		return w, fmt.Errorf("reading the upgrade workflow of %s: %w", cluster, err)
	}
	return w, nil
}

// Approve records that who approved the plan of cluster's upgrade workflow (`patch-agent approve
// eks:<cluster>`), with a conditional write (re-read and tried once more when the record moved in between),
// and appends an "approved" history entry. The workflow goes on at its next run (`patch-agent eks upgrade`
// again); approving an approved workflow writes nothing. It returns the record as stored. Errors: who empty,
// ErrNoWorkflow (wrapped), ErrSameApprover (wrapped: the two-person rule and who requested the plan), a
// ErrNothingToApprove (wrapped: a workflow that completed, or halted), a second
// conflict (wraps state.ErrConflict), or the store's errors.
func Approve(ctx context.Context, store Store, cluster, who string, now time.Time) (state.Workflow, error) {
	if strings.TrimSpace(who) == "" {
		return state.Workflow{}, errors.New("an approval needs to say who approved")
	}
	for attempt := 1; ; attempt++ {
		w, err := Get(ctx, store, cluster)
		if err != nil {
			return w, err
		}
		if w.Phase == state.WorkflowCompleted {
			// Checked before "already approved": a finished upgrade has nothing left to approve, and saying
			// nothing would read as the approval of a plan that no run will carry out.
			return w, fmt.Errorf("%w: the upgrade of %s to %s completed at %s; start a new upgrade with `patch-agent eks upgrade --cluster %s --to 1.<minor>`",
				ErrNothingToApprove, cluster, w.To, w.UpdatedAt.UTC().Format(time.RFC3339), cluster)
		}
		if w.ApprovedBy != "" {
			return w, nil
		}
		if w.Phase == state.WorkflowHalted || w.Phase == state.WorkflowPreflight {
			return w, fmt.Errorf("%w: the upgrade of %s to %s is %s (%s)", ErrNothingToApprove, cluster, w.To, w.Phase, w.Reason)
		}
		if w.TwoPersonRule && SamePrincipal(who, w.RequestedBy) {
			return w, fmt.Errorf("%w: %s requested the upgrade of %s to %s, and %s is the same principal (%s); someone acting as another principal must approve it", ErrSameApprover, w.RequestedBy, cluster, w.To, who, Principal(who))
		}
		if err := flushPending(ctx, store, w); err != nil {
			return w, err
		}
		e := state.HistoryEntry{Group: Subject(cluster), At: now, Event: "approved",
			Detail: fmt.Sprintf("approval %s: %s -> %s; by %s", cluster, w.From, w.To, who)}
		w.ApprovedBy, w.ApprovedAt, w.UpdatedAt = who, now, now
		w.PendingHistory = []state.HistoryEntry{e} // appended again by the next run if this one stops before it is
		w.Transitions++
		next, err := store.PutWorkflow(ctx, w)
		switch {
		case errors.Is(err, state.ErrConflict) && attempt == 1:
			continue
		case errors.Is(err, state.ErrConflict):
			return w, fmt.Errorf("the upgrade workflow of %s changed twice while being approved; look at its status and try again: %w", cluster, err)
		case err != nil:
			return w, fmt.Errorf("writing the approval of the upgrade of %s: %w", cluster, err)
		}
		if err := store.AppendHistory(ctx, e); err != nil {
			return next, fmt.Errorf("the approval of the upgrade of %s is recorded, but its history entry is not: %w", cluster, err)
		}
		return next, nil
	}
}

// assumedRolePrefix starts the part of an STS ARN after the account that names a role session:
// arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION.
const assumedRolePrefix = "assumed-role/"

// Principal returns the principal an identity ARN (STS GetCallerIdentity's Arn, or a --who name) stands for,
// as the two-person rule compares it. For an assumed role, arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION, it
// is arn:aws:sts::ACCOUNT:assumed-role/ROLE: the session name is chosen by whoever calls sts:AssumeRole
// (RoleSessionName, https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html), so one person can
// take any number of them and cannot count as two. Anything else (an IAM user's ARN, a name) is returned as it
// is. Two people who work through the same role are one principal: under the two-person rule the approver
// uses another role or an IAM user (IAM identifiers:
// https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-arns).
func Principal(identity string) string {
	i := strings.Index(identity, ":"+assumedRolePrefix)
	if !strings.HasPrefix(identity, "arn:") || i < 0 {
		return identity
	}
	rest := identity[i+1+len(assumedRolePrefix):]
	if j := strings.Index(rest, "/"); j >= 0 {
		return identity[:i+1+len(assumedRolePrefix)+j]
	}
	return identity
}

// SamePrincipal reports whether identities a and b are the same principal (Principal): what the two-person
// rule refuses.
func SamePrincipal(a, b string) bool { return Principal(a) == Principal(b) }
