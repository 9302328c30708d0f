package engine

import (
	"context"
	"errors"
	"strings"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// notRolledPrefix starts the Reason (or Warning) of a group the agent is told to roll but never does.
const notRolledPrefix = "not rolled: "

// recordNotRolled puts why an opted-in group is not rolled on its status (Inputs.NotRolled: a misconfigured
// group, or the Auto Scaling group of an EKS managed node group, tag eks:nodegroup-name, which EKS drains and
// replaces itself), so `patch-agent status` says why instead of only a log line. A group without a record gets one at Halted
// with the reason (no target AMI: nothing to approve or roll back); a record from before (someone tagged the
// group after the agent had rolled it) keeps its position and gets the reason as its Warning. Nothing else is
// done: no launch template, capacity, drain or lifecycle action is touched. It writes only when the reason
// changes and returns the record as stored.
func (o *Orchestrator) recordNotRolled(ctx context.Context, t model.Target, in model.Inputs) (state.Rollout, error) {
	r, err := o.loadRecord(ctx, t, in)
	if err != nil {
		return state.Rollout{}, err
	}
	why := in.NotRolled
	text := notRolledPrefix + why.Error()
	if o.leases().HeldByOther(r.Lease(), o.Owner, o.Clock.Now()) {
		return r, nil // another replica writes it
	}
	if r.Phase == "" {
		r.Phase, r.Reason = state.PhaseHalted, text
		o.Log.Warn("opted-in group is never rolled: status says why", zap.String(logging.Group, r.Group), zap.Error(why))
		return o.save(ctx, r, "not rolled: recorded for status")
	}
	if r.Reason == text || r.Warning == text {
		return r, nil
	}
	r.Warning = text
	next, err := o.save(ctx, r, "not rolled: warning recorded for status")
	if errors.Is(err, state.ErrConflict) {
		return r, nil // the next tick writes it on the record as it is then
	}
	return next, err
}

// releaseNotRolled returns the record t's rollout goes on from: r itself, or, when r is the Halted record
// recordNotRolled wrote for a group that had none (no target AMI, the not-rolled reason) and the group is a
// target now (its tags were fixed), r without that phase and reason, on t's platform and cluster: the group is
// seen as for the first time, and its first write moves the stored record from Halted to Idle or Detected.
func releaseNotRolled(t model.Target, r state.Rollout) state.Rollout {
	if r.Phase != state.PhaseHalted || r.Current != nil || r.TargetImageID != "" || !strings.HasPrefix(r.Reason, notRolledPrefix) {
		return r
	}
	r.Phase, r.Reason, r.Platform, r.Cluster = "", "", t.Platform, t.Cluster
	return r
}
