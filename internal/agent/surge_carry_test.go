package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/state"
)

// An old instance that leaves its group on its own while its replacement is under way (it fails a health check
// and Auto Scaling replaces it; a Spot interruption; someone else's termination) must not leave the agent's
// surge behind nor make the next replacement surge on top of it: desired capacity ends where the user set it,
// never above baseline+1 on the way (invariant 3), and the rollout still completes with every instance on the
// target AMI, never desired 3 -> 4 -> 5 and a group ending with 4 instances.
func TestSurgeIsNotLeftBehindWhenTheOldInstanceLeavesOnItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name string
		// at is how many replacements are done when the old instance of the next one fails its health check.
		at int
	}{
		{"first of three instances", 0},
		{"last of three instances", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 2, Max: 6, Desired: 3}
			w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 6}})
			settle(t, w.World, 10*time.Second)
			w.PublishAMI(g.Parameter, demo.ImageB)
			var r state.Rollout
			done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool {
				r = w.Rollout(ctx, g.Name)
				return r.Current != nil && r.Current.Step == state.StepReplacementHealthy && len(r.Replaced) == tc.at
			})
			require.NoError(t, err)
			require.True(t, done)
			require.Equal(t, int32(4), w.Account.Group(g.Name).Desired, "surged")
			failedAt := w.Account.Clock().Now()
			require.True(t, w.Account.MarkInstanceUnhealthy(r.Current.OldInstanceID))

			maxDesired := int32(0)
			done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
				maxDesired = max(maxDesired, w.Account.Group(g.Name).Desired)
				return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted
			})
			require.NoError(t, err)
			require.True(t, done, "rollout completes: %+v", w.Rollout(ctx, g.Name))
			settle(t, w.World, 5*time.Minute)
			grp := w.Account.Group(g.Name)
			require.Equal(t, int32(3), grp.Desired, "desired capacity back where the user set it")
			require.LessOrEqual(t, maxDesired, int32(4), "never a second surge on top of the first")
			require.Len(t, grp.Instances, 3)
			for _, i := range grp.Instances {
				require.Equal(t, demo.ImageB, i.ImageID, i.ID)
			}
			// The health failure itself takes a serving instance away (Auto Scaling, not the agent): that moment is
			// the only violation. The agent never drains while the instances that stay serve less than desired.
			v := w.Checker.Finish()
			require.Len(t, v, 1, "%v", v)
			require.Equal(t, 1, v[0].Invariant)
			require.Equal(t, failedAt, v[0].At)
		})
	}
}

// Field case C21: a cluster autoscaler raises desired capacity while a rollout surges, then the new AMI proves
// unhealthy and the rollout rolls back. The rollback gives back only the agent's own surge: desired capacity
// ends where the autoscaler set it, on the restored AMI, instead of being lowered once per removed instance.
func TestC21RollbackGivesBackOnlyTheAgentsSurgeWhenAnAutoscalerRaisedDesired(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 2, Max: 8, Desired: 3}
	w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 6}})
	// Today's surge engine drains without cover for the autoscaler's raise here (its surge is counted in the
	// desired capacity the autoscaler set): this test holds who owns desired capacity at the end, so it keeps
	// the checker's rule before others' raises were held (docs/testing.md, "Invariant checker").
	w.Account.MarkImageUnhealthy(demo.ImageB)
	settle(t, w.World, 10*time.Second)
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepReplacementHealthy && w.Account.Group(g.Name).Desired == 4
	})
	require.NoError(t, err)
	require.True(t, done)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 6), "the autoscaler scales out during the surge")

	done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseRolledBack })
	require.NoError(t, err)
	require.True(t, done, "rolled back: %+v", w.Rollout(ctx, g.Name))
	settle(t, w.World, 15*time.Minute)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(6), grp.Desired, "desired capacity where the autoscaler set it")
	require.Len(t, grp.Instances, 6)
	for _, i := range grp.Instances {
		require.Equal(t, demo.ImageA, i.ImageID, i.ID)
		require.Equal(t, "InService", i.LifecycleState, i.ID)
	}
	require.Empty(t, w.Checker.Finish())
}
