package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/state"
)

// An autoscaler scales out while the Surge step is held — the agent crashed right after it picked the instance,
// and (second case) the group was paused too. The surge must not take the autoscaler's instance for its own: it
// surges on top of the desired capacity it finds (Replacement.SurgeTo, recorded before the call), so the
// terminations with decrement give back only the agent's surge and desired capacity ends where the autoscaler
// set it, every instance on the new AMI, with every invariant held (capacity never below the autoscaler's
// desired once its instance serves).
func TestSurgeHeldWhileAnAutoscalerScalesOutGivesBackOnlyTheAgentsOwn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		paused bool
	}{
		{"crash before the surge call", false},
		{"crash, then paused while the autoscaler scales out", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 2, Max: 8, Desired: 3}
			w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 6}})
			settle(t, w.World, 10*time.Second)
			fuse := &demo.Fuse{OnWrite: func(r state.Rollout) bool {
				return r.Current != nil && r.Current.Step == state.StepSurge // the pick is durable, the surge not sent
			}}
			w.Restart(fuse)
			w.PublishAMI(g.Parameter, demo.ImageB)
			done, err := w.RunUntil(ctx, tick, time.Hour, fuse.Blown)
			require.NoError(t, err)
			require.True(t, done, "crashed at the surge step")
			require.Equal(t, int32(3), w.Account.Group(g.Name).Desired, "the surge was not sent")
			if tc.paused {
				require.NoError(t, w.Store.PutLock(ctx, state.Lock{Group: g.Name, Reason: "change freeze", Who: "alice", Since: w.Account.Clock().Now()}))
			}
			w.Restart(nil)
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 4), "the autoscaler scales out while the surge is held")
			if tc.paused {
				_, err := w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
				require.NoError(t, err)
				r := w.Rollout(ctx, g.Name)
				require.Equal(t, state.StepSurge, r.Current.Step, "held at the surge")
				require.Contains(t, r.Reason, "change freeze")
				require.Equal(t, int32(4), w.Account.Group(g.Name).Desired, "no surge while paused")
				require.NoError(t, w.Store.DeleteLock(ctx, g.Name))
			}
			maxDesired := int32(0)
			done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
				maxDesired = max(maxDesired, w.Account.Group(g.Name).Desired)
				r := w.Rollout(ctx, g.Name)
				if r.Current != nil && r.Current.SurgeTo != 0 {
					require.Equal(t, r.Current.DesiredBefore+1, r.Current.SurgeTo)
				}
				return r.Phase == state.PhaseCompleted
			})
			require.NoError(t, err)
			require.True(t, done, "rollout completes: %+v", w.Rollout(ctx, g.Name))
			settle(t, w.World, 5*time.Minute)
			grp := w.Account.Group(g.Name)
			require.Equal(t, int32(4), grp.Desired, "desired capacity where the autoscaler set it")
			require.Equal(t, int32(5), maxDesired, "the agent's surge went on top of the autoscaler's instance")
			require.Len(t, grp.Instances, 4)
			for _, i := range grp.Instances {
				require.Equal(t, demo.ImageB, i.ImageID, i.ID)
			}
			require.Empty(t, w.Checker.Finish())
		})
	}
}
