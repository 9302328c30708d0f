package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Two groups of one ECS cluster roll to a new AMI at once, each by its instance refresh. The per-cluster
// budget (--cluster-budget) bounds the instances DRAINING at once across both groups (old instances the
// refreshes hold in Terminating:Wait), whichever agent replica drains them: every drain claims a slot of the
// cluster's budget record in the store first, so three replicas acting concurrently on one table hold the
// cluster to the budget too. Each group ends at its desired capacity on the new AMI; the checker (invariant 3
// per group and per cluster, invariant 1 at every simulated event) finds nothing, and the agent writes no
// capacity.
func TestClusterBudgetTwoGroupsOfOneClusterNeverDrainBeyondIt(t *testing.T) {
	for _, tc := range []struct {
		budget, replicas int
	}{
		{budget: 1, replicas: 1},
		{budget: 2, replicas: 1},
		{budget: 1, replicas: 3},
	} {
		t.Run(fmt.Sprintf("budget %d, %d replica(s)", tc.budget, tc.replicas), func(t *testing.T) {
			a := testworld.GroupSetup{Name: "web-a", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 6, Desired: 3}
			b := testworld.GroupSetup{Name: "web-b", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 6, Desired: 3}
			policy := model.DefaultPolicy()
			policy.ClusterBudget = tc.budget
			w := build(t, testworld.Spec{Groups: []testworld.GroupSetup{a, b}, Services: map[string]int{"web": 12}, Policy: policy})
			maxDraining := 0
			w.Account.OnChange(func(v *sim.View) {
				n := 0
				for _, g := range v.Groups() {
					for _, i := range g.Instances {
						if g.Cluster == "shared" && i.ContainerInstanceStatus == "DRAINING" && (i.LifecycleState == "Terminating:Wait" || i.LifecycleState == "InService") {
							n++
						}
					}
				}
				maxDraining = max(maxDraining, n)
			})
			replicas := []*agent.Agent{w.Agent}
			for i := 1; i < tc.replicas; i++ {
				replicas = append(replicas, w.NewReplica(fmt.Sprintf("replica-%d", i)))
			}
			settle(t, w, 30*time.Second)
			ctx := context.Background()
			w.PublishAMI("/golden/shared", testworld.ImageB)
			completed := func() bool {
				return w.Rollout(ctx, a.Name).Phase == state.PhaseCompleted && w.Rollout(ctx, b.Name).Phase == state.PhaseCompleted
			}
			for range 3000 {
				var wg sync.WaitGroup
				for _, r := range replicas {
					wg.Add(1)
					go func() { defer wg.Done(); _ = r.RunOnce(ctx) }()
				}
				wg.Wait()
				require.Empty(t, w.Checker.Check())
				w.Account.Advance(tick)
				if completed() {
					break
				}
			}
			require.True(t, completed(), "both rollouts complete: %+v / %+v", w.Rollout(ctx, a.Name), w.Rollout(ctx, b.Name))
			require.Equal(t, tc.budget, maxDraining, "instances DRAINING at once across the cluster: the budget, no more")
			settle(t, w, 5*time.Minute)
			requireAllOn(t, w, a.Name, testworld.ImageB, 3)
			requireAllOn(t, w, b.Name, testworld.ImageB, 3)
			require.Equal(t, 12, w.Account.ServiceTasks("shared", "web"))
			requireNoCapacityWrites(t, w, a.Name)
			requireNoCapacityWrites(t, w, b.Name)
			require.Empty(t, w.Checker.Finish())
		})
	}
}
