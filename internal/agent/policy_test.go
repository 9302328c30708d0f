package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func policyGroup(tags map[string]string) testworld.GroupSetup {
	return testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Tags: tags}
}

func TestSoakWaitsUntilTheAMIIsOldEnough(t *testing.T) {
	g := policyGroup(map[string]string{model.TagMinAMIAge: "48h"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	published := w.Account.Clock().Now()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, time.Minute, 47*time.Hour, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "soak")
	require.Contains(t, r.Reason, published.Add(48 * time.Hour).UTC().Format(time.RFC3339)[:16])
	require.Zero(t, w.Account.Calls()["ec2:CreateLaunchTemplateVersion"], "nothing changed while soaking")
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	require.Empty(t, w.Checker.Finish())
}

func TestManualApprovalWaitsForApprove(t *testing.T) {
	g := policyGroup(map[string]string{model.TagApproval: "manual"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "patch-agent approve g")

	r.ApprovedImage, r.ApprovedBy = r.TargetImageID, "alice"
	_, err = w.Store.PutRollout(ctx, r)
	require.NoError(t, err)
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
}

// An alarm of the group's in ALARM holds the start of its instance refresh: the rollout waits and says so, and
// nothing is launched. Once OK the refresh starts; the alarm in ALARM again in the middle of the refresh rolls
// the group back to the previous AMI.
func TestAlarmInAlarmHoldsTheRefreshAndRollsItBackMidway(t *testing.T) {
	g := policyGroup(map[string]string{model.TagAlarms: "api-5xx"})
	w := build(t, oneGroup(&g))
	w.Account.SetAlarm("api-5xx", "ALARM")
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, r.Active())
	require.Contains(t, r.Reason, "api-5xx in ALARM")
	require.Zero(t, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "no refresh while the alarm fires")
	require.Equal(t, 2, w.Account.LaunchedInstances(g.Name), "nothing launched while the alarm fires")

	w.Account.SetAlarm("api-5xx", "OK")
	runTo(t, w, time.Hour, "refresh under way", midRefresh, g.Name)
	w.Account.SetAlarm("api-5xx", "ALARM")
	r = runTo(t, w, 3*time.Hour, "ended", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	hist, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	halted := false
	for _, h := range hist {
		halted = halted || (h.Event == "rolling-back" && strings.Contains(h.Detail, "api-5xx in ALARM"))
	}
	require.True(t, halted, "the alarm rolled the refresh back: %+v", hist)
	w.Account.SetAlarm("api-5xx", "OK")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageA, 2)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

func TestMissingAlarmHoldsInsteadOfDisablingTheGate(t *testing.T) {
	g := policyGroup(map[string]string{model.TagAlarms: "typo-alarm"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "typo-alarm do not exist")
}

// A maintenance window holds the rollout until it opens; its close cancels the refresh, and no refresh starts,
// nothing is launched and nothing more drains until the next window, which finishes the rollout.
func TestMaintenanceWindowHoldsUntilItOpensAndStopsNewStepsWhenItCloses(t *testing.T) {
	// The clock starts at 02:00 UTC; the window is 03:00-03:10, time for about one of the two replacements.
	g := policyGroup(map[string]string{model.TagMaintenanceWindow: "0 3 * * * 10m UTC"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, tick, 50*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "opens at 2026-11-30T03:00:00Z")
	require.Equal(t, 2, w.Account.LaunchedInstances(g.Name), "nothing launched before the window")
	require.Zero(t, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "no refresh before the window")

	closes := time.Date(2026, 11, 30, 3, 10, 0, 0, time.UTC)
	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return !w.Account.Clock().Now().Before(closes) })
	require.NoError(t, err)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "the window was used")
	settle(t, w, 15*time.Minute) // the refresh is cancelled; the lifecycle actions it left in flight end
	require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"), "the window's close cancels the refresh")
	launched := w.Account.LaunchedInstances(g.Name)
	drains := w.Account.Calls()["ecs:UpdateContainerInstancesState"]

	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "no launch outside the window")
	require.Equal(t, drains, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "no drain outside the window")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "no refresh outside the window")
	r = w.Rollout(ctx, g.Name)
	require.True(t, r.Active())
	require.Contains(t, r.Reason, "opens at 2026-12-01T03:00:00Z")
	require.Empty(t, w.Checker.Finish())

	done, err := w.RunUntil(ctx, tick, 3*24*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the next windows finish the rollout: %+v", w.Rollout(ctx, g.Name))
	starts, cancels := refreshCalls(w, "autoscaling:StartInstanceRefresh"), refreshCalls(w, "autoscaling:CancelInstanceRefresh")
	require.Equal(t, cancels+1, starts, "one refresh per window, each cancelled at the window's close but the last")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 2)
	require.Empty(t, w.Checker.Finish())
}
