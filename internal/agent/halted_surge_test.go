package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A rollout halts without rollback at its drain deadline (the drain cannot be checked any more), leaving its
// surge in desired capacity (3 -> 4). A later operator rollback gives that surge back first — one outdated
// instance drained, then terminated with decrement, never by lowering desired capacity — so the group ends
// where the user set it (desired 3, max 6) on the rolled-back AMI, every invariant held.
func TestHaltedSurgeIsGivenBackByTheNextRollback(t *testing.T) {
	g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 2, Max: 6, Desired: 3}
	faults := sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:ListTasks", Every: 1, Codes: []string{sim.FaultThrottlingException}})
	spec := demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 6}, Faults: faults}
	w := build(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseHalted })
	require.NoError(t, err)
	require.True(t, done)
	require.Contains(t, w.Rollout(ctx, g.Name).Reason, "did not finish within")
	require.Equal(t, int32(4), w.Account.Group(g.Name).Desired, "the halt left the surge")
	faults.SetRules() // ECS answers again

	_, err = operator.Rollback(ctx, w.Store, g.Name, "", "alice", false, w.Account.Clock().Now())
	require.NoError(t, err)
	require.Equal(t, int32(4), w.Rollout(ctx, g.Name).HaltedSurgeTo)
	maxDesired := int32(0)
	done, err = w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		maxDesired = max(maxDesired, w.Account.Group(g.Name).Desired)
		r := w.Rollout(ctx, g.Name)
		return r.TargetImageID == demo.ImageA && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "the rollback completes: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 5*time.Minute)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(3), grp.Desired, "the halted surge given back")
	require.Equal(t, int32(6), grp.Max)
	require.LessOrEqual(t, maxDesired, int32(4), "never a surge on top of the halted one")
	require.Len(t, grp.Instances, 3)
	for _, i := range grp.Instances {
		require.Equal(t, demo.ImageA, i.ImageID, i.ID)
	}
	require.Zero(t, w.Rollout(ctx, g.Name).HaltedSurgeTo)
	require.Empty(t, w.Checker.Finish())
}
