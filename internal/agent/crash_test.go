package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/state"
)

var crashGroup = demo.GroupSetup{Name: "crash-asg", Cluster: "c1", Parameter: "/golden/crash", Min: 3, Max: 3, Desired: 3}

// runCrashing plays a 3-instance rollout (max 3, so the surge raises max too) with the agent killed right
// after its effect number at, and a fresh agent started on the same store, queue and account.
func runCrashing(t *testing.T, at int) (*demo.World, *demo.Fuse) {
	t.Helper()
	g := crashGroup
	w := build(t, oneGroup(&g))
	fuse := &demo.Fuse{At: at}
	w.Restart(fuse)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	restarted := false
	var ended time.Time
	for range 3000 {
		_ = w.Agent.RunOnce(ctx) // a crashed incarnation fails its calls; that is the point
		if fuse.Blown() && !restarted {
			w.Restart(nil)
			restarted = true
		}
		require.Empty(t, w.Checker.Check(), "crash after effect %d", at)
		w.Account.Advance(tick)
		require.Empty(t, w.Checker.Check(), "crash after effect %d", at)
		if r := w.Rollout(ctx, g.Name); ended.IsZero() && r.TargetImageID == demo.ImageB && !r.Active() {
			ended = w.Account.Clock().Now()
		}
		// Let the last lifecycle actions and redelivered messages (visibility timeout 2 min) settle.
		if !ended.IsZero() && w.Account.Clock().Since(ended) > 5*time.Minute {
			break
		}
	}
	return w, fuse
}

func TestCrashMatrixResumesAtEveryStepWithoutRepeatingAnEffect(t *testing.T) {
	_, ref := runCrashing(t, 0)
	total := ref.Effects()
	require.Greater(t, total, 20, "a 3-instance rollout has many effects to crash after")
	for at := 1; at <= total; at++ {
		t.Run(fmt.Sprintf("crash after effect %d of %d", at, total), func(t *testing.T) {
			w, fuse := runCrashing(t, at)
			require.True(t, fuse.Blown())
			ctx := context.Background()
			r := w.Rollout(ctx, crashGroup.Name)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			requireAllOn(t, w, crashGroup.Name, demo.ImageB, 3)
			grp := w.Account.Group(crashGroup.Name)
			require.Equal(t, int32(3), grp.Max, "max restored exactly once")
			require.Equal(t, int32(3), grp.Desired)
			require.Equal(t, 6, w.Account.LaunchedInstances(crashGroup.Name), "one surge instance per replacement, never a second")
			for token, cs := range acceptedCompletions(w) {
				require.Len(t, cs, 1, "lifecycle action %s completed once", token)
			}
			visible, inFlight := w.Account.QueueDepth(w.QueueURL)
			require.Zero(t, visible+inFlight, "no message lost in flight or left behind")
			require.Empty(t, w.Checker.Finish())
		})
	}
}

func TestTwoAndThreeReplicasOnOneTableNeverActTwice(t *testing.T) {
	runReplicas(t, nil)
}

// runReplicas rolls a group with 2 and then 3 agent replicas acting concurrently on one store and queue.
func runReplicas(t *testing.T, newStore func(t *testing.T) state.Store) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			g := demo.GroupSetup{Name: "ha-asg", Min: 3, Max: 6, Desired: 3}
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
			w.PublishAMI(g.Parameter, demo.ImageB)
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
			requireAllOn(t, w, g.Name, demo.ImageB, 3)
			require.Equal(t, 6, w.Account.LaunchedInstances(g.Name), "one surge per step")
			calls := map[string]int{}
			for _, c := range w.Account.LifecycleCompletions() {
				if c.Caller == "api" {
					calls[c.Token]++
				}
			}
			require.Len(t, calls, 3)
			for token, c := range calls {
				require.Equal(t, 1, c, "one CompleteLifecycleAction for %s", token)
			}
			require.Empty(t, w.Checker.Finish())
		})
	}
}

func TestPauseMidRolloutHoldsEveryNewDestructiveStepAndResumeFinishes(t *testing.T) {
	g := demo.GroupSetup{Name: "g", Min: 3, Max: 6, Desired: 3}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepDraining
	})
	require.NoError(t, err)
	require.True(t, done)
	require.NoError(t, w.Store.PutLock(ctx, state.Lock{Reason: "incident 4711", Who: "alice", Since: w.Account.Clock().Now()}))
	calls := w.Account.Calls()
	launched := w.Account.LaunchedInstances(g.Name)

	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, r.Active())
	require.Contains(t, r.Reason, "paused (global) by alice")
	require.Contains(t, r.Reason, "incident 4711")
	after := w.Account.Calls()
	for _, op := range []string{"autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup",
		"autoscaling:TerminateInstanceInAutoScalingGroup", "ec2:CreateLaunchTemplateVersion"} {
		require.Equal(t, calls[op], after[op], "%s while paused", op)
	}
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "no instance launched while paused")

	require.NoError(t, w.Store.DeleteLock(ctx, state.GlobalScope))
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	require.Empty(t, w.Rollout(ctx, g.Name).Reason)
	requireAllOn(t, w, g.Name, demo.ImageB, 3)
	require.Empty(t, w.Checker.Finish())
}
