package engine

import (
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A manual rollback's refresh (amiNew -> amiOld) cancelled for a newer AMI whose parameter is pointed back at
// the AMI rolled back from before the cancel ends: the rollout does not take that AMI as its new target (it
// is not rolled again while its source names it); the rollback goes on.
func TestCancelledManualRollbackIsNotSupersededByTheAMIItRolledBackFrom(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusCancelled, now0.Add(-time.Minute))}
	rec := refreshing("ir-1")
	rec.TargetImageID, rec.PreviousImageID, rec.RollbackFrom = amiOld, amiNew, amiNew
	rec.Source, rec.ApprovedImage, rec.ApprovedBy = state.ManualRollbackSource+"alice", amiOld, "alice"
	rec.Refresh.Cancel = newerAMIPrefix + amiBad
	rg.seed0(rec)
	stored := reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
	require.Equal(t, amiOld, stored.TargetImageID, "%s %s", stored.Phase, stored.Reason)
	require.Equal(t, amiNew, stored.RollbackFrom)
}
