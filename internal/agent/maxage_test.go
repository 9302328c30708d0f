package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Maximum instance age, on the injected clock (the world starts 2026-11-30 02:00 UTC): a group tagged
// patch-agent/max-instance-age=1d with the maintenance window 10:00-12:00 UTC and a soak of 168h, whose AMI
// never changes. Its instances outlive a day at 02:00 on Dec 1: a rollout to the same AMI starts (history
// "max-instance-age", Trigger on the record), is held by the closed window — not by the soak, which is for new
// AMIs — and replaces every instance inside the window by one instance refresh, with every invariant held.
// Nothing is launched, drained or terminated before the window opens.
func TestMaxInstanceAgeReplacesOldInstancesOnTheCurrentAMIInsideTheWindowOnly(t *testing.T) {
	g := testworld.GroupSetup{Name: "aged-asg", Cluster: "c1", Parameter: "/golden/aged", Min: 3, Max: 6, Desired: 3, Tags: map[string]string{
		model.TagMaxInstanceAge: "1d", model.TagMaintenanceWindow: "10:00-12:00 UTC", model.TagMinAMIAge: "168h"}}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	opens := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err := w.RunUntil(ctx, 10*time.Minute, 40*time.Hour, func() bool { return !w.Account.Clock().Now().Before(opens.Add(-10 * time.Minute)) })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase, "%+v", r)
	require.Equal(t, engine.TriggerMaxInstanceAge, r.Trigger)
	require.Equal(t, testworld.ImageA, r.TargetImageID, "the AMI the group already runs")
	require.Contains(t, r.Reason, "maintenance window", "held by the window, not the soak")
	require.Equal(t, 3, w.Account.LaunchedInstances(g.Name), "nothing launched before the window")
	require.Empty(t, w.Account.Terminations(), "nothing terminated before the window")

	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the rollout completes in the window: %+v", w.Rollout(ctx, g.Name))
	settle(t, w, 5*time.Minute)
	for _, term := range w.Account.Terminations() {
		require.Equal(t, sim.CauseRefresh, term.Cause)
		require.False(t, term.RequestedAt.Before(opens), "terminated at %s, before the window", term.RequestedAt)
		require.True(t, term.RequestedAt.Before(opens.Add(2*time.Hour)), "terminated at %s, after the window", term.RequestedAt)
	}
	require.Len(t, w.Account.Terminations(), 3, "each aged instance replaced once")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	requireAllOn(t, w, g.Name, testworld.ImageA, 3)
	history, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	var events []string
	for _, h := range history {
		events = append(events, h.Event)
	}
	require.Contains(t, events, engine.TriggerMaxInstanceAge)
	require.Empty(t, w.Checker.Finish())

	// The replacements are young: nothing more is replaced until they outlive the day in turn.
	_, err = w.RunUntil(ctx, 10*time.Minute, 12*time.Hour, func() bool { return false })
	require.NoError(t, err)
	require.Len(t, w.Account.Terminations(), 3)
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase)
}

// Maximum instance age with patch-agent/approval=manual: the approval of the AMI rollout that put the group on
// its AMI does not carry over to the age-driven rollout to that same AMI a day later: it waits for approve
// again, then replaces every instance.
func TestMaxInstanceAgeRolloutWaitsForItsOwnApproval(t *testing.T) {
	g := testworld.GroupSetup{Name: "aged-manual", Cluster: "c1", Parameter: "/golden/aged-manual", Min: 2, Max: 4, Desired: 2, Tags: map[string]string{
		model.TagMaxInstanceAge: "1d", model.TagApproval: "manual"}}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	approve := func() {
		t.Helper()
		r := w.Rollout(ctx, g.Name)
		require.Equal(t, state.PhaseWaiting, r.Phase, "%+v", r)
		require.Contains(t, r.Reason, "patch-agent approve "+g.Name)
		r.ApprovedImage, r.ApprovedBy = r.TargetImageID, "arn:aws:sts::111122223333:assumed-role/OnCall/alice"
		_, err := w.Store.PutRollout(ctx, r)
		require.NoError(t, err)
	}
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	approve()
	done, err := w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	launched := w.Account.LaunchedInstances(g.Name)

	_, err = w.RunUntil(ctx, 10*time.Minute, 26*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Trigger != "" })
	require.NoError(t, err)
	_, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, engine.TriggerMaxInstanceAge, w.Rollout(ctx, g.Name).Trigger)
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "nothing launched before the approval")
	approve()
	done, err = w.RunUntil(ctx, tick, 2*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, g.Name))
	require.Equal(t, launched+2, w.Account.LaunchedInstances(g.Name), "both aged instances replaced once")
	requireAllOn(t, w, g.Name, testworld.ImageB, 2)
	require.Empty(t, w.Checker.Finish())
}

