package eksupgrade

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Defaults of Runner.
const (
	// DefaultLeaseTTL is how long an invocation's claim on a workflow lasts without renewal; it is renewed on
	// every write and while an update is tracked, so a crashed invocation blocks a new one for at most this
	// plus the skew margin, a quarter of it (state.LeaseRule).
	DefaultLeaseTTL = state.DefaultLeaseTTL
	// DefaultDegradedWait is how long after its update was requested an add-on may be DEGRADED (its pods
	// rolling) before the workflow halts.
	DefaultDegradedWait = 15 * time.Minute
	// DefaultMaxWait bounds how long one invocation tracks one update: a control plane update takes 10 to 40
	// minutes, a node group's as long as its nodes take to be replaced.
	DefaultMaxWait = 3 * time.Hour
)

// DefaultBackoff is the wait before the attempt-th poll of an update: 15 s doubling to 1 min, ±20 %.
var DefaultBackoff = eksdrain.Backoff{Base: 15 * time.Second, Cap: time.Minute, Jitter: 0.2}.Delay

// releaseTimeout bounds the write that gives the lease back when an invocation stops on an error.
const releaseTimeout = 10 * time.Second

// ErrLeaseHeld is wrapped by LeaseHeldError: another invocation works on the workflow.
var ErrLeaseHeld = errors.New("the upgrade workflow is being run by another invocation")

// ErrOtherUpgrade is returned when the cluster has an unfinished workflow to another version.
var ErrOtherUpgrade = errors.New("another upgrade of the cluster is unfinished")

