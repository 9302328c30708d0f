package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// heldIntent seeds prod's refresh intent (version 2, amiNew) whose StartInstanceRefresh a pause holds, takes a
// look under the pause, and lets an hour pass.
func heldIntent(t *testing.T) (*rig, *fakeRefreshes) {
	t.Helper()
	rg, f := refreshRig()
	rg.o.AMIGate = &fakeGate{refuse: map[string]model.AMIRejection{}}
	rg.seed0(refreshing(""))
	pause := &state.Lock{Group: "prod", Who: "ops", Reason: "incident", Since: now0}
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	require.Empty(t, f.starts, "the pause holds the intent")
	rg.clock.Step(time.Hour)
	return rg, f
}

// An AMI the gate refuses by the time the held intent may start (deregistered meanwhile, its owner taken off
// the allow-list) is not rolled: invariant 10 holds at StartInstanceRefresh, not only at Preparing.
func TestHeldRefreshIntentIsNotStartedOnceTheAMIGateRefusesItsAMI(t *testing.T) {
	rg, f := heldIntent(t)
	rg.o.AMIGate.(*fakeGate).refuse[amiNew] = model.AMIRejection{ImageID: amiNew, Reason: "state", Detail: "is deregistered"}
	stored := reconcileFor(t, rg, 5*time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
	require.Empty(t, f.starts, "no instance refresh of a refused AMI")
	require.Equal(t, state.PhaseWaiting, stored.Phase, stored.Reason)
	require.Contains(t, stored.Reason, model.AMIRefusedPrefix+amiNew)
}

// A newer AMI published while the intent is held supersedes it before anything starts: no refresh to the
// superseded AMI is started only to be cancelled at the next look.
func TestHeldRefreshIntentIsSupersededByANewerAMIBeforeItStarts(t *testing.T) {
	rg, f := heldIntent(t)
	newer := &model.ResolvedAMI{Parameter: "/golden/ecs", ImageID: amiBad, Version: 3, LastModified: now0.Add(-48 * time.Hour)}
	rg.templates.created = 3 // the launch template version of the newer AMI
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newer})
	require.NoError(t, err)
	for _, in := range f.starts {
		require.NotEqual(t, "2", aws.ToString(in.DesiredConfiguration.LaunchTemplate.Version), "no refresh to the superseded AMI's version")
	}
	require.Zero(t, f.cancels)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, amiBad, stored.TargetImageID)
}
