package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// `patch-agent rollback` of a rollout whose refresh intent is recorded but not sent yet (held by a pause, a
// closed window or an alarm between the intent's write and StartInstanceRefresh) never starts the refresh to
// the target's version: the group is rolled back to the previous version, or left where it is.
func TestManualRollbackBeforeTheRefreshStartsNeverStartsTheRefreshToTheTarget(t *testing.T) {
	ctx := context.Background()
	rg, f := refreshRig()
	rg.seed0(refreshing(""))
	require.NoError(t, operator.Pause(ctx, rg.store, "prod", "incident", "bob", time.Time{}, now0))
	pause := &state.Lock{Group: "prod", Who: "bob", Reason: "incident", Since: now0}
	_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	require.Empty(t, f.starts, "the pause holds the intent")

	_, err = operator.Rollback(ctx, rg.store, "prod", "", "alice", false, now0)
	require.NoError(t, err)
	for range 3 {
		rg.clock.Step(time.Minute)
		_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
		require.NoError(t, err)
	}
	for _, in := range f.starts {
		require.Equal(t, "1", aws.ToString(in.DesiredConfiguration.LaunchTemplate.Version),
			"a rollback starts no refresh to the target's launch template version 2")
	}
	require.Zero(t, f.rollbacks, "RollbackInstanceRefresh is never sent to a refresh of the rollback's own")
	require.Len(t, f.starts, 1, "one refresh back to the previous version, through the pause")
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseRollingBack, stored.Phase, stored.Reason)
	require.Equal(t, "alice", stored.Refresh.RequestedBy)
	require.Equal(t, "1", stored.Refresh.TargetVersion())
}
