package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// refreshGroup is an ECS group of desired 10 rolled by instance refresh in batches of batch, with room above
// desired for one batch and the agent's launching and terminating hooks.
func refreshGroup(batch int) demo.GroupSetup {
	return demo.GroupSetup{Name: "rf", Min: 2, Max: int32(10 + batch), Desired: 10, LaunchingHook: true,
		Tags: map[string]string{lifecycle.TagStrategy: lifecycle.StrategyRefresh, lifecycle.TagBatchSize: fmt.Sprint(batch)}}
}

// buildRefresh builds the world of g with the rule that the agent never writes desired capacity on.
func buildRefresh(t *testing.T, spec demo.Spec) *demo.World {
	t.Helper()
	w := build(t, spec)
	w.Checker.NoDesiredWrites = true
	settle(t, w, time.Minute)
	return w
}

// refreshCalls counts the agent's calls of op ("autoscaling:StartInstanceRefresh") in the account's call log.
func refreshCalls(w *demo.World, op string) int { return w.Account.Calls()[op] }

// requireNoCapacityWrites asserts from the account's capacity writes that the agent wrote no desired capacity
// and no MaxSize of group: no SetDesiredCapacity, no decrementing termination, no UpdateAutoScalingGroup that
// changes either.
func requireNoCapacityWrites(t *testing.T, w *demo.World, group string) {
	t.Helper()
	for _, cw := range w.Account.CapacityWrites() {
		if cw.Group == group && cw.By == sim.CallerAPI {
			require.False(t, cw.Op == sim.OpSetDesiredCapacity || (cw.Op == sim.OpTerminateInstance && cw.Decrement) ||
				(cw.Op == sim.OpUpdateAutoScalingGroup && (cw.From != cw.To || cw.MaxFrom != cw.MaxTo)), "the agent wrote %s", cw)
		}
	}
}

