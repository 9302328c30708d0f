package eksupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"

	"github.com/patch-agent/patch-agent/internal/state"
)

// adoptSlack is how much earlier than the step's StartedAt (the local clock, written before the call) an
// update's CreatedAt (EKS's clock) may be for a resumed run to take it as the one its step started.
const adoptSlack = 5 * time.Minute

// progressEvery is how often a progress line says that an update is still running.
const progressEvery = 5 * time.Minute

// Outcomes of updateCall.precheck.
const (
	proceed = iota
	skip    // the resource is already at the target
	action  // an operator must do it (Detail says what)
	refuse  // the step cannot be done as planned: halt
)

// updateCall is how one kind of update step talks to EKS.
type updateCall struct {
	// what names the call in progress lines: "UpdateClusterVersion of prod to 1.31".
	what string
	// addon names the add-on whose updates ListUpdates and DescribeUpdate read ("" for the cluster's own).
	addon string
	// updateType and paramType recognise the step's update among the resource's updates.
	updateType ekstypes.UpdateType
	paramType  ekstypes.UpdateParamType
	// precheck reads the resource before the update is requested. An error means "not now" (the run stops
	// and a new one tries again).
	precheck func(ctx context.Context) (outcome int, detail string, err error)
	// start calls the update API with the ClientRequestToken.
	start func(ctx context.Context, token string) (*ekstypes.Update, error)
	// settled reports whether the resource shows the update's effect once EKS says it is Successful; failure
	// (non-empty) halts the workflow.
	settled func(ctx context.Context) (done bool, failure string, err error)
}

// call returns how the current step talks to EKS.
func (r *Runner) call(w state.Workflow) updateCall {
	st := w.Steps[w.Current]
	cluster := aws.String(w.Cluster)
	switch st.Kind {
	case KindControlPlane:
		describe := func(ctx context.Context) (*ekstypes.Cluster, error) {
			out, err := r.EKS.DescribeCluster(ctx, &awseks.DescribeClusterInput{Name: cluster})
			if err != nil {
				return nil, fmt.Errorf("describing EKS cluster %s: %w", w.Cluster, err)
			}
			if out.Cluster == nil {
				return nil, fmt.Errorf("describing EKS cluster %s: empty response", w.Cluster)
			}
			return out.Cluster, nil
		}
		return updateCall{
			what: fmt.Sprintf("UpdateClusterVersion of %s to %s", w.Cluster, st.To), updateType: ekstypes.UpdateTypeVersionUpdate,
			paramType: ekstypes.UpdateParamTypeVersion,
			precheck: func(ctx context.Context) (int, string, error) {
				c, err := describe(ctx)
				if err != nil {
					return proceed, "", err
				}
				switch v := aws.ToString(c.Version); {
				case v == st.To:
					return skip, "the control plane is already at " + st.To, nil
				case v != st.From:
					return refuse, fmt.Sprintf("the control plane is at %s, the workflow was planned at %s: start a new workflow", v, st.From), nil
				case c.Status != ekstypes.ClusterStatusActive:
					return proceed, "", fmt.Errorf("EKS cluster %s is %s, not ACTIVE: run again once it is", w.Cluster, c.Status)
				}
				return proceed, "", nil
			},
			start: func(ctx context.Context, token string) (*ekstypes.Update, error) {
				out, err := r.EKS.UpdateClusterVersion(ctx, &awseks.UpdateClusterVersionInput{Name: cluster, Version: aws.String(st.To),
					ClientRequestToken: aws.String(token)})
				if err != nil {
					return nil, err
				}
				return out.Update, nil
			},
			settled: func(ctx context.Context) (bool, string, error) {
				c, err := describe(ctx)
				if err != nil {
					return false, "", err
				}
				return aws.ToString(c.Version) == st.To && c.Status == ekstypes.ClusterStatusActive, "", nil
			},
		}
	default: // KindAddon
		describe := func(ctx context.Context) (*ekstypes.Addon, error) {
			out, err := r.EKS.DescribeAddon(ctx, &awseks.DescribeAddonInput{ClusterName: cluster, AddonName: aws.String(st.Name)})
			if err != nil {
				return nil, fmt.Errorf("describing add-on %s of EKS cluster %s: %w", st.Name, w.Cluster, err)
			}
			if out.Addon == nil {
				return nil, fmt.Errorf("describing add-on %s of EKS cluster %s: empty response", st.Name, w.Cluster)
			}
			return out.Addon, nil
		}
		return updateCall{
			what: fmt.Sprintf("UpdateAddon %s of %s to %s", st.Name, w.Cluster, st.To), addon: st.Name,
			updateType: ekstypes.UpdateTypeAddonUpdate, paramType: ekstypes.UpdateParamTypeAddonVersion,
			precheck: func(ctx context.Context) (int, string, error) {
				a, err := describe(ctx)
				var notFound *ekstypes.ResourceNotFoundException
				switch {
				case errors.As(err, &notFound):
					return skip, "the add-on is no longer installed", nil
				case err != nil:
					return proceed, "", err
				case aws.ToString(a.AddonVersion) == st.To:
					return skip, "the add-on is already at " + st.To, nil
				case !comparableAddon(aws.ToString(a.AddonVersion), st.To):
					return refuse, fmt.Sprintf("the add-on's version %q cannot be compared with the planned %q: refused rather than risk a downgrade",
						aws.ToString(a.AddonVersion), st.To), nil
				case newerAddon(aws.ToString(a.AddonVersion), st.To):
					return refuse, fmt.Sprintf("the add-on is at %s, newer than the planned %s: an add-on is never downgraded (run again with --retry to plan it again)",
						aws.ToString(a.AddonVersion), st.To), nil
				case a.Status == ekstypes.AddonStatusUpdating || a.Status == ekstypes.AddonStatusCreating || a.Status == ekstypes.AddonStatusDeleting:
					return proceed, "", fmt.Errorf("add-on %s is %s: run again once it is ACTIVE", st.Name, a.Status)
				}
				return proceed, "", nil
			},
			start: func(ctx context.Context, token string) (*ekstypes.Update, error) {
				// PRESERVE keeps the add-on's configuration values that were changed in the cluster.
				out, err := r.EKS.UpdateAddon(ctx, &awseks.UpdateAddonInput{ClusterName: cluster, AddonName: aws.String(st.Name),
					AddonVersion: aws.String(st.To), ResolveConflicts: ekstypes.ResolveConflictsPreserve, ClientRequestToken: aws.String(token)})
				if err != nil {
					return nil, err
				}
				return out.Update, nil
			},
			settled: func(ctx context.Context) (bool, string, error) {
				a, err := describe(ctx)
				if err != nil {
					return false, "", err
				}
				switch a.Status {
				case ekstypes.AddonStatusActive:
					return aws.ToString(a.AddonVersion) == st.To, "", nil
				case ekstypes.AddonStatusUpdating:
					return false, "", nil
				case ekstypes.AddonStatusDegraded:
					// DEGRADED while the add-on's pods roll is waited out, up to DegradedWait after the request.
					if r.now().Sub(st.StartedAt) < r.degradedWait() {
						return false, "", nil
					}
					return false, fmt.Sprintf("the add-on is still DEGRADED at version %s %s after its update was requested%s",
						aws.ToString(a.AddonVersion), r.degradedWait(), addonIssues(a)), nil
				}
				return false, fmt.Sprintf("the add-on is %s at version %s%s", a.Status, aws.ToString(a.AddonVersion), addonIssues(a)), nil
			},
		}
	}
}