// Maximum instance age after an operator's rollback from AMI B to A (completed), the group's parameter still
// names B, the AMI rolled back from, so no age-driven rollout starts while instances outlive
// patch-agent/max-instance-age=1d. That is said, not silent: a status note on the group naming the tag and the
// AMI, and one warning in the log however many ticks it lasts. Once the parameter names the group's AMI again,
// the note goes and the aged instances are replaced.
func TestMaxInstanceAgeNotEnforcedAfterAManualRollbackIsSaidInStatusAndLoggedOnce(t *testing.T) {
	ctx := context.Background()
	core, logs := observer.New(zapcore.WarnLevel)
	g := testworld.GroupSetup{Name: "aged-asg", Cluster: "c1", Parameter: "/golden/aged", Min: 2, Max: 4, Desired: 2,
		Tags: map[string]string{model.TagMaxInstanceAge: "1d"}}
	spec := oneGroup(&g)
	spec.Log = zap.New(core)
	w := build(t, spec)
	rollTo(t, w, g, testworld.ImageB)
	_, err := operator.Rollback(ctx, w.Store, g.Name, testworld.ImageA, "alice", false, w.Account.Clock().Now())
	require.NoError(t, err)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.TargetImageID == testworld.ImageA && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "the rollback completes: %+v", w.Rollout(ctx, g.Name))
	launched := w.Account.LaunchedInstances(g.Name)

	_, err = w.RunUntil(ctx, 10*time.Minute, 30*time.Hour, func() bool { return false }) // every instance outlives 1d
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, "no age-driven rollout while the parameter names the rolled-back AMI")
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "nothing replaced")
	require.Contains(t, r.Warning, "tag patch-agent/max-instance-age=24h0m0s not enforced")
	require.Contains(t, r.Warning, "the source names AMI "+testworld.ImageB+", which a manual rollback moved the group away from")
	require.Equal(t, 1, logs.FilterMessage("maximum instance age not enforced").Len(), "logged once, not every tick")

	w.PublishAMI(g.Parameter, testworld.ImageA) // the parameter names the group's AMI again
	done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Trigger == engine.TriggerMaxInstanceAge && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "the aged instances are replaced: %+v", w.Rollout(ctx, g.Name))
	require.NotContains(t, w.Rollout(ctx, g.Name).Warning, "not enforced")
	require.Empty(t, w.Checker.Finish())
}

// The same maximum instance age on a group rolled by instance refresh (the agent's launching and terminating
// hooks): the instances run the target AMI already, so the refresh replaces every instance (SkipMatching off,
// RefreshProgress.ReplaceAll), inside the window, through the hooks, without a write of desired capacity.
func TestMaxInstanceAgeByInstanceRefreshReplacesEveryInstanceInsideTheWindow(t *testing.T) {
	g := testworld.GroupSetup{Name: "aged-asg", Cluster: "c1", Parameter: "/golden/aged", Min: 3, Max: 6, Desired: 3,
		Tags: map[string]string{model.TagMaxInstanceAge: "1d", model.TagMaintenanceWindow: "10:00-12:00 UTC", model.TagMinAMIAge: "168h"}}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	opens := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	_, err := w.RunUntil(ctx, 10*time.Minute, 40*time.Hour, func() bool { return !w.Account.Clock().Now().Before(opens.Add(-10 * time.Minute)) })
	require.NoError(t, err)
	require.Empty(t, w.Account.Terminations(), "nothing terminated before the window")
	require.Zero(t, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "no refresh before the window")

	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.True(t, done, "the rollout completes in the window: %+v", r)
	require.Equal(t, model.StrategyRefresh, r.Strategy)
	require.Equal(t, engine.TriggerMaxInstanceAge, r.Trigger)
	require.True(t, r.Refresh.ReplaceAll, "SkipMatching off: every instance runs the target AMI already")
	settle(t, w, 5*time.Minute)
	require.Len(t, w.Account.Terminations(), 3, "each aged instance replaced once")
	for _, term := range w.Account.Terminations() {
		require.Equal(t, sim.CauseRefresh, term.Cause)
		require.False(t, term.RequestedAt.Before(opens), "terminated at %s, before the window", term.RequestedAt)
	}
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	requireAllOn(t, w, g.Name, testworld.ImageA, 3)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}
