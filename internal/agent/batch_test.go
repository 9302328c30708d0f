package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A 10-instance surge group tagged patch-agent/batch-size rolls to a new AMI k at a time — surge k, wait for k
// healthy replacements, drain k (each with its own slot of the per-cluster budget), terminate k — with every
// invariant held at every simulated event (the checker's invariant 3 reads the group's batch size) and serving
// capacity never below desired. A cluster budget below the batch size caps how many of a batch drain at once:
// the batch waits for slots and still completes.
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

// batchGroup is a 6-instance ECS surge group rolled 3 at a time, with a per-cluster budget of 3 so a batch
// drains together.
func batchGroup() (demo.GroupSetup, lifecycle.Policy) {
	g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 3, Max: 12, Desired: 6,
		Tags: map[string]string{lifecycle.TagBatchSize: "3"}}
	policy := lifecycle.DefaultPolicy()
	policy.ClusterBudget = 3
	return g, policy
}

// Batch limits, a halted batch: a batch of 3 halts without rollback at its drain deadline (ECS cannot be asked
// about the drain any more), leaving its whole surge in desired capacity (6 -> 9). The operator's rollback
// gives back what the surge added — three instances, each drained and then terminated with decrement — not one
// of them: the group ends at desired 6 on the rolled-back AMI, never surged on top of the halted batch.
func TestBatchHaltedWithoutRollbackIsGivenBackWholeByTheNextRollback(t *testing.T) {
	ctx := context.Background()
	g, policy := batchGroup()
	faults := sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:ListTasks", Every: 1, Codes: []string{sim.FaultThrottlingException}})
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 12}, Policy: policy, Faults: faults})
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseHalted })
	require.NoError(t, err)
	require.True(t, done)
	halted := w.Rollout(ctx, g.Name)
	require.Contains(t, halted.Reason, "did not finish within")
	require.Len(t, halted.Batch, 2, "the halt stopped a batch of 3")
	require.Equal(t, int32(9), w.Account.Group(g.Name).Desired, "the halt left the batch's surge")
	faults.SetRules() // ECS answers again

	_, err = operator.Rollback(ctx, w.Store, g.Name, "", "alice", false, w.Account.Clock().Now())
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, int32(9), r.HaltedSurgeTo)
	require.Equal(t, int32(3), r.HaltedSurgeCount, "every member's instance is owed")
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
	require.Equal(t, int32(6), grp.Desired, "the whole halted surge given back")
	require.Equal(t, int32(12), grp.Max)
	require.LessOrEqual(t, maxDesired, int32(9), "never a surge on top of the halted one")
	requireAllOn(t, w, g.Name, demo.ImageA, 6)
	require.Zero(t, w.Rollout(ctx, g.Name).HaltedSurgeTo)
	require.Empty(t, w.Checker.Finish())
}

// Batch limits, a member that leaves: while a batch of 3 waits for its replacements, the old instance of one
// member fails its health check and Auto Scaling replaces it (desired stays 9: the agent's surge). The member's
// share of the surge is not left behind: it carries over to another outdated instance, drained and terminated
// with decrement like a member, so the rollout ends at desired 6 (not 7) with every instance on the new AMI and
// never a second surge.
func TestBatchMemberWhoseOldInstanceLeavesOnItsOwnLeavesNoSurgeBehind(t *testing.T) {
	ctx := context.Background()
	g, policy := batchGroup()
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 12}, Policy: policy})
	settle(t, w, 10*time.Second)
	w.PublishAMI(g.Parameter, demo.ImageB)
	var r state.Rollout
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool {
		r = w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepReplacementHealthy && len(r.Batch) == 2
	})
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, int32(9), w.Account.Group(g.Name).Desired, "surged by the batch")
	failedAt := w.Account.Clock().Now()
	require.True(t, w.Account.MarkInstanceUnhealthy(r.Batch[0].OldInstanceID))

	maxDesired := int32(0)
	done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		maxDesired = max(maxDesired, w.Account.Group(g.Name).Desired)
		return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rollout completes: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 5*time.Minute)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(6), grp.Desired, "desired capacity back where the user set it: no member's surge left behind")
	require.LessOrEqual(t, maxDesired, int32(9), "never a second surge on top of the batch's")
	requireAllOn(t, w, g.Name, demo.ImageB, 6)
	// The health failure itself takes a serving instance away (Auto Scaling, not the agent): that moment is
	// the only violation.
	for _, v := range w.Checker.Finish() {
		require.Equal(t, 1, v.Invariant, "%v", v)
		require.Equal(t, failedAt, v.At, "%v", v)
	}
}

// A batch's rollback keeps the group's capacity: a batch of 3 surges 6 -> 9; two replacements serve, the third
// never does (its instance fails its health check and the one Auto Scaling launches for it never registers), so
// the batch halts with rollback at its health window. The rollback removes the unhealthy replacement with
// decrement and then gives back the two healthy ones too — each drained, then terminated with decrement — so
// the group ends where the user set it (desired 6, max 12) with every instance on the rolled-back AMI, never
// surged again and never an undrained termination (the checker's invariant 2).
func TestBatchRollbackWithHealthyReplacementsGivesBackTheirSurge(t *testing.T) {
	ctx := context.Background()
	g, policy := batchGroup()
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 12}, Policy: policy})
	settle(t, w, 10*time.Second)
	before := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		before[i.ID] = true
	}
	launched := func() []sim.InstanceView {
		var out []sim.InstanceView
		for _, i := range w.Account.Group(g.Name).Instances {
			if !before[i.ID] {
				out = append(out, i)
			}
		}
		return out
	}
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, time.Second, time.Hour, func() bool { return len(launched()) == 3 })
	require.NoError(t, err)
	require.True(t, done)
	require.Equal(t, int32(9), w.Account.Group(g.Name).Desired, "surged by the batch")
	// One replacement fails before its agent connects; the one Auto Scaling launches for it boots later and,
	// with the image marked unhealthy once the other two serve, never registers.
	require.True(t, w.Account.MarkInstanceUnhealthy(launched()[2].ID))
	done, err = w.RunUntil(ctx, time.Second, time.Hour, func() bool {
		serving := 0
		for _, i := range launched() {
			if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
				serving++
			}
		}
		return serving == 2
	})
	require.NoError(t, err)
	require.True(t, done)
	w.Account.MarkImageUnhealthy(demo.ImageB)

	maxDesired, rolledBack := int32(0), false
	done, err = w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		maxDesired = max(maxDesired, w.Account.Group(g.Name).Desired)
		r := w.Rollout(ctx, g.Name)
		rolledBack = rolledBack || r.Phase == state.PhaseRolledBack
		return rolledBack && !r.Active() && r.HaltedSurgeTo == 0
	})
	require.NoError(t, err)
	require.True(t, done, "the rollback ends: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 5*time.Minute)
	r := w.Rollout(ctx, g.Name)
	require.Contains(t, r.Reason+r.Source, "rollback", "%+v", r)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(6), grp.Desired, "the healthy replacements' surge given back too")
	require.Equal(t, int32(12), grp.Max)
	require.LessOrEqual(t, maxDesired, int32(9), "never a surge on top of the batch's")
	requireAllOn(t, w, g.Name, demo.ImageA, 6)
	require.Empty(t, w.Checker.Finish())
}