// newerAddon reports whether add-on version installed is newer than planned (false when either cannot be
// read: comparableAddon refuses those first).
func newerAddon(installed, planned string) bool {
	c, err := CompareAddonVersions(installed, planned)
	return err == nil && c > 0
}

// comparableAddon reports whether both versions read as EKS add-on versions (vX.Y.Z-eksbuild.N): an update
// between versions that cannot be ordered might be a downgrade, so it is not sent.
func comparableAddon(installed, planned string) bool {
	_, err := CompareAddonVersions(installed, planned)
	return err == nil
}

func addonIssues(a *ekstypes.Addon) string {
	if a.Health == nil || len(a.Health.Issues) == 0 {
		return ""
	}
	var out []string
	for _, i := range a.Health.Issues {
		out = append(out, fmt.Sprintf("%s: %s", i.Code, aws.ToString(i.Message)))
	}
	return "; health issues: " + strings.Join(out, "; ")
}

// update moves an update step: Pending -> Requested (token written, then the call) -> InProgress (update id
// written) -> Completed, or Failed (the workflow halts).
func (r *Runner) update(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	st := w.Steps[w.Current]
	c := r.call(w)
	switch st.Status {
	case state.StepStatusPending:
		return r.request(ctx, w, c)
	case state.StepStatusRequested:
		return r.start(ctx, w, c, true)
	case state.StepStatusInProgress:
		return r.track(ctx, w, c)
	}
	return w, fmt.Errorf("step %s of the upgrade of %s is %s: nothing to do", stepName(w), w.Cluster, st.Status)
}

