package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// An opted-in group with a tag value the agent does not accept has a status row saying why it is not rolled
// (Halted, "not rolled: ..."), while the group is left alone; once the tag is fixed the group rolls as any other.
func TestMisconfiguredGroupShowsOnStatusAndRollsOnceFixed(t *testing.T) {
	for _, tc := range []struct{ tag, value, fixed string }{
		{model.TagMaxInstanceAge, "12h", ""},
		{model.TagStrategy, "rolling", model.StrategyRefresh},
		{model.TagPlatform, "ecs2", model.PlatformECS},
		{model.TagEnabled, "yes", "true"},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Tags: map[string]string{tc.tag: tc.value}}
			w := build(t, oneGroup(&g))
			ctx := context.Background()
			w.PublishAMI(g.Parameter, testworld.ImageB)
			settle(t, w, 30*time.Minute)

			rows, err := operator.Status(ctx, w.Store, "", w.Account.Clock().Now())
			require.NoError(t, err)
			require.Len(t, rows, 1, "the misconfigured group has a status row")
			require.Equal(t, "g", rows[0].Group)
			require.Equal(t, state.PhaseHalted, rows[0].Phase)
			require.Contains(t, rows[0].Reason, "not rolled: group g is ")
			require.Contains(t, rows[0].Reason, tc.tag)
			require.Empty(t, rows[0].TargetImageID)
			for _, i := range w.Account.Group("g").Instances {
				require.Equal(t, testworld.ImageA, i.ImageID, "left alone")
			}
			steps := w.Rollout(ctx, "g").Steps
			settle(t, w, 10*time.Minute)
			require.Equal(t, steps, w.Rollout(ctx, "g").Steps, "the reason is written once, not every tick")

			require.NoError(t, w.Account.SetGroupTag("g", tc.tag, tc.fixed))
			r := rollTo(t, w, g, testworld.ImageB)
			require.Equal(t, state.PhaseCompleted, r.Phase, "fixed, the group rolls: %s", r.Reason)
			require.NotContains(t, r.Reason, "not rolled")
			require.NotContains(t, r.Warning, "not rolled")
		})
	}
}

// A misconfigured group fixed while its instances already run the AMI its parameter names loses its "not rolled"
// status line at once: nothing is to be rolled, and status says so.
func TestFixedMisconfiguredGroupWithNothingToRollLosesItsNotRolledLine(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Tags: map[string]string{model.TagStrategy: "rolling"}}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	settle(t, w, 10*time.Minute)
	require.Equal(t, state.PhaseHalted, w.Rollout(ctx, "g").Phase)

	require.NoError(t, w.Account.SetGroupTag("g", model.TagStrategy, model.StrategyRefresh))
	settle(t, w, 10*time.Minute)
	rows, err := operator.Status(ctx, w.Store, "g", w.Account.Clock().Now())
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.NotEqual(t, state.PhaseHalted, rows[0].Phase, "%s", rows[0].Reason)
	require.NotContains(t, rows[0].Reason, "not rolled")
	require.Empty(t, w.Checker.Finish())
}
