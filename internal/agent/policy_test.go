package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/state"
)

func policyGroup(tags map[string]string) demo.GroupSetup {
	return demo.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Tags: tags}
}

func TestSoakWaitsUntilTheAMIIsOldEnough(t *testing.T) {
	g := policyGroup(map[string]string{lifecycle.TagMinAMIAge: "48h"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	published := w.Account.Clock().Now()
	w.PublishAMI(g.Parameter, demo.ImageB)
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
	g := policyGroup(map[string]string{lifecycle.TagApproval: "manual"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
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

func TestAlarmInAlarmHoldsTheNextReplacement(t *testing.T) {
	g := policyGroup(map[string]string{lifecycle.TagAlarms: "api-5xx"})
	w := build(t, oneGroup(&g))
	w.Account.SetAlarm("api-5xx", "OK")
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepDraining
	})
	require.NoError(t, err)
	require.True(t, done)
	w.Account.SetAlarm("api-5xx", "ALARM") // the replacement under way finishes; no next one starts
	launched := w.Account.LaunchedInstances(g.Name)
	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseReplacing, r.Phase)
	require.Contains(t, r.Reason, "api-5xx in ALARM")
	require.Len(t, r.Replaced, 1)
	require.Nil(t, r.Current)
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "no surge while the alarm fires")

	w.Account.SetAlarm("api-5xx", "OK")
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
}

func TestMissingAlarmHoldsInsteadOfDisablingTheGate(t *testing.T) {
	g := policyGroup(map[string]string{lifecycle.TagAlarms: "typo-alarm"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	_, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "typo-alarm do not exist")
}

func TestMaintenanceWindowHoldsUntilItOpensAndStopsNewStepsWhenItCloses(t *testing.T) {
	// The clock starts at 02:00 UTC; the window is 03:00-03:03.
	g := policyGroup(map[string]string{lifecycle.TagMaintenanceWindow: "0 3 * * * 3m UTC"})
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	_, err := w.RunUntil(ctx, tick, 50*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "opens at 2026-11-30T03:00:00Z")
	require.Equal(t, 2, w.Account.LaunchedInstances(g.Name), "nothing launched before the window")

	closes := time.Date(2026, 11, 30, 3, 3, 0, 0, time.UTC)
	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return !w.Account.Clock().Now().Before(closes) })
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(w.Rollout(ctx, g.Name).Replaced), 1, "the window was used")
	launched := w.Account.LaunchedInstances(g.Name)
	drains := w.Account.Calls()["ecs:UpdateContainerInstancesState"]

	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "no surge outside the window")
	require.Equal(t, drains, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "no drain outside the window")
	r = w.Rollout(ctx, g.Name)
	require.True(t, r.Active())
	require.Contains(t, r.Reason, "opens at 2026-12-01T03:00:00Z")
	require.Empty(t, w.Checker.Finish())

	done, err := w.RunUntil(ctx, tick, 24*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the next window finishes the rollout")
}

func TestReplacementLostWhileTheDrainWasHeldIsReplacedAgainBeforeTheDrain(t *testing.T) {
	g := policyGroup(map[string]string{lifecycle.TagAlarms: "api-5xx"})
	w := build(t, oneGroup(&g))
	w.Account.SetAlarm("api-5xx", "OK")
	ctx := context.Background()
	w.PublishAMI(g.Parameter, demo.ImageB)
	// The alarm fires while the replacement boots: once healthy, the drain is held.
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepReplacementHealthy
	})
	require.NoError(t, err)
	require.True(t, done)
	w.Account.SetAlarm("api-5xx", "ALARM")
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && r.Current.Step == state.StepDraining
	})
	require.NoError(t, err)
	require.True(t, done)
	settle(t, w, time.Minute)
	r := w.Rollout(ctx, g.Name)
	require.Contains(t, r.Reason, "api-5xx in ALARM")
	// Meanwhile the replacement fails its health check and Auto Scaling terminates it.
	require.True(t, w.Account.MarkInstanceUnhealthy(r.Current.NewInstanceID))
	settle(t, w, time.Minute)
	w.Account.SetAlarm("api-5xx", "OK")
	done, err = w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	require.Empty(t, w.Checker.Finish(), "the old instance was not drained while its replacement was gone")
}