// request writes the step's ClientRequestToken (Requested) before the update call that depends on it, after
// checking the resource and the pause locks.
func (r *Runner) request(ctx context.Context, w state.Workflow, c updateCall) (state.Workflow, error) {
	outcome, detail, err := c.precheck(ctx)
	if err != nil {
		return w, err
	}
	if w, ended, err := r.endByPrecheck(ctx, w, outcome, detail); ended {
		return w, err
	}
	now := r.now()
	st := &w.Steps[w.Current]
	if st.Kind == KindControlPlane {
		// The control plane's update is the workflow's first change: the plan is checked again right
		// before it, whenever it was approved.
		next, changed, err := r.revalidate(ctx, w)
		if err != nil || changed {
			return next, err
		}
	}
	reason, err := r.pauseReason(ctx, w, c.what)
	if err != nil {
		return w, err
	}
	if reason != "" {
		return r.hold(ctx, w, reason)
	}
	st.Status, st.Token, st.By, st.StartedAt, st.Detail = state.StepStatusRequested, r.token(), r.Who, now, ""
	w.Phase, w.Reason = state.WorkflowRunning, ""
	if w, err = r.save(ctx, w, c.what+": requested", r.entry(w, st.Kind+"-requested", *st, "")); err != nil {
		return w, err
	}
	return r.start(ctx, w, c, false)
}

// start makes the update call of a Requested step with its token and writes the update id (InProgress). A
// resumed run first looks for the update its step may have started before a crash (resumed), so the call
// is not repeated; the token makes even a repeat the same request.
func (r *Runner) start(ctx context.Context, w state.Workflow, c updateCall, resumed bool) (state.Workflow, error) {
	st := &w.Steps[w.Current]
	var u *ekstypes.Update
	if resumed {
		found, err := r.findUpdate(ctx, w, c)
		if err != nil {
			return w, err
		}
		u = found
		if u != nil {
			r.progress("%s: found update %s that the interrupted run started", c.what, aws.ToString(u.Id))
		}
	}
	if u == nil {
		var err error
		if !r.leases().MayAct(w.Lease(), r.Owner, r.now()) {
			// Less than the skew margin is left (this invocation stalled since its last write): a
			// conditional write proves the record is still ours before the update call.
			if w, err = r.save(ctx, w, leaseRenewed); err != nil {
				return w, err
			}
			st = &w.Steps[w.Current]
		}
		u, err = c.start(ctx, st.Token)
		if rejected(err) {
			return r.halt(ctx, w, fmt.Sprintf("EKS refused %s: %v", c.what, err))
		}
		if err != nil {
			return w, fmt.Errorf("%s: %w", c.what, err)
		}
		if u == nil || aws.ToString(u.Id) == "" {
			return w, fmt.Errorf("%s: the answer names no update", c.what)
		}
	}
	st.Status, st.UpdateID = state.StepStatusInProgress, aws.ToString(u.Id)
	return r.save(ctx, w, fmt.Sprintf("%s: update %s %s", c.what, aws.ToString(u.Id), u.Status), r.entry(w, st.Kind+"-started", *st, ""))
}

// rejected reports whether EKS refused an update call for a reason that does not go away by itself: an
// invalid parameter or request (an unsupported version, a blocking insight), or a resource that does not exist.
func rejected(err error) bool {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode() {
	case "InvalidParameterException", "InvalidRequestException", "ResourceNotFoundException":
		return true
	}
	return false
}

// findUpdate returns the update of the step's resource of the step's type and target version created since
// the step was requested (the newest), or nil. It never returns an update of one of the step's earlier
// attempts (EarlierUpdateIDs, recorded by --retry before this attempt's call), nor a Failed or Cancelled
// update created before this attempt was requested: neither can be the one this attempt started, and
// adopting it would halt a retried step on the failure it retries.
func (r *Runner) findUpdate(ctx context.Context, w state.Workflow, c updateCall) (*ekstypes.Update, error) {
	st := w.Steps[w.Current]
	in := &awseks.ListUpdatesInput{Name: aws.String(w.Cluster), AddonName: nilIfEmpty(c.addon)}
	var best *ekstypes.Update
	pages := awseks.NewListUpdatesPaginator(r.EKS, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: listing updates to find the one started before the interruption: %w", c.what, err)
		}
		for _, id := range page.UpdateIds {
			u, err := r.describeUpdate(ctx, w.Cluster, c, id)
			if err != nil {
				return nil, err
			}
			if u.Type != c.updateType || param(u, c.paramType) != st.To || u.CreatedAt == nil || u.CreatedAt.Before(st.StartedAt.Add(-adoptSlack)) {
				continue
			}
			if slices.Contains(st.EarlierUpdateIDs, id) || (failedUpdate(u) && u.CreatedAt.Before(st.StartedAt)) {
				continue
			}
			if best == nil || u.CreatedAt.After(*best.CreatedAt) {
				best = u
			}
		}
	}
	return best, nil
}

func failedUpdate(u *ekstypes.Update) bool {
	return u.Status == ekstypes.UpdateStatusFailed || u.Status == ekstypes.UpdateStatusCancelled
}

