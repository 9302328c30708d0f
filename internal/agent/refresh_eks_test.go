package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The EKS self-managed group of eksRefreshSpec (10 nodes, a Deployment under a PodDisruptionBudget) through the
// same gates and halts as the ECS group: a pause cancels the refresh and a resume finishes it; an operator's
// rollback in the middle of the refresh puts every node back on the previous AMI; a bad AMI (its nodes never
// become Ready) halts at the first ABANDON and rolls back. Every invariant holds and no desired capacity is
// written.
func TestRefreshOfAnEKSSelfManagedGroupPausedRolledBackAndHaltedOnABadAMI(t *testing.T) {
	ctx := context.Background()
	t.Run("pause and resume", func(t *testing.T) {
		spec, group := eksRefreshSpec(1)
		w := buildRefresh(t, spec)
		w.PublishPublicAMI(w.EKSParameter(group), demo.ImageB)
		runTo(t, w, 2*time.Hour, "refresh under way", midRefresh, group)
		require.NoError(t, operator.Pause(ctx, w.Store, group, "game day", "bob", time.Time{}, w.Account.Clock().Now()))
		runTo(t, w, time.Hour, "waiting on the pause", func(r state.Rollout) bool { return r.Phase == state.PhaseWaiting }, group)
		_, err := operator.Resume(ctx, w.Store, group, w.Account.Clock().Now())
		require.NoError(t, err)
		r := runTo(t, w, 4*time.Hour, "completed", ended(demo.ImageB), group)
		require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
		settle(t, w, 10*time.Minute)
		requireAllOn(t, w, group, demo.ImageB, 10)
		requireNoCapacityWrites(t, w, group)
		require.Empty(t, w.Checker.Finish())
	})
	t.Run("operator's rollback mid-refresh", func(t *testing.T) {
		spec, group := eksRefreshSpec(1)
		w := buildRefresh(t, spec)
		w.PublishPublicAMI(w.EKSParameter(group), demo.ImageB)
		runTo(t, w, 2*time.Hour, "refresh under way", midRefresh, group)
		_, err := operator.Rollback(ctx, w.Store, group, "", "alice", false, w.Account.Clock().Now())
		require.NoError(t, err)
		r := runTo(t, w, 4*time.Hour, "rolled back", func(r state.Rollout) bool { return !r.Active() }, group)
		require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
		settle(t, w, 10*time.Minute)
		requireAllOn(t, w, group, demo.ImageA, 10)
		requireNoCapacityWrites(t, w, group)
		require.Empty(t, w.Checker.Finish())
	})
	t.Run("bad AMI", func(t *testing.T) {
		spec, group := eksRefreshSpec(1)
		w := buildRefresh(t, spec)
		w.Account.MarkImageUnhealthy(demo.ImageB)
		w.PublishPublicAMI(w.EKSParameter(group), demo.ImageB)
		r := runTo(t, w, 3*time.Hour, "rolled back", ended(demo.ImageB), group)
		require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
		require.Contains(t, r.Reason, "ABANDON")
		settle(t, w, 10*time.Minute)
		requireAllOn(t, w, group, demo.ImageA, 10)
		requireNoCapacityWrites(t, w, group)
		require.Empty(t, w.Checker.Finish())
	})
}
