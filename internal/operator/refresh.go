package operator

import (
	"fmt"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// A manual rollback of a group rolled by instance refresh, in the middle of its refresh or after a halt in it.
// The operator's write moves the record to RollingBack/InstanceRefresh with the request recorded; the agent
// then sends RollbackInstanceRefresh while Auto Scaling allows it (the refresh is in progress or baking: API
// Reference, RollbackInstanceRefresh), and otherwise cancels the refresh and starts one of its own back to the
// previous launch template version. An operator need not wait for the refresh to finish first: an AMI that
// passes health checks but breaks the application stops reaching instances at once.

// refreshRollbackAllowed reports whether the record is in an instance refresh a manual rollback takes over.
func refreshRollbackAllowed(r state.Rollout) bool {
	p := state.PositionOf(r)
	return r.Refresh != nil && (p == state.Position{Phase: state.PhaseReplacing, Step: state.StepInstanceRefresh} ||
		p == state.Position{Phase: state.PhaseHalted, Step: state.StepInstanceRefresh})
}

// RefreshRollbackPlan is the part of a RollbackPlan that names the instance refresh a rollback takes over and
// the launch template version the group goes back to.
type RefreshRollbackPlan struct {
	ID, Status, PreviousVersion string
}

// planRefreshRollback is planRollback for a record in an instance refresh: the rollback goes to the launch
// template version the group ran before (to may only name its AMI, PreviousImageID; force does not apply).
func planRefreshRollback(r state.Rollout, to string, force bool) (RollbackPlan, error) {
	p := r.Refresh
	if (to != "" && to != r.PreviousImageID) || force {
		return RollbackPlan{}, fmt.Errorf("%s is in instance refresh %s: it rolls back to its previous launch template version %s, not to an AMI; drop --to and --force",
			r.Group, p.ID, p.PreviousVersion)
	}
	if p.PreviousVersion == "" {
		return RollbackPlan{}, fmt.Errorf("no previous launch template version is recorded for group %s: nothing to roll back to", r.Group)
	}
	return RollbackPlan{Group: r.Group, Platform: r.Platform, Phase: r.Phase, From: r.TargetImageID, To: r.PreviousImageID,
		Instances: r.Instances, OnFrom: r.OnTarget, Source: r.Source,
		Refresh: &RefreshRollbackPlan{ID: p.ID, Status: p.Status, PreviousVersion: p.PreviousVersion}}, nil
}

// applyRefreshRollback turns the record into the rollback: RollingBack/InstanceRefresh, by RollbackInstanceRefresh
// first (ByAPI), RequestedBy who.
func applyRefreshRollback(r *state.Rollout, who string, now time.Time) {
	p := r.Refresh
	p.Rollback, p.ByAPI, p.RequestedBy, p.Cancel = true, true, who, ""
	if r.Phase == state.PhaseHalted {
		p.Halt = r.Reason
	}
	r.Phase, r.Reason = state.PhaseRollingBack, "manual rollback by "+who
	r.Steps++
	r.UpdatedAt = now
}