// LeaseHeldError says which invocation holds the workflow's lease and until when another may take over
// (Expires: the lease's expiry plus the skew margin).
type LeaseHeldError struct {
	Cluster, Owner string
	Expires        time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("%v: the upgrade of %s is being run by %s (lease until %s); if that run crashed, run again once the lease has expired",
		ErrLeaseHeld, e.Cluster, e.Owner, e.Expires.UTC().Format(time.RFC3339))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// errStop ends a Run: the workflow waits, halted or completed, and the record says so.
var errStop = errors.New("workflow stopped")

// stop returns errStop after the last write of a run, or err when a write after it (history) failed.
func stop(err error) error {
	if err != nil {
		return err
	}
	return errStop
}

// Runner runs the upgrade workflow of one cluster inside one invocation, step by step, until it completes,
// halts, or waits for an approval or a pause.
type Runner struct {
	EKS awsapi.EKSUpgrade
	// AutoScaling finds the self-managed node groups patch-agent manages for the cluster; nil: none.
	AutoScaling awsapi.GroupReader
	Store       Store
	// Clock dates the record, history and leases; Wait blocks for d (or until ctx ends) between two polls of
	// an update. Defaults: the real clock and a timer. The simulated account passes its fake clock and Advance.
	Clock clock.PassiveClock
	Wait  func(ctx context.Context, d time.Duration) error
	// Backoff is the wait before the attempt-th poll of an update (attempt >= 1). Default DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// Owner names this invocation in the lease (unique per process); Who the operator, in steps and history.
	Owner, Who string
	// LeaseTTL (`--lease-ttl`) defaults to DefaultLeaseTTL; MaxWait to DefaultMaxWait; DegradedWait to
	// DefaultDegradedWait.
	LeaseTTL, MaxWait, DegradedWait time.Duration
	// NewToken returns a new ClientRequestToken. Default: "patch-agent-" and 20 random hex digits.
	NewToken func() string
	// Out receives one progress line per transition (nil: none).
	Out io.Writer
	// Log receives the transitions as JSON (nil: none).
	Log *zap.Logger
	// Kube reads the cluster's Kubernetes API (Fargate nodes and pods, self-managed add-ons, PodDisruptionBudgets)
	// and makes the Kubernetes steps' changes; nil: those checks are warnings and no such step is planned.
	Kube kubernetes.Interface
}

// Request is one invocation of `patch-agent eks upgrade`.
type Request struct {
	Cluster string
	// To is the target Kubernetes version ("1.31"): exactly one minor version above the control plane.
	To string
	// Approve approves the workflow's plan as Runner.Who (instead of `patch-agent approve eks:<cluster>`).
	Approve bool
	// Retry starts the failed step of a halted workflow again (with a new ClientRequestToken).
	Retry bool
	// TwoPerson starts the workflow under the two-person rule: its plan is approved only by another identity
	// than the requester's (Runner.Who of the run that made the plan). It is kept by the workflow's later
	// plans; a run cannot lift it.
	TwoPerson bool
	// RestartFargate (`--restart-fargate`) restarts, after the control plane moved, the Deployments and
	// StatefulSets whose pods run on Fargate, one at a time, each when its PodDisruptionBudgets allow it.
	// UpdateSelfManagedAddons (`--update-self-managed-addons`) updates aws-node, coredns and kube-proxy that
	// are not EKS add-ons in place (their image tag), after the control plane moved. Both are kept by the
	// workflow's later plans, like TwoPerson.
	RestartFargate, UpdateSelfManagedAddons bool
}

func (req Request) validate() error {
	if strings.TrimSpace(req.Cluster) == "" {
		return errors.New("the EKS cluster to upgrade is required (--cluster)")
	}
	if _, err := eks.ParseVersion(req.To); err != nil {
		return fmt.Errorf("the target Kubernetes version (--to) %w", err)
	}
	return nil
}

func (r *Runner) now() time.Time {
	if r.Clock == nil {
		return time.Now()
	}
	return r.Clock.Now()
}

func (r *Runner) leaseTTL() time.Duration {
	if r.LeaseTTL > 0 {
		return r.LeaseTTL
	}
	return DefaultLeaseTTL
}

// leases is the lease rule of the runner's TTL.
func (r *Runner) leases() state.LeaseRule { return state.LeaseRule{TTL: r.leaseTTL()} }

func (r *Runner) maxWait() time.Duration {
	if r.MaxWait > 0 {
		return r.MaxWait
	}
	return DefaultMaxWait
}

func (r *Runner) degradedWait() time.Duration {
	if r.DegradedWait > 0 {
		return r.DegradedWait
	}
	return DefaultDegradedWait
}

func (r *Runner) backoff(attempt int) time.Duration {
	d := DefaultBackoff(attempt)
	if r.Backoff != nil {
		d = r.Backoff(attempt)
	}
	return min(d, r.leaseTTL()/2) // the lease is renewed before every wait; it must outlive the wait
}

func (r *Runner) wait(ctx context.Context, d time.Duration) error {
	if r.Wait != nil {
		return r.Wait(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (r *Runner) token() string {
	if r.NewToken != nil {
		return r.NewToken()
	}
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "patch-agent-" + hex.EncodeToString(b)
}

func (r *Runner) log() *zap.Logger {
	if r.Log == nil {
		return zap.NewNop()
	}
	return r.Log
}

func (r *Runner) progress(format string, args ...any) {
	if r.Out != nil {
		fmt.Fprintf(r.Out, "%s  %s\n", r.now().UTC().Format(time.RFC3339), fmt.Sprintf(format, args...))
	}
}

// Plan runs the preflight of an upgrade of cluster to `to` and returns the workflow it would start: the
// checks and the steps, Phase Preflight, not written anywhere (`--dry-run`). It makes no AWS call that
// changes anything and writes nothing.
func (r *Runner) Plan(ctx context.Context, cluster, to string) (state.Workflow, error) {
	return r.PlanRequest(ctx, Request{Cluster: cluster, To: to})
}

// PlanRequest is Plan with the request's opt-ins (RestartFargate, UpdateSelfManagedAddons).
func (r *Runner) PlanRequest(ctx context.Context, req Request) (state.Workflow, error) {
	cluster, to := req.Cluster, req.To
	if err := req.validate(); err != nil {
		return state.Workflow{}, err
	}
	p, err := r.preflight(ctx, cluster, to, planOptions{req.RestartFargate, req.UpdateSelfManagedAddons})
	if err != nil {
		return state.Workflow{}, err
	}
	w := r.fromPlan(state.Workflow{}, req, p)
	w.Phase = state.WorkflowPreflight
	if failed := failures(p.checks); len(failed) > 0 {
		w.Steps[0].Status, w.Steps[0].Detail = state.StepStatusFailed, strings.Join(failed, "; ")
		w.Phase, w.Reason = state.WorkflowHalted, "preflight failed: "+strings.Join(failed, "; ")
	}
	return w, nil
}

// Run carries the workflow of req.Cluster as far as it can go in this invocation and returns the record as
// stored: Completed, Halted (Reason says why; a halted step starts again only with req.Retry), or Waiting (for
// an approval or a pause). A new workflow starts with the preflight; an existing one resumes at its current
// step. Errors: an invalid request; LeaseHeldError while another invocation runs it; ErrOtherUpgrade for an
// unfinished workflow to another version; the AWS and store errors that stopped it (the record stays at its
// step, and a new run resumes there).
func (r *Runner) Run(ctx context.Context, req Request) (state.Workflow, error) {
	if err := req.validate(); err != nil {
		return state.Workflow{}, err
	}
	now := r.now()
	w, err := r.Store.GetWorkflow(ctx, req.Cluster)
	fresh := errors.Is(err, state.ErrNotFound)
	if err != nil && !fresh {
		return state.Workflow{}, fmt.Errorf("reading the upgrade workflow of %s: %w", req.Cluster, err)
	}
	if fresh {
		w = state.Workflow{Cluster: req.Cluster}
	}
	if r.leases().HeldByOther(w.Lease(), r.Owner, now) {
		return w, &LeaseHeldError{Cluster: req.Cluster, Owner: w.LeaseOwner, Expires: w.LeaseExpires.Add(r.leases().Margin())}
	}
	if err := flushPending(ctx, r.Store, w); err != nil {
		return w, err
	}
	preflight, interrupted, retried := false, w.Phase == state.WorkflowRunning, state.WorkflowStep{}
	switch {
	case fresh || w.Phase == state.WorkflowPreflight:
		preflight = true
	case w.Phase == state.WorkflowCompleted && w.To == req.To:
		r.progress("the upgrade of %s to %s completed at %s: nothing to do", w.Cluster, w.To, w.UpdatedAt.UTC().Format(time.RFC3339))
		return w, nil
	case w.Phase == state.WorkflowCompleted, w.Phase == state.WorkflowHalted && haltedAtPreflight(w):
		preflight = true // nothing of the last workflow is unfinished in the cluster
	case w.To != req.To:
		return w, fmt.Errorf("%w: the upgrade of %s to %s is %s at step %s; run it to its end with --to %s first",
			ErrOtherUpgrade, w.Cluster, w.To, w.Phase, stepName(w), w.To)
	case w.Phase == state.WorkflowHalted && !req.Retry:
		return w, nil
	case w.Phase == state.WorkflowHalted:
		retried = w.Steps[w.Current]
		var changed []string
		if w, changed, err = r.retry(ctx, w); err != nil {
			return w, err
		}
		if len(changed) > 0 {
			// Not approved in this run even with --yes: the approver has not seen the new plan yet.
			w, err = r.saveFinal(ctx, w, "waiting: "+w.Reason, r.entry(w, "retry", retried, "the failed step starts again"),
				r.entry(w, "plan-changed", w.Steps[w.Current], strings.Join(changed, "; ")))
			if err != nil {
				return r.release(ctx, w, err)
			}
			return w, nil
		}
	}
	switch {
	case preflight:
		w, err = r.runPreflight(ctx, w, req)
	case retried.Kind != "":
		w, err = r.save(ctx, w, fmt.Sprintf("retrying %s %s", retried.Kind, retried.Name),
			r.entry(w, "retry", retried, "the failed step starts again"))
	case interrupted:
		// The last run stopped between two steps (a crash, an error): the audit trail says where this one
		// takes over.
		at := currentStep(w)
		w, err = r.save(ctx, w, fmt.Sprintf("resumed by %s at %s (%s)", r.Who, stepName(w), at.Status),
			r.entry(w, "resumed", at, "an interrupted run is resumed at this step ("+string(at.Status)+")"))
	default:
		w, err = r.save(ctx, w, "resumed by "+r.Who)
	}
	for err == nil {
		if err = ctx.Err(); err != nil {
			break
		}
		w, err = r.step(ctx, req, w)
	}
	if errors.Is(err, errStop) {
		return w, nil
	}
	return r.release(ctx, w, err)
}

// release gives the lease back after an error stopped the run, so that a new run need not wait for it to
// expire (best effort: the error may be the store's own). It returns w and err.
func (r *Runner) release(ctx context.Context, w state.Workflow, err error) (state.Workflow, error) {
	if w.LeaseOwner != r.Owner || w.Version == 0 || errors.Is(err, state.ErrConflict) || errors.Is(err, ErrLeaseHeld) {
		return w, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	w.LeaseOwner, w.LeaseExpires = "", time.Time{}
	if next, perr := r.Store.PutWorkflow(ctx, w); perr == nil {
		return next, err
	}
	return w, err
}

func haltedAtPreflight(w state.Workflow) bool {
	return w.Current < len(w.Steps) && w.Steps[w.Current].Kind == KindPreflight
}

// currentStep returns the step being worked on, or one of kind "workflow" once all are done.
func currentStep(w state.Workflow) state.WorkflowStep {
	if w.Current >= 0 && w.Current < len(w.Steps) {
		return w.Steps[w.Current]
	}
	return state.WorkflowStep{Kind: "workflow", Name: w.Cluster, From: w.From, To: w.To, Status: state.StepStatusCompleted}
}

// stepName names the current step: "control-plane prod", "addon coredns", "-" when all are done.
func stepName(w state.Workflow) string {
	if w.Current < 0 || w.Current >= len(w.Steps) {
		return "-"
	}
	s := w.Steps[w.Current]
	return s.Kind + " " + s.Name
}

// fromPlan returns the record of a new workflow from a preflight's plan, at the version of prev (the record
// it replaces, if any, so the write is conditional on it); prev's two-person rule carries over to the same
// unfinished upgrade.
func (r *Runner) fromPlan(prev state.Workflow, req Request, p plan) state.Workflow {
	now := r.now()
	w := state.Workflow{Cluster: req.Cluster, From: p.from, To: req.To, Phase: state.WorkflowRunning, Current: 1,
		Checks: p.checks, RequestedBy: r.Who, StartedAt: now, Version: prev.Version, Transitions: prev.Transitions,
		// A run never lifts the two-person rule of the unfinished upgrade it replans (a halt at the preflight,
		// say): only a new upgrade, after the last one completed or to another version, starts without it.
		TwoPersonRule: req.TwoPerson || (prev.TwoPersonRule && prev.To == req.To && prev.Phase != state.WorkflowCompleted)}
	opts := r.options(prev, req)
	w.RestartFargate, w.UpdateSelfManagedAddons = opts.restartFargate, opts.updateSelfManagedAddons
	w.Steps = append([]state.WorkflowStep{{Kind: KindPreflight, Name: req.Cluster, From: p.from, To: req.To, Status: state.StepStatusCompleted,
		By: r.Who, StartedAt: now, CompletedAt: now, Detail: checkCounts(p.checks)}}, p.steps...)
	return w
}

func checkCounts(checks []state.PreflightCheck) string {
	n := map[string]int{}
	for _, c := range checks {
		n[c.Result]++
	}
	return fmt.Sprintf("%d check(s): %d pass, %d warn, %d fail", len(checks), n[CheckPass], n[CheckWarn], n[CheckFail])
}

// runPreflight runs the preflight and writes the new workflow: Running at the approval step, or Halted when a
// check failed (nothing was changed, and a new run starts with a new preflight).
func (r *Runner) runPreflight(ctx context.Context, prev state.Workflow, req Request) (state.Workflow, error) {
	r.progress("preflight of the upgrade of %s to %s", req.Cluster, req.To)
	p, err := r.preflight(ctx, req.Cluster, req.To, r.options(prev, req))
	if err != nil {
		return prev, err
	}
	for _, c := range p.checks {
		r.progress("  %-4s %s: %s", c.Result, c.Name, c.Detail)
	}
	w := r.fromPlan(prev, req, p)
	if failed := failures(p.checks); len(failed) > 0 {
		w.Current = 0
		w.Steps[0].Status, w.Steps[0].Detail = state.StepStatusFailed, strings.Join(failed, "; ")
		w.Phase, w.Reason = state.WorkflowHalted, "preflight failed: "+strings.Join(failed, "; ")
		w, err = r.saveFinal(ctx, w, "preflight failed", r.entry(w, "preflight-failed", w.Steps[0], ""))
		return w, stop(err)
	}
	return r.save(ctx, w, "preflight passed", r.entry(w, "preflight-passed", w.Steps[0], fmt.Sprintf("%d step(s) planned", len(w.Steps)-1)))
}

// revalidate runs the preflight again right before the workflow's first change (the control plane's update
// request), however long ago the plan was made and approved. When a check now fails the workflow halts at the
// preflight (nothing was changed: the next run starts with a new preflight). When the plan changed (a step
// added, removed, or with other versions: a node group that appeared, an add-on that moved) the new plan
// replaces the approved one and waits for a new approval. It returns the record and whether either happened
// (the run then stops: err is errStop once the record is written).
func (r *Runner) revalidate(ctx context.Context, w state.Workflow) (state.Workflow, bool, error) {
	r.progress("preflight again before the first change of %s", w.Cluster)
	p, err := r.preflight(ctx, w.Cluster, w.To, r.options(w, Request{Cluster: w.Cluster, To: w.To}))
	if err != nil {
		return w, false, err
	}
	failed, changes := failures(p.checks), planChanges(w.Steps, p.steps)
	if len(failed) == 0 && len(changes) == 0 {
		return w, false, nil
	}
	for _, c := range p.checks {
		r.progress("  %-4s %s: %s", c.Result, c.Name, c.Detail)
	}
	next := r.fromPlan(w, Request{Cluster: w.Cluster, To: w.To, TwoPerson: w.TwoPersonRule}, p)
	next.RequestedBy, next.StartedAt = w.RequestedBy, w.StartedAt
	if len(failed) > 0 {
		next.Current = 0
		next.Steps[0].Status, next.Steps[0].Detail = state.StepStatusFailed, strings.Join(failed, "; ")
		next.Phase, next.Reason = state.WorkflowHalted, "preflight before the first change failed: "+strings.Join(failed, "; ")
		next, err := r.saveFinal(ctx, next, "preflight before the first change failed", r.entry(next, "preflight-failed", next.Steps[0], "checked again before the first change"))
		return next, true, stop(err)
	}
	reason := fmt.Sprintf("the plan changed since it was approved (%s): approve the new plan with `patch-agent approve %s` (or run again with --yes)",
		strings.Join(changes, "; "), Subject(w.Cluster))
	next.Phase, next.Reason = state.WorkflowWaiting, reason
	next, err = r.saveFinal(ctx, next, "waiting: "+reason, r.entry(next, "plan-changed", next.Steps[1], strings.Join(changes, "; ")))
	return next, true, stop(err)
}

// planChanges lists how the planned steps after the preflight differ from those of the stored plan (the
// stored steps from the approval on): "added managed-nodegroup legacy (1.27 -> 1.31)", "removed ...",
// "addon vpc-cni: v1.19.0-eksbuild.1 -> v1.19.2-eksbuild.1 now", "... now skipped".
func planChanges(stored, planned []state.WorkflowStep) []string {
	key := func(s state.WorkflowStep) string { return s.Kind + " " + s.Name }
	old := map[string]state.WorkflowStep{}
	for _, s := range stored {
		if s.Kind != KindPreflight {
			old[key(s)] = s
		}
	}
	var out []string
	for _, s := range planned {
		o, ok := old[key(s)]
		delete(old, key(s))
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("added %s (%s -> %s)", key(s), dashIfEmpty(s.From), s.To))
		case o.From != s.From || o.To != s.To:
			out = append(out, fmt.Sprintf("%s: %s -> %s planned, now %s -> %s", key(s), dashIfEmpty(o.From), o.To, dashIfEmpty(s.From), s.To))
		case (o.Status == state.StepStatusSkipped) != (s.Status == state.StepStatusSkipped):
			out = append(out, fmt.Sprintf("%s: now %s", key(s), s.Status))
		}
	}
	for _, s := range stored {
		if _, ok := old[key(s)]; ok {
			out = append(out, "removed "+key(s))
		}
	}
	return out
}

// retry starts the failed step of a halted workflow again: Pending, with a new ClientRequestToken when it is
// next requested; an add-on's target version is read again. When that changes the plan (another version),
// the approval is withdrawn: the workflow goes back to its approval step (the steps done stay done) and
// changed lists the changes (empty when the plan is the approved one).
func (r *Runner) retry(ctx context.Context, w state.Workflow) (next state.Workflow, changed []string, err error) {
	if w.Current >= len(w.Steps) {
		return w, nil, nil
	}
	st := &w.Steps[w.Current]
	if st.Kind == KindAddon {
		installed := st.From
		if d, err := r.EKS.DescribeAddon(ctx, &awseks.DescribeAddonInput{ClusterName: aws.String(w.Cluster), AddonName: aws.String(st.Name)}); err == nil && d.Addon != nil {
			installed = aws.ToString(d.Addon.AddonVersion)
		}
		choice, err := r.chooseAddon(ctx, st.Name, installed, w.To)
		if err != nil {
			return w, nil, err
		}
		if choice.to != "" && choice.to != st.To {
			// The retry plans another version than the approved plan: what runs next was not approved, so it
			// waits for an approval of the new plan (as a plan that changed before the first change does).
			changed = append(changed, fmt.Sprintf("%s %s: %s -> %s planned, now %s -> %s", st.Kind, st.Name, dashIfEmpty(st.From), st.To, dashIfEmpty(installed), choice.to))
			st.From, st.To = installed, choice.to
		}
	}
	if st.Kind == KindSelfManagedAddon {
		planned := st.To
		if err := r.replanSelfManagedAddon(ctx, w.To, st); err != nil {
			return w, nil, err
		}
		if st.To != planned && st.To != st.From { // kept where it is found (From == To) changes nothing
			// As for an EKS add-on: another tag than the approved one is a new plan that needs an approval.
			changed = append(changed, fmt.Sprintf("%s %s: %s planned, now %s", st.Kind, st.Name, planned, st.To))
		}
	}
	if err := r.retryRollout(ctx, w.Cluster, st); err != nil {
		return w, nil, err
	}
	if st.UpdateID != "" && !slices.Contains(st.EarlierUpdateIDs, st.UpdateID) {
		st.EarlierUpdateIDs = append(st.EarlierUpdateIDs, st.UpdateID) // never adopted by a resumed run
	}
	st.Status, st.Token, st.UpdateID, st.Detail, st.StartedAt, st.CompletedAt = state.StepStatusPending, "", "", "", time.Time{}, time.Time{}
	w.Phase, w.Reason = state.WorkflowRunning, ""
	if len(changed) > 0 {
		for i := range w.Steps {
			if w.Steps[i].Kind == KindApproval {
				a := &w.Steps[i]
				a.Status, a.By, a.StartedAt, a.CompletedAt = state.StepStatusPending, "", time.Time{}, time.Time{}
				w.Current = i
			}
		}
		// The one who re-planned requested the new plan: under the two-person rule another approves it.
		w.ApprovedBy, w.ApprovedAt, w.RequestedBy = "", time.Time{}, r.Who
		w.Phase, w.Reason = state.WorkflowWaiting, fmt.Sprintf("the plan changed at the retry (%s): approve the new plan with `patch-agent approve %s` (or run again with --yes)",
			strings.Join(changed, "; "), Subject(w.Cluster))
	}
	return w, changed, nil
}

// retryRollout re-arms the agent's rollout a node group step follows when that rollout rolled back
// (operator.Retry): the operator who runs --retry has fixed its cause, and the agent rolls the node group to the
// new version's AMI or release again, through every gate. A rollout in another phase is left as it is.
func (r *Runner) retryRollout(ctx context.Context, cluster string, st *state.WorkflowStep) error {
	key := st.Name
	switch st.Kind {
	case KindManagedNodegroup:
		key = model.NodegroupKey(cluster, st.Name)
	case KindSelfManagedNodegroup:
	default:
		return nil
	}
	ro, err := r.Store.GetRollout(ctx, key)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the agent's rollout of %s: %w", key, err)
	}
	if ro.Phase != state.PhaseRolledBack && ro.RollbackFrom == "" {
		return nil
	}
	_, again, err := operator.Retry(ctx, r.Store, key, r.Who, r.now())
	if err != nil {
		return fmt.Errorf("retrying the agent's rollout of %s: %w", key, err)
	}
	r.progress("the agent's rollout of %s rolls %s again", key, again)
	return nil
}

// retryHint says how an operator moves a node group step on whose rollout (of key) is Halted or RolledBack.
func retryHint(phase state.Phase, key string) string {
	if phase == state.PhaseHalted {
		return fmt.Sprintf("fix the cause, roll it back with `patch-agent rollback %s`, then run again with --retry, which rolls it again", key)
	}
	return "fix the cause (a PodDisruptionBudget that blocks every eviction, pods that cannot start on the new nodes), then run again with --retry, which rolls it again"
}

// step performs the next transition of the workflow. It returns errStop when the workflow completed, halted
// or waits.
func (r *Runner) step(ctx context.Context, req Request, w state.Workflow) (state.Workflow, error) {
	for w.Current < len(w.Steps) && w.Steps[w.Current].Status.Done() {
		w.Current++ // skipped steps; completed ones already moved Current in their write
	}
	if w.Current >= len(w.Steps) {
		return r.complete(ctx, w)
	}
	switch st := w.Steps[w.Current]; st.Kind {
	case KindApproval:
		return r.approval(ctx, req, w)
	case KindControlPlane, KindAddon:
		return r.update(ctx, w)
	case KindManagedNodegroup:
		return r.handOverNodegroup(ctx, w)
	case KindSelfManagedNodegroup:
		return r.handOver(ctx, w)
	case KindSelfManagedAddon:
		return r.updateSelfManagedAddon(ctx, w)
	case KindFargateRestart:
		return r.restartFargate(ctx, w)
	default:
		return w, fmt.Errorf("step %d of the upgrade of %s: unknown kind %q at status %s", w.Current, w.Cluster, st.Kind, st.Status)
	}
}

// approval completes the approval step when the plan is approved (by req.Approve, or earlier with Approve),
// and waits otherwise.
func (r *Runner) approval(ctx context.Context, req Request, w state.Workflow) (state.Workflow, error) {
	approvedHere := false
	if w.ApprovedBy == "" && req.Approve && w.TwoPersonRule && SamePrincipal(r.Who, w.RequestedBy) {
		return r.hold(ctx, w, fmt.Sprintf("approval: two-person rule: %s requested the plan, so another person (another principal than %s) approves it with `patch-agent approve %s`",
			w.RequestedBy, Principal(w.RequestedBy), Subject(w.Cluster)))
	}
	if w.ApprovedBy == "" && req.Approve {
		w.ApprovedBy, w.ApprovedAt, approvedHere = r.Who, r.now(), true
	}
	if w.ApprovedBy == "" {
		return r.hold(ctx, w, fmt.Sprintf("approval: waiting for `patch-agent approve %s` (or run again with --yes)", Subject(w.Cluster)))
	}
	st := &w.Steps[w.Current]
	st.Status, st.By, st.StartedAt, st.CompletedAt = state.StepStatusCompleted, w.ApprovedBy, w.ApprovedAt, w.ApprovedAt
	w.Phase, w.Reason = state.WorkflowRunning, ""
	var entries []state.HistoryEntry
	if approvedHere { // an approval with Approve has its own entry
		entries = append(entries, r.entry(w, "approved", *st, ""))
	}
	w.Current++
	return r.save(ctx, w, "plan approved by "+w.ApprovedBy, entries...)
}

// hold makes the workflow wait for reason (an approval or a pause): it is written Waiting (which gives the
// lease back) and the run ends.
func (r *Runner) hold(ctx context.Context, w state.Workflow, reason string) (state.Workflow, error) {
	var entries []state.HistoryEntry
	if w.Phase != state.WorkflowWaiting || w.Reason != reason { // the same wait is recorded once
		entries = append(entries, r.entry(w, "waiting", w.Steps[w.Current], reason))
	}
	w.Phase, w.Reason = state.WorkflowWaiting, reason
	w, err := r.saveFinal(ctx, w, "waiting: "+reason, entries...)
	return w, stop(err)
}

// pauseReason returns why a pause lock holds the workflow's next update call ("" when none does): the global
// lock, or that of Subject(cluster) (`patch-agent pause --group eks:<cluster>`); expired locks do not hold.
func (r *Runner) pauseReason(ctx context.Context, w state.Workflow, next string) (string, error) {
	locks, err := r.Store.ListLocks(ctx)
	if err != nil {
		return "", fmt.Errorf("reading pause locks: %w", err)
	}
	now := r.now()
	for _, scope := range []string{state.GlobalScope, Subject(w.Cluster)} {
		for _, l := range locks {
			if l.Group != scope || !l.Active(now) {
				continue
			}
			reason := fmt.Sprintf("paused (%s) by %s since %s: %s; next step: %s", l.Scope(), l.Who, l.Since.UTC().Format(time.RFC3339), l.Reason, next)
			if !l.Until.IsZero() {
				reason += "; until " + l.Until.UTC().Format(time.RFC3339)
			}
			return reason, nil
		}
	}
	return "", nil
}

// handOver records what must happen to a self-managed node group: the agent's normal rollout replaces its
// nodes once its AMI source names the new version. A group whose source follows the control plane is handed
// over (InProgress, "self-managed-handed-over") and the step then waits for that rollout (followRollout); one
// whose source an operator must change first is ActionRequired (the workflow cannot move it).
func (r *Runner) handOver(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	st := &w.Steps[w.Current]
	if st.Status == state.StepStatusInProgress {
		return r.followRollout(ctx, w)
	}
	now := r.now()
	st.By, st.StartedAt = r.Who, now
	w.Phase, w.Reason = state.WorkflowRunning, ""
	if st.Action != "" {
		st.Status, st.CompletedAt = state.StepStatusActionRequired, now
		done := *st
		w.Current++
		return r.save(ctx, w, fmt.Sprintf("self-managed node group %s needs an operator: %s", done.Name, done.Action),
			r.entry(w, "self-managed-action-required", done, done.Action+done.Detail))
	}
	st.Status = state.StepStatusInProgress
	return r.save(ctx, w, fmt.Sprintf("self-managed node group %s handed over to the agent's rollout: waiting for its nodes on the Kubernetes %s AMI", st.Name, st.To),
		r.entry(w, "self-managed-handed-over", *st, st.Detail))
}

// followRollout waits (capped exponential backoff, up to MaxWait in this invocation) until the agent's rollout
// record of the step's group is Completed (or Idle) on an AMI parameter of the step's Kubernetes version with
// every in-service instance on its target AMI: then the step is Completed. A rollout Halted or RolledBack
// halts the step with its reason (the group's nodes are not on the new version; `--retry` waits again once
// the rollout is fixed). The progress read (state.NodeProgress) is written on the step whenever it changes,
// which `eks upgrade --status` shows.
func (r *Runner) followRollout(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	began := r.now()
	lastLine := began
	for attempt := 1; ; attempt++ {
		st := w.Steps[w.Current]
		ro, err := r.Store.GetRollout(ctx, st.Name)
		found := err == nil
		if err != nil && !errors.Is(err, state.ErrNotFound) {
			return w, fmt.Errorf("reading the agent's rollout of self-managed node group %s: %w", st.Name, err)
		}
		p := &state.NodeProgress{}
		if found {
			v, ok := eks.VersionInParameter(ro.Source)
			p = &state.NodeProgress{Phase: ro.Phase, OnTarget: ro.OnTarget, Instances: ro.Instances, TargetImageID: ro.TargetImageID,
				Source: ro.Source, OnVersion: ok && v == st.To}
		}
		switch {
		case found && p.OnVersion && (ro.Phase == state.PhaseCompleted || ro.Phase == state.PhaseIdle) && ro.OnTarget >= ro.Instances:
			cur := &w.Steps[w.Current]
			cur.Status, cur.CompletedAt, cur.Nodes = state.StepStatusCompleted, r.now(), p
			done := *cur
			w.Current++
			return r.save(ctx, w, fmt.Sprintf("self-managed node group %s: %s", done.Name, NodesLine(p)),
				r.entry(w, "self-managed-completed", done, NodesLine(p)))
		case found && (ro.Phase == state.PhaseHalted || ro.Phase == state.PhaseRolledBack && !operator.Rearmed(ro)):
			w.Steps[w.Current].Nodes = p
			return r.halt(ctx, w, fmt.Sprintf("the agent's rollout of %s is %s: %s; its nodes are not on the Kubernetes %s AMI (%s)",
				st.Name, ro.Phase, dashIfEmpty(ro.Reason), st.To, retryHint(ro.Phase, st.Name)))
		}
		if w, err = r.awaitRollout(ctx, w, p, "self-managed node group "+st.Name, fmt.Sprintf("the Kubernetes %s AMI", st.To), began, &lastLine, attempt); err != nil {
			return w, err
		}
	}
}

// awaitRollout is one wait of a node group step that follows the agent's rollout (followRollout,
// followNodegroup): it writes the step's progress p when it changed, gives up after maxWait since began (the run
// says to run again), prints a progress line every progressEvery, renews the workflow's lease when it would
// lapse during the wait, and waits the attempt's backoff. what names the node group ("managed node group web"),
// goal what its rollout moves it to.
func (r *Runner) awaitRollout(ctx context.Context, w state.Workflow, p *state.NodeProgress, what, goal string, began time.Time, lastLine *time.Time, attempt int) (state.Workflow, error) {
	st := w.Steps[w.Current]
	var err error
	if st.Nodes == nil || *st.Nodes != *p {
		w.Steps[w.Current].Nodes = p
		if w, err = r.save(ctx, w, fmt.Sprintf("%s: %s", what, NodesLine(p))); err != nil {
			return w, err
		}
	}
	now := r.now()
	if now.Sub(began) > r.maxWait() {
		return w, fmt.Errorf("%s: the agent's rollout to %s is not done after %s (%s): run again to keep waiting", what, goal, r.maxWait(), NodesLine(p))
	}
	if now.Sub(*lastLine) >= progressEvery {
		r.progress("%s: %s for %s", what, NodesLine(p), now.Sub(st.StartedAt).Round(time.Second))
		*lastLine = now
	}
	d := r.backoff(attempt)
	if w.LeaseExpires.Sub(now) < d+r.leaseTTL()/2 {
		if w, err = r.save(ctx, w, leaseRenewed); err != nil {
			return w, err
		}
	}
	return w, r.wait(ctx, d)
}

// NodesLine renders a node group's progress: "rollout Replacing: 1/3 instance(s) on ami-0b (source /aws/...)",
// "no rollout record yet" before the agent wrote one, and "(not the target version yet)" while the record's
// source names another Kubernetes version.
func NodesLine(p *state.NodeProgress) string {
	if p == nil || p.Phase == "" {
		return "no rollout record yet: waiting for the agent"
	}
	s := fmt.Sprintf("rollout %s: %d/%d instance(s) on %s", p.Phase, p.OnTarget, p.Instances, dashIfEmpty(p.TargetImageID))
	if p.Source != "" {
		s += " (source " + p.Source + ")"
	}
	if !p.OnVersion {
		s += ", not the target version yet"
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// complete ends the workflow: Completed, with the number of steps that need an operator in Reason.
func (r *Runner) complete(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	w.Phase, w.Reason = state.WorkflowCompleted, ""
	if n := len(Actions(w)); n > 0 {
		w.Reason = fmt.Sprintf("%d action(s) required: see the steps in ActionRequired", n)
	}
	w, err := r.saveFinal(ctx, w, fmt.Sprintf("upgrade of %s to %s completed", w.Cluster, w.To),
		r.entry(w, "completed", state.WorkflowStep{Kind: "workflow", Name: w.Cluster, From: w.From, To: w.To}, w.Reason))
	return w, stop(err)
}

// halt stops the workflow at its current step, which failed: nothing after it is done.
func (r *Runner) halt(ctx context.Context, w state.Workflow, reason string) (state.Workflow, error) {
	st := &w.Steps[w.Current]
	st.Status, st.Detail, st.CompletedAt = state.StepStatusFailed, reason, r.now()
	failed := *st
	w.Phase, w.Reason = state.WorkflowHalted, fmt.Sprintf("failed: %s %s: %s", failed.Kind, failed.Name, reason)
	w, err := r.saveFinal(ctx, w, "halted", r.entry(w, failed.Kind+"-failed", failed, reason))
	if err == nil {
		r.log().Error("EKS upgrade halted", zap.String(logging.Cluster, w.Cluster), zap.String(logging.Reason, w.Reason))
	}
	return w, stop(err)
}

// save writes one transition conditionally on the version read, with the history entries that record it
// (appended right after the write; see state.Workflow.PendingHistory). This invocation holds the lease
// (renewed by every write) while it works on the workflow.
func (r *Runner) save(ctx context.Context, w state.Workflow, what string, entries ...state.HistoryEntry) (state.Workflow, error) {
	return r.write(ctx, w, what, true, entries)
}

// saveFinal writes the last transition of this run (the workflow waits, halted or completed) like save, and
// gives the lease back.
func (r *Runner) saveFinal(ctx context.Context, w state.Workflow, what string, entries ...state.HistoryEntry) (state.Workflow, error) {
	return r.write(ctx, w, what, false, entries)
}

func (r *Runner) write(ctx context.Context, w state.Workflow, what string, lease bool, entries []state.HistoryEntry) (state.Workflow, error) {
	now := r.now()
	w.PendingHistory = entries // the last write's entries are in the history already
	w.UpdatedAt = now
	if lease {
		l := r.leases().Claim(r.Owner, now)
		w.LeaseOwner, w.LeaseExpires = l.Owner, l.Expires
	} else {
		w.LeaseOwner, w.LeaseExpires = "", time.Time{}
	}
	renewal := what == leaseRenewed
	if !renewal {
		w.Transitions++
	}
	next, err := r.Store.PutWorkflow(ctx, w)
	if errors.Is(err, state.ErrConflict) {
		if cur, gerr := r.Store.GetWorkflow(ctx, w.Cluster); gerr == nil && r.leases().HeldByOther(cur.Lease(), r.Owner, now) {
			return w, &LeaseHeldError{Cluster: w.Cluster, Owner: cur.LeaseOwner, Expires: cur.LeaseExpires.Add(r.leases().Margin())}
		}
		return w, fmt.Errorf("the upgrade workflow of %s changed while this run worked on it (another invocation, or an approval): run again to continue from the stored record: %w",
			w.Cluster, err)
	}
	if err != nil {
		return w, fmt.Errorf("writing the upgrade workflow of %s (%s): %w", w.Cluster, what, err)
	}
	if !renewal {
		r.progress("%s", what)
		r.log().Info(what, zap.String(logging.Cluster, next.Cluster), zap.String(logging.WorkflowPhase, string(next.Phase)),
			zap.String(logging.WorkflowStep, stepName(next)))
	}
	for _, e := range entries {
		if err := r.Store.AppendHistory(ctx, e); err != nil {
			return next, fmt.Errorf("recording history of %s (%s): %w", e.Group, e.Event, err)
		}
	}
	return next, nil
}

// flushPending appends the history entries of the workflow's last write that the history does not hold
// (its writer stopped between the two writes). Entries are told apart by time, event and detail.
func flushPending(ctx context.Context, store Store, w state.Workflow) error {
	if len(w.PendingHistory) == 0 {
		return nil
	}
	hist, err := store.History(ctx, Subject(w.Cluster))
	if err != nil {
		return fmt.Errorf("reading history of %s: %w", Subject(w.Cluster), err)
	}
	for _, e := range w.PendingHistory {
		found := false
		for _, h := range hist {
			if h.Event == e.Event && h.Detail == e.Detail && h.At.Equal(e.At) {
				found = true
				break
			}
		}
		if !found {
			if err := store.AppendHistory(ctx, e); err != nil {
				return fmt.Errorf("recording history of %s (%s): %w", e.Group, e.Event, err)
			}
		}
	}
	return nil
}

const leaseRenewed = "lease renewed"

// entry returns a history entry of Subject(cluster): the step (kind, resource, from, to), its update id and
// token, who, and extra.
func (r *Runner) entry(w state.Workflow, event string, st state.WorkflowStep, extra string) state.HistoryEntry {
	parts := []string{fmt.Sprintf("%s %s", st.Kind, st.Name)}
	if st.From != "" || st.To != "" {
		parts[0] += fmt.Sprintf(": %s -> %s", dashIfEmpty(st.From), st.To)
	}
	if st.UpdateID != "" {
		parts = append(parts, "update "+st.UpdateID)
	}
	if st.Token != "" {
		parts = append(parts, "token "+st.Token)
	}
	parts = append(parts, "by "+r.Who)
	if extra != "" {
		parts = append(parts, extra)
	}
	return state.HistoryEntry{Group: Subject(w.Cluster), At: r.now(), Event: event, Detail: strings.Join(parts, "; ")}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// Actions returns what operators must do after the workflow: the Action of every step in ActionRequired,
// "<kind> <name>: <action>".
func Actions(w state.Workflow) []string {
	var out []string
	for _, s := range w.Steps {
		if s.Status == state.StepStatusActionRequired {
			out = append(out, fmt.Sprintf("%s %s: %s", s.Kind, s.Name, s.Action))
		}
	}
	return out
}
