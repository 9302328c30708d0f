package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func TestTwoAndThreeReplicasOnOneTableNeverActTwice(t *testing.T) {
	runReplicas(t, nil)
}

// runReplicas rolls a group with 2 and then 3 agent replicas acting concurrently on one store and queue.
func runReplicas(t *testing.T, newStore func(t *testing.T) state.Store) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			g := testworld.GroupSetup{Name: "ha-asg", Min: 3, Max: 6, Desired: 3}
			spec := oneGroup(&g)
			if newStore != nil {
				spec.Store = newStore(t)
			}
			w := build(t, spec)
			replicas := []*agent.Agent{w.Agent}
			for i := 1; i < n; i++ {
				replicas = append(replicas, w.NewReplica(fmt.Sprintf("replica-%d", i)))
			}
			ctx := context.Background()
			w.PublishAMI(g.Parameter, testworld.ImageB)
			for range 3000 {
				var wg sync.WaitGroup
				for _, a := range replicas {
					wg.Add(1)
					go func() { defer wg.Done(); _ = a.RunOnce(ctx) }()
				}
				wg.Wait()
				require.Empty(t, w.Checker.Check())
				w.Account.Advance(tick)
				if r := w.Rollout(ctx, g.Name); r.Phase == state.PhaseCompleted {
					break
				}
			}
			_, err := w.RunUntil(ctx, tick, 3*time.Minute, func() bool { return false })
			require.NoError(t, err)
			require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase)
			requireAllOn(t, w, g.Name, testworld.ImageB, 3)
			require.Equal(t, 6, w.Account.LaunchedInstances(g.Name), "one new instance per old one, never a second")
			require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "one refresh, never a second")
			calls := map[string]int{}
			for _, c := range w.Account.LifecycleCompletions() {
				if c.Caller == "api" {
					calls[c.Token]++
				}
			}
			require.Len(t, calls, 6, "a launching and a terminating lifecycle action per replaced instance")
			for token, c := range calls {
				require.Equal(t, 1, c, "one CompleteLifecycleAction for %s", token)
			}
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// A global pause mid-refresh, an old instance draining under its terminating lifecycle action, cancels the
// refresh and holds every new destructive step: while paused no refresh starts, no launch template version is
// created, no instance is launched or terminated, and the status says who paused and why. Resume starts a new
// refresh that finishes the rollout.
func TestPauseMidRolloutHoldsEveryNewDestructiveStepAndResumeFinishes(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 3, Max: 6, Desired: 3}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	runTo(t, w, time.Hour, "an old instance draining under the refresh", func(state.Rollout) bool { return drainingUnderHook(w, g.Name) > 0 }, g.Name)
	require.NoError(t, w.Store.PutLock(ctx, state.Lock{Reason: "incident 4711", Who: "alice", Since: w.Account.Clock().Now()}))
	r := runTo(t, w, time.Hour, "waiting on the pause", func(r state.Rollout) bool { return r.Phase == state.PhaseWaiting }, g.Name)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"), "the pause cancels the refresh")
	settle(t, w, 10*time.Minute) // the lifecycle actions the cancel left in flight end
	calls, launched, terminated := w.Account.Calls(), w.Account.LaunchedInstances(g.Name), len(w.Account.Terminations())

	settle(t, w, time.Hour)
	r = w.Rollout(ctx, g.Name)
	require.True(t, r.Active())
	require.Contains(t, r.Reason, "paused (global) by alice")
	require.Contains(t, r.Reason, "incident 4711")
	after := w.Account.Calls()
	for _, op := range []string{"autoscaling:StartInstanceRefresh", "autoscaling:CancelInstanceRefresh", "autoscaling:RollbackInstanceRefresh",
		"ec2:CreateLaunchTemplateVersion"} {
		require.Equal(t, calls[op], after[op], "%s while paused", op)
	}
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "no instance launched while paused")
	require.Len(t, w.Account.Terminations(), terminated, "no instance terminated while paused")
	require.Less(t, w.Rollout(ctx, g.Name).OnTarget, 3, "the pause came before the refresh ended")

	require.NoError(t, w.Store.DeleteLock(ctx, state.GlobalScope))
	r = runTo(t, w, 3*time.Hour, "completed", func(r state.Rollout) bool { return r.Phase == state.PhaseCompleted }, g.Name)
	require.Empty(t, r.Reason)
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "the resume starts a new refresh")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 3)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}
