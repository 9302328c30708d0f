package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Two plain surge groups of one ECS cluster roll to a new AMI at once. The per-cluster budget
// (--cluster-budget) bounds the instances DRAINING at once across both groups, whichever agent replica drains
// them: every drain claims a slot of the cluster's budget record in the store first, so three replicas acting
// concurrently on one table hold the cluster to the budget too. Each group ends at its desired capacity on the
// new AMI; the checker (invariant 3 per group and per cluster, invariant 1 at every simulated event) finds
// nothing.
func TestClusterBudgetTwoGroupsOfOneClusterNeverDrainBeyondIt(t *testing.T) {
	for _, tc := range []struct {
		budget, replicas int
	}{
		{budget: 1, replicas: 1},
		{budget: 2, replicas: 1},
		{budget: 1, replicas: 3},
	} {
		t.Run(fmt.Sprintf("budget %d, %d replica(s)", tc.budget, tc.replicas), func(t *testing.T) {
			a := demo.GroupSetup{Name: "web-a", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 6, Desired: 3}
			b := demo.GroupSetup{Name: "web-b", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 6, Desired: 3}
			policy := lifecycle.DefaultPolicy()
			policy.ClusterBudget = tc.budget
			w := build(t, demo.Spec{Groups: []demo.GroupSetup{a, b}, Services: map[string]int{"web": 12}, Policy: policy})
			maxDraining := 0
			w.Account.OnChange(func(v *sim.View) {
				n := 0
				for _, g := range v.Groups() {
					for _, i := range g.Instances {
						if g.Cluster == "shared" && i.ContainerInstanceStatus == "DRAINING" && i.LifecycleState == "InService" {
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
			w.PublishAMI("/golden/shared", demo.ImageB)
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
			requireAllOn(t, w, a.Name, demo.ImageB, 3)
			requireAllOn(t, w, b.Name, demo.ImageB, 3)
			require.Equal(t, 12, w.Account.ServiceTasks("shared", "web"))
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// Field case C23 with the per-cluster budget: an operator drains by hand a container instance of another group
// of the cluster, one the agent does not manage (the store knows nothing of that drain), while a replacement
// waits for its surge instance. The capacity-provider strategy's fresh look at the cluster counts that drain
// against the budget (1): the drain waits, with the reason on the status, and starts only once the operator's
// instance is ACTIVE again; never two DRAINING at once in the cluster.
func TestC23OperatorsDrainCountsAgainstTheClusterBudget(t *testing.T) {
	g := demo.GroupSetup{Name: "cp-asg", Cluster: "c1", Parameter: "/golden/cp", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp")}
	other := demo.GroupSetup{Name: "other", Cluster: "c1", Parameter: "/golden/other", Min: 2, Max: 2, Desired: 2, Unmanaged: true}
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{g, other}, Services: map[string]int{"web": 6}})
	settle(t, w, 2*time.Minute)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepReplacementHealthy && !r.Current.GiveBack
	})
	require.NoError(t, err)
	require.True(t, done, "a replacement waits for its surge instance: %+v", w.Rollout(ctx, g.Name))
	byHand := w.Account.Group(other.Name).Instances[0]
	setState := func(status ecstypes.ContainerInstanceStatus) {
		t.Helper()
		_, err := w.Account.ECS().UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{
			Cluster: aws.String(g.Cluster), ContainerInstances: []string{byHand.ContainerInstanceARN}, Status: status})
		require.NoError(t, err)
	}
	setState(ecstypes.ContainerInstanceStatusDraining)
	drainedAt := w.Account.Clock().Now()
	_, err = w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.StepDraining, r.Current.Step)
	require.True(t, r.Current.DrainStartedAt.IsZero(), "no drain started beside the operator's")
	require.Contains(t, r.Reason, "per-cluster budget of 1: container instance(s) "+byHand.ContainerInstanceARN)
	old, ok := w.Account.Instance(r.Current.OldInstanceID)
	require.True(t, ok)
	require.Equal(t, "ACTIVE", old.ContainerInstanceStatus)

	setState(ecstypes.ContainerInstanceStatusActive)
	done, err = w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "completes once the operator's instance is ACTIVE again: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 20*time.Minute)
	requireAllOn(t, w, g.Name, demo.ImageB, 3)
	// The operator's drain takes a serving instance of the other group away (the operator, not the agent):
	// that is the only violation.
	for _, v := range w.Checker.Finish() {
		require.Equal(t, 1, v.Invariant, "%v", v)
		require.Equal(t, other.Name, v.Group, "%v", v)
		require.Equal(t, drainedAt, v.At, "%v", v)
	}
}
