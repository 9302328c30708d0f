package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The agent's refresh in progress on a group that lost the agent's terminating hook since it started (a stack
// update deleted it) is cancelled: Auto Scaling would terminate the old instances undrained. A read of the hooks
// from before the start says nothing (the start's own read found them), and the group with both hooks goes on.
// Once the cancel is seen through, the rollout waits, naming the missing hook, as a start would.
func TestRefreshIsCancelledWhenTheGroupLosesTheAgentsHookDuringIt(t *testing.T) {
	ctx := context.Background()
	both := []model.GroupHook{{Name: "patch-agent-drain", Transition: model.TransitionTerminating},
		{Name: "patch-agent-launch", Transition: model.TransitionLaunching}}
	for _, tc := range []struct {
		name       string
		hooks      []model.GroupHook
		readAt     time.Time
		wantCancel bool
	}{
		{name: "both hooks, read since the start: goes on", hooks: both, readAt: now0},
		{name: "terminating hook gone, read before the start: goes on", hooks: both[1:], readAt: now0.Add(-2 * time.Minute)},
		{name: "terminating hook gone, read since the start: cancelled", hooks: both[1:], readAt: now0, wantCancel: true},
		{name: "launching hook gone, read since the start: cancelled", hooks: both[:1], readAt: now0, wantCancel: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg, f := refreshRig()
			f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
			rg.seed0(refreshing("ir-1"))
			rg.o.KnownHooks = func(string) ([]model.GroupHook, time.Time, bool) { return tc.hooks, tc.readAt, true }

			_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(ctx, "prod")
			require.NoError(t, err)
			if !tc.wantCancel {
				require.Zero(t, f.cancels)
				require.Equal(t, state.PhaseReplacing, stored.Phase, stored.Reason)
				return
			}
			require.Equal(t, 1, f.cancels)
			require.Contains(t, stored.Refresh.Cancel, "lifecycle hook removed during the refresh")

			// Auto Scaling describes the group's hooks as the read did: the start that follows the cancel finds
			// the hook missing too.
			f.hooks = slices.DeleteFunc(f.hooks, func(h astypes.LifecycleHook) bool {
				return !slices.ContainsFunc(tc.hooks, func(k model.GroupHook) bool { return k.Name == aws.ToString(h.LifecycleHookName) })
			})
			rg.clock.Step(time.Minute)
			f.refreshes[0].Status = astypes.InstanceRefreshStatusCancelled
			_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
			require.NoError(t, err)
			stored, err = rg.store.GetRollout(ctx, "prod")
			require.NoError(t, err)
			require.Equal(t, 1, f.cancels)
			require.Len(t, f.starts, 0, "no new refresh while the hook is missing")
			require.Equal(t, state.PhaseWaiting, stored.Phase, stored.Reason)
			require.Contains(t, stored.Reason, "instance refresh needs the agent's lifecycle hooks")
		})
	}
}
