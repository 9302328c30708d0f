package engine

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// decideRefresh, the whole decision of a look at the agent's refresh, from the record, the group's view and
// what the look saw: no store, no account. Each row is one status and record, and the command it must give.
func TestDecideRefreshFromTheRecordAndWhatTheLookSaw(t *testing.T) {
	const id = "ir-1"
	type progress = state.RefreshProgress
	view := model.GroupView{Desired: 4, Max: 5}
	full := model.GroupView{Desired: 5, Max: 5}
	for _, c := range []struct {
		name   string
		p      progress
		status string
		seen   refreshLook
		view   model.GroupView
		want   refreshCommandKind
		reason string // a substring of the command's reason
		halt   string // the halt it records
	}{
		{name: "successful: on to Verifying", status: providers.RefreshSuccessful, want: refreshVerify, reason: "Successful"},
		{name: "successful after a halt recorded: the halt", p: progress{Halt: "alarm"}, status: providers.RefreshSuccessful, want: refreshHaltIt, halt: "alarm"},
		{name: "successful rollback refresh: rolled back", p: progress{Rollback: true}, status: providers.RefreshSuccessful, want: refreshRolledBackDone},
		{name: "rollback by API that Auto Scaling finished", p: progress{Rollback: true, ByAPI: true}, status: providers.RefreshRollbackSuccessful, want: refreshRolledBackDone},
		{name: "rollback by API on a refresh that ended first: refresh back", p: progress{Rollback: true, ByAPI: true, PreviousVersion: "3"}, status: providers.RefreshSuccessful, want: refreshBackByRefresh},
		{name: "rollback failed", p: progress{Rollback: true, ByAPI: true, StatusReason: "no"}, status: providers.RefreshRollbackFailed, want: refreshHaltRollout, reason: "rollback of instance refresh ir-1 failed: no"},
		{name: "failed: halts with Auto Scaling's reason", p: progress{StatusReason: "bad"}, status: providers.RefreshFailed, want: refreshHaltIt, halt: "instance refresh ir-1 failed: bad"},
		{name: "failed after a halt recorded: that halt", p: progress{Halt: "launch ABANDONed", StatusReason: "bad"}, status: providers.RefreshFailed, want: refreshHaltIt, halt: "launch ABANDONed"},
		{name: "rollback refresh failed: Halted", p: progress{Rollback: true, PreviousVersion: "3", StatusReason: "bad"}, status: providers.RefreshFailed, want: refreshHaltRollout, reason: "to launch template version 3 failed: bad"},
		{name: "cancelled", p: progress{Cancel: "paused"}, status: providers.RefreshCancelled, want: refreshCancelledThen},
		{name: "cancelling: waits for the actions in flight", status: providers.RefreshCancelling, want: refreshWait, reason: "cancelling"},
		{name: "rolling back outside the agent: followed", status: providers.RefreshRollbackInProgress, want: refreshFollowRollback, reason: "outside the agent"},
		{name: "the agent's rollback in progress: waits", p: progress{Rollback: true, ByAPI: true}, status: providers.RefreshRollbackInProgress, want: refreshWait, reason: "rolling back"},
		{name: "a recorded cancel not seen through: cancelled again", p: progress{Cancel: "paused"}, status: providers.RefreshInProgress, want: refreshCancelIt, reason: "paused"},
		{name: "a recorded rollback by API: RollbackInstanceRefresh", p: progress{Rollback: true, ByAPI: true}, status: providers.RefreshInProgress, want: refreshRollBackByAPI},
		{name: "a rollback refresh under way: waits", p: progress{Rollback: true, PreviousVersion: "3"}, status: providers.RefreshInProgress, want: refreshWait, reason: "rolling back to launch template version 3"},
		{name: "under way, gates not read: read them", status: providers.RefreshInProgress, want: refreshReadGates},
		{name: "pending, gates not read: read them", status: providers.RefreshPending, want: refreshReadGates},
		{name: "under way, failing: halts", status: providers.RefreshInProgress, seen: refreshLook{gatesRead: true, failing: "alarm a in ALARM"}, want: refreshHaltIt, halt: "alarm a in ALARM"},
		{name: "under way, failing and paused: the halt first", status: providers.RefreshBaking, seen: refreshLook{gatesRead: true, failing: "alarm", stops: "paused"}, want: refreshHaltIt, halt: "alarm"},
		{name: "under way, stopped by a gate: cancelled", status: providers.RefreshInProgress, seen: refreshLook{gatesRead: true, stops: "maintenance window closed"}, want: refreshCancelIt, reason: "maintenance window closed"},
		{name: "under way, nothing in the way: waits", status: providers.RefreshInProgress, seen: refreshLook{gatesRead: true}, want: refreshWait, reason: "instance refresh ir-1"},
		{name: "under way at MaxSize: waits and says so", status: providers.RefreshInProgress, seen: refreshLook{gatesRead: true}, view: full, want: refreshWait, reason: "at its MaxSize (5)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.p
			p.ID = id
			r := state.Rollout{Group: "prod", Phase: state.PhaseReplacing, Refresh: &p}
			if p.Rollback {
				r.Phase = state.PhaseRollingBack
			}
			seen := c.seen
			seen.refresh = providers.InstanceRefresh{ID: id, Status: c.status}
			v := c.view
			if v.Max == 0 {
				v = view
			}
			got := decideRefresh(r, v, seen)
			require.Equal(t, c.want, got.kind, "%+v", got)
			require.Contains(t, got.reason, c.reason)
			require.Equal(t, c.halt, got.halt)
			if c.view.Max == 0 && got.kind == refreshWait {
				require.NotContains(t, got.reason, "MaxSize", "room below MaxSize")
			}
		})
	}
}