func TestRefreshRollsAnECSGroupInBatchesWithoutWritingDesiredCapacity(t *testing.T) {
	for _, c := range []struct{ batch, budget int }{{1, 1}, {3, 3}, {3, 1}} {
		batch, budget := c.batch, c.budget
		t.Run(fmt.Sprintf("batch %d of 10, cluster budget %d", batch, budget), func(t *testing.T) {
			g := refreshGroup(batch)
			spec := oneGroup(&g)
			spec.Policy = lifecycle.DefaultPolicy()
			spec.Policy.ClusterBudget = budget
			w := buildRefresh(t, spec)
			w.PublishAMI(g.Parameter, demo.ImageB)
			draining, running := 0, 0
			r := runTo(t, w, 3*time.Hour, "completed", func(r state.Rollout) bool {
				d, n := 0, 0
				for _, i := range w.Account.Group(g.Name).Instances {
					if i.ContainerInstanceStatus == "DRAINING" && i.LifecycleState == "Terminating:Wait" {
						d++ // drained under its terminating action
					}
					if i.LifecycleState == "InService" || strings.HasPrefix(i.LifecycleState, "Pending") {
						n++
					}
				}
				draining, running = max(draining, d), max(running, n)
				return ended(demo.ImageB)(r)
			}, g.Name)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			require.Equal(t, budget, draining, "drains at once: the per-cluster budget")
			require.LessOrEqual(t, running, 10+batch, "at most the batch above desired capacity (MaxHealthyPercentage)")
			settle(t, w, time.Minute)
			requireAllOn(t, w, g.Name, demo.ImageB, 10)
			require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "one refresh per rollout")
			require.Equal(t, int32(100+10*batch), r.Refresh.MaxHealthyPercentage)
			requireNoCapacityWrites(t, w, g.Name)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// runTo runs the world until done, failing the test when it does not come within limit.
func runTo(t *testing.T, w *demo.World, limit time.Duration, what string, done func(state.Rollout) bool, group string) state.Rollout {
	t.Helper()
	ctx := context.Background()
	ok, err := w.RunUntil(ctx, tick, limit, func() bool { return done(w.Rollout(ctx, group)) })
	require.NoError(t, err)
	require.True(t, ok, "%s: %+v", what, w.Rollout(ctx, group))
	return w.Rollout(ctx, group)
}

// midRefresh reports whether the agent's refresh is under way with at least one instance updated.
func midRefresh(r state.Rollout) bool {
	return r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID != "" && r.Refresh.PercentageComplete >= 10
}

func ended(image string) func(state.Rollout) bool {
	return func(r state.Rollout) bool { return r.TargetImageID == image && !r.Active() }
}

// A bad AMI (its instances never serve): the agent's launching hook ABANDONs the first launch at the health
// deadline, the refresh halts at once and the group is rolled back to the previous version.
func TestRefreshOfABadAMIHaltsAtTheFirstAbandonAndRollsBack(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	w.Account.MarkImageUnhealthy(demo.ImageB)
	w.PublishAMI(g.Parameter, demo.ImageB)
	r := runTo(t, w, 3*time.Hour, "rolled back", ended(demo.ImageB), g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	require.Contains(t, r.Reason, "ABANDON")
	var first *sim.Completion
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Accepted && c.Caller == sim.CallerAPI && c.Result == sim.ResultAbandon && first == nil {
			first = &c
		}
	}
	require.NotNil(t, first)
	hist, err := w.Store.History(context.Background(), g.Name)
	require.NoError(t, err)
	halted := false
	for _, h := range hist {
		if h.Event == "rolling-back" {
			halted = true
			require.Contains(t, h.Detail, first.InstanceID, "the first ABANDON halts the refresh")
			require.WithinDuration(t, first.At, h.At, tick, "at once, not after Auto Scaling's hour of retries")
		}
	}
	require.True(t, halted)
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, demo.ImageA, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// A pause cancels the agent's refresh; resume starts a new one that skips the instances already on the target.
func TestRefreshPausedIsCancelledAndResumedByANewRefresh(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	runTo(t, w, 2*time.Hour, "refresh under way", midRefresh, g.Name)
	require.NoError(t, operator.Pause(ctx, w.Store, g.Name, "game day", "bob", time.Time{}, w.Account.Clock().Now()))
	r := runTo(t, w, time.Hour, "waiting on the pause", func(r state.Rollout) bool { return r.Phase == state.PhaseWaiting }, g.Name)
	require.Contains(t, r.Reason, "paused")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"))
	settle(t, w, 30*time.Minute)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "nothing starts while paused")
	_, err := operator.Resume(ctx, w.Store, g.Name, w.Account.Clock().Now())
	require.NoError(t, err)
	r = runTo(t, w, 3*time.Hour, "completed", ended(demo.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	settle(t, w, time.Minute)
	requireAllOn(t, w, g.Name, demo.ImageB, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// A newer AMI mid-refresh cancels it; the newer AMI goes through the gates and its own refresh.
func TestRefreshSupersededByANewerAMI(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	w.PublishAMI(g.Parameter, demo.ImageB)
	runTo(t, w, 2*time.Hour, "refresh under way", midRefresh, g.Name)
	w.PublishAMI(g.Parameter, imageC)
	r := runTo(t, w, 4*time.Hour, "completed on the newer AMI", ended(imageC), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"))
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	settle(t, w, time.Minute)
	requireAllOn(t, w, g.Name, imageC, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// `patch-agent rollback` in the middle of a refresh rolls the group back at once.
func TestRefreshRolledBackByAnOperatorMidRefresh(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	runTo(t, w, 2*time.Hour, "refresh under way", midRefresh, g.Name)
	_, err := operator.Rollback(ctx, w.Store, g.Name, "", "alice", false, w.Account.Clock().Now())
	require.NoError(t, err)
	r := runTo(t, w, 3*time.Hour, "rolled back", func(r state.Rollout) bool { return !r.Active() }, g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	require.Contains(t, r.Reason, "manual rollback by alice")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, demo.ImageA, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// C27: a refresh someone else started is never cancelled; the rollout waits, says whose refresh holds the
// group, and starts its own once it ended.
func TestRefreshWaitsForARefreshItDidNotStartAndNeverCancelsIt(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	ctx := context.Background()
	_, err := w.Account.AutoScaling().StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String(g.Name),
		Preferences: &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110)}})
	require.NoError(t, err)
	w.PublishAMI(g.Parameter, demo.ImageB)
	r := runTo(t, w, time.Hour, "waiting for the foreign refresh", func(r state.Rollout) bool {
		return strings.Contains(r.Reason, "not started by patch-agent")
	}, g.Name)
	require.Contains(t, r.Reason, "patch-agent never cancels it")
	r = runTo(t, w, 6*time.Hour, "completed", ended(demo.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Zero(t, refreshCalls(w, "autoscaling:CancelInstanceRefresh"), "the foreign refresh is never cancelled")
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "the foreign one and the agent's")
	settle(t, w, time.Minute)
	requireAllOn(t, w, g.Name, demo.ImageB, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// A group at its MaxSize: the refresh cannot launch before it terminates; the rollout waits and says so, and
// the agent writes neither MaxSize nor desired capacity.
func TestRefreshOfAGroupAtMaxSizeWaitsAndSaysSo(t *testing.T) {
	g := refreshGroup(1)
	g.Max = g.Desired
	w := buildRefresh(t, oneGroup(&g))
	w.PublishAMI(g.Parameter, demo.ImageB)
	r := runTo(t, w, time.Hour, "waiting for room", func(r state.Rollout) bool { return strings.Contains(r.Reason, "at its MaxSize (10)") }, g.Name)
	require.Equal(t, state.PhaseReplacing, r.Phase)
	settle(t, w, 30*time.Minute)
	requireAllOn(t, w, g.Name, demo.ImageA, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}
