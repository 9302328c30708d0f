package engine

import (
	"context"
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// fakeGate is the AMI gate: it refuses every AMI named in refuse and records what it was asked.
type fakeGate struct {
	refuse map[string]model.AMIRejection
	asked  []providers.GateRequest
}

var _ AMIChecker = (*fakeGate)(nil)

func (g *fakeGate) Check(_ context.Context, req providers.GateRequest) (*model.AMIRejection, error) {
	g.asked = append(g.asked, req)
	if rej, ok := g.refuse[req.ImageID]; ok {
		return &rej, nil
	}
	return nil, nil
}

// reconcileFor runs Reconcile every minute for d on the fake clock with in, and returns the stored record.
func reconcileFor(t *testing.T, rg *rig, d time.Duration, in func() model.Inputs) state.Rollout {
	t.Helper()
	for end := rg.clock.Now().Add(d); rg.clock.Now().Before(end); rg.clock.Step(time.Minute) {
		_, err := rg.o.Reconcile(context.Background(), rg.target, in())
		require.NoError(t, err)
	}
	stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
	require.NoError(t, err)
	return stored
}

// A new AMI the gate refuses (invariant 10, C20) holds the rollout at Waiting with the refusal as its reason:
// no launch template version and no instance refresh, however long it waits; the same world with the gate
// passing starts the refresh, so the hold is the gate's doing.
func TestAMIRefusedByTheGateWaitsWithoutALaunchTemplateVersionOrARefresh(t *testing.T) {
	for _, refused := range []bool{true, false} {
		rg, f := refreshRig()
		gate := &fakeGate{refuse: map[string]model.AMIRejection{}}
		if refused {
			gate.refuse[amiNew] = model.AMIRejection{ImageID: amiNew, Reason: "owner", Detail: "is owned by account 999988887777, not an allowed owner"}
		}
		rg.o.AMIGate = gate
		rg.seed0(state.Rollout{Phase: state.PhaseCompleted, TargetImageID: amiOld, PreviousImageID: "ami-00000000000000009"})
		stored := reconcileFor(t, rg, 10*time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
		require.NotEmpty(t, gate.asked, "the gate is asked before the rollout may start")
		if !refused {
			require.Len(t, f.starts, 1, "with the gate passing, the same world starts the refresh")
			continue
		}
		require.Equal(t, state.PhaseWaiting, stored.Phase)
		require.Contains(t, stored.Reason, model.AMIRefusedPrefix+amiNew)
		require.Empty(t, f.starts, "no instance refresh of a refused AMI")
		require.Empty(t, stored.NewTemplateVersion, "no launch template version of a refused AMI")
	}
}

// A newer AMI that supersedes a rollout (its refresh cancelled for it) needs its own approval: the approval of
// the AMI it supersedes is not carried over, and the rollout waits for an approval naming the newer AMI.
func TestSupersedingAMIIsNotApprovedByTheApprovalOfTheAMIItSupersedes(t *testing.T) {
	rg, f := refreshRig()
	rg.target.Policy.Approval = model.ApprovalManual
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusCancelled, now0.Add(-time.Minute))}
	rec := refreshing("ir-1")
	rec.ApprovedImage, rec.ApprovedBy = amiNew, "ops"
	rec.Refresh.Cancel = newerAMIPrefix + amiBad
	rg.seed0(rec)
	newer := &model.ResolvedAMI{Parameter: "/golden/ecs", ImageID: amiBad, Version: 3, LastModified: now0.Add(-48 * time.Hour)}
	stored := reconcileFor(t, rg, 5*time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newer} })
	require.Equal(t, amiBad, stored.TargetImageID, "the newer AMI is the target")
	require.Empty(t, stored.ApprovedImage, "the approval named the superseded AMI")
	require.Empty(t, stored.ApprovedBy)
	require.Equal(t, state.PhaseWaiting, stored.Phase)
	require.Contains(t, stored.Reason, "approval")
	require.Empty(t, f.starts, "nothing rolls without an approval of the newer AMI")
}

// Instances past patch-agent/max-instance-age are replaced inside the group's maintenance window only: the
// age-driven rollout waits for the window like any other; once the window opens, it starts its refresh.
func TestMaxInstanceAgeRolloutWaitsForTheMaintenanceWindow(t *testing.T) {
	rg, f := refreshRig()
	w, err := model.ParseWindowHours("22:00-04:00", "UTC")
	require.NoError(t, err)
	rg.target.Policy.Window, rg.target.Policy.MaxInstanceAge = w, 30*24*time.Hour
	rg.seed0(state.Rollout{Phase: state.PhaseCompleted, TargetImageID: amiOld, PreviousImageID: "ami-00000000000000009"})
	aged := func() model.Inputs {
		v := oldFleet()
		v.Instances[0].LaunchTime = now0.Add(-40 * 24 * time.Hour)
		return model.Inputs{View: v, AMI: &model.ResolvedAMI{Parameter: "/golden/ecs", ImageID: amiOld, Version: 1, LastModified: now0.Add(-60 * 24 * time.Hour)}}
	}
	stored := reconcileFor(t, rg, 30*time.Minute, aged) // 10:00-10:30 UTC: the window is closed
	require.Equal(t, TriggerMaxInstanceAge, stored.Trigger)
	require.Equal(t, state.PhaseWaiting, stored.Phase)
	require.Contains(t, stored.Reason, "maintenance window")
	require.Empty(t, f.starts, "no replacement outside the window, whatever the instances' age")

	rg.clock.SetTime(time.Date(2026, 12, 1, 22, 5, 0, 0, time.UTC))
	stored = reconcileFor(t, rg, 5*time.Minute, aged)
	require.Len(t, f.starts, 1, "the window is open: the age-driven refresh starts")
	require.NotEqual(t, state.PhaseWaiting, stored.Phase)
}
