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

// An urgent AMI approved with --skip-soak rolls before its soak (7 days) ends; who skipped it is the STS
// caller's ARN (GetCallerIdentity), recorded in the history and named by one SoakSkipped alert (metric and
// notification) when the rollout starts. The skip belongs to that AMI: the next one soaks again.
func TestSkipSoakApprovalStartsTheRolloutBeforeTheSoakEndsAndNamesTheSTSCaller(t *testing.T) {
	const arn = "arn:aws:sts::111122223333:assumed-role/OnCall/alice"
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Tags: map[string]string{model.TagMinAMIAge: "168h"}}
	w := buildAlerting(t, oneGroup(&g), g)
	ctx := context.Background()
	w.run(t, time.Minute)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	w.run(t, 10*time.Minute)
	r := w.Rollout(ctx, g.Name)
	require.True(t, operator.WaitingForSoak(r), "%s %s", r.Phase, r.Reason)

	w.Account.SetCallerARN(arn)
	who, err := operator.CallerIdentity(ctx, w.Account.STS())
	require.NoError(t, err)
	require.Equal(t, arn, who, "the identity is AWS's answer, not a local user name")
	_, err = operator.ApproveSkippingSoak(ctx, w.Store, g.Name, "", who, "", w.Account.Clock().Now())
	require.ErrorContains(t, err, "needs --reason")
	_, err = operator.ApproveSkippingSoak(ctx, w.Store, g.Name, "", who, "CVE-2026-1234 fix, INC-4711", w.Account.Clock().Now())
	require.NoError(t, err)

	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "rolled within the hour, days before the soak ends: %+v", w.Rollout(ctx, g.Name))
	requireAllOn(t, w.World, g.Name, testworld.ImageB, 2)

	h, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	var skipped []state.HistoryEntry
	for _, e := range h {
		if e.Event == operator.HistorySoakSkipped {
			skipped = append(skipped, e)
		}
	}
	require.Len(t, skipped, 1)
	require.Equal(t, "by "+arn+": CVE-2026-1234 fix, INC-4711", skipped[0].Detail)
	require.Equal(t, testworld.ImageB, skipped[0].NewImage)
	require.Equal(t, 1.0, w.alerts(model.AlertSoakSkipped))
	notes := w.notified(t, model.AlertSoakSkipped)
	require.Len(t, notes, 1)
	require.Equal(t, arn, notes[0].Who)
	require.Equal(t, testworld.ImageB, notes[0].ImageID)
	require.Contains(t, notes[0].Detail, "CVE-2026-1234 fix, INC-4711")

	// The skip was for ImageB: the next AMI soaks its full time.
	w.PublishAMI(g.Parameter, imageC)
	w.run(t, 30*time.Minute)
	r = w.Rollout(ctx, g.Name)
	require.Equal(t, imageC, r.TargetImageID)
	require.True(t, operator.WaitingForSoak(r), "%s %s", r.Phase, r.Reason)
	require.Equal(t, 1.0, w.alerts(model.AlertSoakSkipped))
	require.Empty(t, w.Checker.Finish())
}
