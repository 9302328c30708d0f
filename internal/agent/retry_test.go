package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// An AMI that failed and was rolled back is rolled again only when an operator asks for it, once the cause is
// fixed: `patch-agent retry` re-arms the rollout, and the agent takes the same AMI through every gate and
// completes it.
func TestRetryRollsARolledBackAMIAgainOnceItsCauseIsFixed(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "web", Min: 2, Max: 6, Desired: 3}
	w := build(t, oneGroup(&g))
	w.Account.MarkImageUnhealthy(testworld.ImageB)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseRolledBack })
	require.NoError(t, err)
	require.True(t, done, "rolled back: %+v", w.Rollout(ctx, g.Name))
	requireAllOn(t, w, g.Name, testworld.ImageA, 3)

	// Without a retry the failed AMI is not rolled again while the source still names it.
	settle(t, w, 30*time.Minute)
	require.Equal(t, state.PhaseRolledBack, w.Rollout(ctx, g.Name).Phase)

	w.Account.MarkImageHealthy(testworld.ImageB)
	r, again, err := operator.Retry(ctx, w.Store, g.Name, "ops@example.com", w.Account.Clock().Now())
	require.NoError(t, err)
	require.Equal(t, testworld.ImageB, again)
	require.Contains(t, r.Reason, "retry of "+testworld.ImageB+" requested by ops@example.com")
	hist, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	require.Equal(t, operator.HistoryRetried, hist[len(hist)-1].Event)

	done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Phase == state.PhaseCompleted && r.TargetImageID == testworld.ImageB
	})
	require.NoError(t, err)
	require.True(t, done, "rolled again: %+v", w.Rollout(ctx, g.Name))
	require.Equal(t, testworld.ImageA, w.Rollout(ctx, g.Name).PreviousImageID, "the rollout starts from the AMI the group ran")
	settle(t, w, time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 3)
	require.Empty(t, w.Checker.Finish())

	// Completed on B with nothing rolled back: nothing to retry.
	_, _, err = operator.Retry(ctx, w.Store, g.Name, "ops@example.com", w.Account.Clock().Now())
	require.ErrorContains(t, err, "nothing was rolled back")
}

// The runbook's path when the agent is down longer than its hooks' heartbeat timeout: someone cancels the
// agent's instance refresh (so that nothing is terminated undrained), the returning agent halts the rollout (a
// refresh it did not cancel), and `patch-agent retry` starts it over: a new refresh skips the instances already
// on the target, and the group completes with every invariant held and no desired capacity written.
func TestRetryOfARefreshSomeoneCancelledFinishesTheRollout(t *testing.T) {
	ctx := context.Background()
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	w.PublishAMI(g.Parameter, testworld.ImageB)
	runTo(t, w, time.Hour, "mid-refresh", midRefresh, g.Name)
	_, err := w.Account.AutoScaling().CancelInstanceRefresh(ctx, &autoscaling.CancelInstanceRefreshInput{AutoScalingGroupName: aws.String(g.Name)})
	require.NoError(t, err)
	r := runTo(t, w, time.Hour, "halted", func(r state.Rollout) bool { return r.Phase == state.PhaseHalted }, g.Name)
	onTarget := r.OnTarget
	require.Positive(t, onTarget)

	_, again, err := operator.Retry(ctx, w.Store, g.Name, "ops@example.com", w.Account.Clock().Now())
	require.NoError(t, err)
	require.Equal(t, testworld.ImageB, again)
	r = runTo(t, w, 6*time.Hour, "completed", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "the cancelled refresh and the one the retry started")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// A bad AMI rolled by instance refresh halts and rolls back; once it is fixed, one retry rolls it again to the
// end.
func TestRetryOfARefreshRolledBackFromABadAMICompletesOnceItIsFixed(t *testing.T) {
	ctx := context.Background()
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	w.Account.MarkImageUnhealthy(testworld.ImageB)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	r := runTo(t, w, 3*time.Hour, "rolled back", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	w.Account.MarkImageHealthy(testworld.ImageB)
	_, again, err := operator.Retry(ctx, w.Store, g.Name, "ops@example.com", w.Account.Clock().Now())
	require.NoError(t, err)
	require.Equal(t, testworld.ImageB, again)
	r = runTo(t, w, 6*time.Hour, "completed", func(r state.Rollout) bool {
		return r.Phase == state.PhaseCompleted && r.TargetImageID == testworld.ImageB
	}, g.Name)
	require.Equal(t, testworld.ImageA, r.PreviousImageID)
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}
