package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Issue #20 item 1: a 10-instance surge group tagged patch-agent/batch-size rolls to a new AMI k at a time —
// surge k, wait for k healthy replacements, drain k (each with its own slot of the per-cluster budget),
// terminate k — with every invariant held at every simulated event (the checker's invariant 3 reads the
// group's batch size) and serving capacity never below desired. A cluster budget below the batch size caps
// how many of a batch drain at once: the batch waits for slots and still completes.
func TestBatchSizeTenInstanceGroupRollsThreeAtATime(t *testing.T) {
	for _, tc := range []struct {
		tag                  string
		budget, wantDraining int
		wantDesired          int32
	}{
		{tag: "3", budget: 3, wantDraining: 3, wantDesired: 13},
		{tag: "30%", budget: 3, wantDraining: 3, wantDesired: 13},
		{tag: "3", budget: 2, wantDraining: 2, wantDesired: 13},
		{tag: "", budget: 3, wantDraining: 1, wantDesired: 11},
	} {
		t.Run(fmt.Sprintf("batch %q, cluster budget %d", tc.tag, tc.budget), func(t *testing.T) {
			g := demo.GroupSetup{Name: "web-asg", Cluster: "c1", Parameter: "/golden/web", Min: 10, Max: 12, Desired: 10}
			if tc.tag != "" {
				g.Tags = map[string]string{lifecycle.TagBatchSize: tc.tag}
			}
			policy := lifecycle.DefaultPolicy()
			policy.ClusterBudget = tc.budget
			w := build(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 20}, Policy: policy})
			maxDraining, maxDesired, minServing := 0, int32(0), 1000
			w.Account.OnChange(func(v *sim.View) {
				gv := v.Group(g.Name)
				draining, serving := 0, 0
				for _, i := range gv.Instances {
					if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "DRAINING" {
						draining++
					}
					if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
						serving++
					}
				}
				maxDraining, maxDesired, minServing = max(maxDraining, draining), max(maxDesired, gv.Desired), min(minServing, serving)
			})
			settle(t, w, 30*time.Second)
			began := w.Account.Clock().Now()
			r := rollTo(t, w, g, demo.ImageB)
			t.Logf("rollout of 10 instances took %s of simulated time", r.UpdatedAt.Sub(began))
			require.Equal(t, state.PhaseCompleted, r.Phase, "%+v", r)
			require.Len(t, r.Replaced, 10, "every old instance replaced once")
			require.Nil(t, r.Current)
			require.Empty(t, r.Batch)
			require.Equal(t, tc.wantDraining, maxDraining, "instances DRAINING at once: the batch, capped by the cluster budget")
			require.Equal(t, tc.wantDesired, maxDesired, "one surge of the whole batch, never more")
			require.GreaterOrEqual(t, minServing, 10, "serving capacity never below desired at any simulated event")
			settle(t, w, 5*time.Minute)
			requireAllOn(t, w, g.Name, demo.ImageB, 10)
			require.Equal(t, int32(12), w.Account.Group(g.Name).Max, "max restored after the batch surge")
			require.Empty(t, w.Checker.Finish())
		})
	}
}
