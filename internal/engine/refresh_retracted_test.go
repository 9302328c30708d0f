package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// An AMI its source no longer names while the rollout waits (the soak, the approval, the window) is not rolled
// once the wait ends: a publisher who points the parameter back to the AMI the group runs (the new one is bad)
// during the soak retracts it, which is what the soak is for; and a newer AMI replaces the one waited for.
func TestWaitingRolloutDoesNotRollAnAMIItsSourceNoLongerNames(t *testing.T) {
	for _, c := range []struct {
		name   string
		source string
	}{{"pointed back to the AMI the group runs", amiOld}, {"moved on to a newer AMI", amiBad}} {
		t.Run(c.name, func(t *testing.T) {
			rg, f := refreshRig()
			rg.target.Policy.MinAMIAge = 24 * time.Hour
			rg.seed0(state.Rollout{Phase: state.PhaseWaiting, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-23 * time.Hour),
				Reason: "soak: ..."})
			src := &model.ResolvedAMI{Parameter: "/golden/ecs", ImageID: c.source, Version: 3, LastModified: now0.Add(-22 * time.Hour)}
			rg.templates.created = 3 // a launch template version of amiNew would be 2
			stored := reconcileFor(t, rg, 3*time.Hour, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: src} })
			require.NotEqual(t, amiNew, stored.TargetImageID, "the source no longer names %s", amiNew)
			for _, in := range f.starts {
				require.NotEqual(t, "2", *in.DesiredConfiguration.LaunchTemplate.Version, "no refresh to the retracted AMI")
			}
			require.Zero(t, f.cancels, "nothing started for the retracted AMI, nothing to cancel")
		})
	}
}
