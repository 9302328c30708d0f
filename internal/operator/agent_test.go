package operator_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// These tests run the real agent on a simulated account (internal/testworld) to prove that what the controls
// write is what the orchestrator acts on.

const tick = 5 * time.Second

func completedDemo(t *testing.T) *testworld.World {
	t.Helper()
	w, err := testworld.Build(testworld.DemoSpec())
	require.NoError(t, err)
	ctx := context.Background()
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		r := w.Rollout(ctx, testworld.GroupName)
		return r.TargetImageID == testworld.ImageB && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done)
	return w
}

// requireAllOn lets terminating instances leave (a minute of simulated time), then asserts that the group
// has three instances, all on image.
func requireAllOn(t *testing.T, w *testworld.World, image string) {
	t.Helper()
	_, err := w.RunUntil(context.Background(), tick, time.Minute, func() bool { return false })
	require.NoError(t, err)
	g := w.Account.Group(testworld.GroupName)
	require.Len(t, g.Instances, 3)
	for _, i := range g.Instances {
		require.Equal(t, image, i.ImageID, i.ID)
	}
}

func TestManualRollbackIsRolledByTheAgentAndNotUndone(t *testing.T) {
	w := completedDemo(t)
	ctx := context.Background()
	clk := w.Account.Clock()

	_, err := operator.Rollback(ctx, w.Store, testworld.GroupName, "", "alice", false, clk.Now())
	require.NoError(t, err)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		return w.Rollout(ctx, testworld.GroupName).Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, testworld.GroupName))
	requireAllOn(t, w, testworld.ImageA)

	// The parameter still names B: the agent must not roll B again.
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	_, err = w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, testworld.GroupName)
	require.Equal(t, state.PhaseCompleted, r.Phase)
	require.Equal(t, testworld.ImageA, r.TargetImageID)
	requireAllOn(t, w, testworld.ImageA)
	require.Empty(t, w.Checker.Finish())

	rows, err := operator.Status(ctx, w.Store, testworld.GroupName, clk.Now())
	require.NoError(t, err)
	require.Equal(t, 3, rows[0].OnTarget, "the agent recounted against the rollback target")
	hist, err := operator.History(ctx, w.Store, testworld.GroupName)
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "completed", last.Event)
	require.Equal(t, testworld.ImageB, last.PreviousImage)
	require.Equal(t, testworld.ImageA, last.NewImage)
}

func TestPauseHoldsANewRolloutAndResumeLetsItRun(t *testing.T) {
	w, err := testworld.Build(testworld.DemoSpec())
	require.NoError(t, err)
	ctx := context.Background()
	clk := w.Account.Clock()
	require.NoError(t, operator.Pause(ctx, w.Store, testworld.GroupName, "game day", "bob", time.Time{}, clk.Now()))
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	_, err = w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	rows, err := operator.Status(ctx, w.Store, testworld.GroupName, clk.Now())
	require.NoError(t, err)
	require.Equal(t, state.PhaseDetected, rows[0].Phase)
	require.Contains(t, rows[0].Reason, "paused (group demo-ecs-asg) by bob")
	require.NotNil(t, rows[0].Paused)
	requireAllOn(t, w, testworld.ImageA)

	_, resumeErr := operator.Resume(ctx, w.Store, testworld.GroupName, w.Account.Clock().Now())
	require.NoError(t, resumeErr)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		return w.Rollout(ctx, testworld.GroupName).Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done)
	requireAllOn(t, w, testworld.ImageB)
	require.Empty(t, w.Checker.Finish())
}