func (r *Runner) describeUpdate(ctx context.Context, cluster string, c updateCall, id string) (*ekstypes.Update, error) {
	out, err := r.EKS.DescribeUpdate(ctx, &awseks.DescribeUpdateInput{Name: aws.String(cluster), UpdateId: aws.String(id),
		AddonName: nilIfEmpty(c.addon)})
	if err != nil {
		return nil, fmt.Errorf("%s: describing update %s: %w", c.what, id, err)
	}
	if out.Update == nil {
		return nil, fmt.Errorf("%s: describing update %s: empty response", c.what, id)
	}
	return out.Update, nil
}

func param(u *ekstypes.Update, t ekstypes.UpdateParamType) string {
	for _, p := range u.Params {
		if p.Type == t {
			return aws.ToString(p.Value)
		}
	}
	return ""
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// track polls the step's update (DescribeUpdate, capped exponential backoff) until it is Successful and the
// resource shows it (Completed), or Failed or Cancelled (the workflow halts with the update's errors). The
// lease is renewed before every wait. A pause does not stop it: the update is already running in EKS.
func (r *Runner) track(ctx context.Context, w state.Workflow, c updateCall) (state.Workflow, error) {
	began := r.now()
	lastLine := began
	for attempt := 1; ; attempt++ {
		st := w.Steps[w.Current]
		u, err := r.describeUpdate(ctx, w.Cluster, c, st.UpdateID)
		if err != nil {
			return w, err
		}
		switch u.Status {
		case ekstypes.UpdateStatusFailed, ekstypes.UpdateStatusCancelled:
			return r.halt(ctx, w, fmt.Sprintf("update %s %s: %s", st.UpdateID, u.Status, updateErrors(u)))
		case ekstypes.UpdateStatusSuccessful:
			done, failure, err := c.settled(ctx)
			if err != nil {
				return w, err
			}
			if failure != "" {
				return r.halt(ctx, w, fmt.Sprintf("update %s Successful, but %s", st.UpdateID, failure))
			}
			if done {
				cur := &w.Steps[w.Current]
				cur.Status, cur.CompletedAt = state.StepStatusCompleted, r.now()
				completed := *cur
				w.Current++
				return r.save(ctx, w, fmt.Sprintf("%s: update %s Successful", c.what, st.UpdateID), r.entry(w, completed.Kind+"-completed", completed, ""))
			}
		}
		now := r.now()
		if now.Sub(began) > r.maxWait() {
			return w, fmt.Errorf("%s: update %s still %s after %s: run again to keep tracking it", c.what, st.UpdateID, u.Status, r.maxWait())
		}
		if now.Sub(lastLine) >= progressEvery {
			r.progress("%s: update %s %s for %s", c.what, st.UpdateID, u.Status, now.Sub(st.StartedAt).Round(time.Second))
			lastLine = now
		}
		d := r.backoff(attempt)
		if w.LeaseExpires.Sub(now) < d+r.leaseTTL()/2 {
			if w, err = r.save(ctx, w, leaseRenewed); err != nil {
				return w, err
			}
		}
		if err := r.wait(ctx, d); err != nil {
			return w, err
		}
	}
}

// updateErrors renders an update's errors: "Code: message (resources)", "no error details" when it has none.
func updateErrors(u *ekstypes.Update) string {
	if len(u.Errors) == 0 {
		return "no error details"
	}
	var out []string
	for _, e := range u.Errors {
		s := fmt.Sprintf("%s: %s", e.ErrorCode, aws.ToString(e.ErrorMessage))
		if len(e.ResourceIds) > 0 {
			s += " (" + strings.Join(e.ResourceIds, ", ") + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// endByPrecheck ends the current step as its precheck's outcome says: skip completes it as Skipped and action as
// ActionRequired (with a history entry each), refuse halts the workflow, hold makes it wait; ended is false for
// proceed, when the step goes on.
func (r *Runner) endByPrecheck(ctx context.Context, w state.Workflow, outcome int, detail string) (next state.Workflow, ended bool, err error) {
	now := r.now()
	st := &w.Steps[w.Current]
	switch outcome {
	case skip, action:
		st.Status, st.Detail, st.By, st.StartedAt, st.CompletedAt = state.StepStatusSkipped, detail, r.Who, now, now
		event := "skipped"
		if outcome == action {
			st.Status, st.Action, st.Detail, event = state.StepStatusActionRequired, detail, "", "action-required"
		}
		done := *st
		w.Current++
		next, err = r.save(ctx, w, fmt.Sprintf("%s %s: %s", done.Kind, done.Name, detail), r.entry(w, done.Kind+"-"+event, done, detail))
		return next, true, err
	case refuse:
		next, err = r.halt(ctx, w, detail)
		return next, true, err
	case hold:
		next, err = r.hold(ctx, w, detail)
		return next, true, err
	}
	return w, false, nil
}
