package agent_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// terraformRole is the principal the simulated applies report as the CreatedBy of their launch template versions.
const terraformRole = "arn:aws:sts::111122223333:assumed-role/TerraformApply/ci"

// setBackWorld is a world of one group the agent reports on to a metrics registry and a notifier, rolled to
// testworld.ImageB.
func setBackWorld(t *testing.T, mixed bool) (alertWorld, testworld.GroupSetup) {
	t.Helper()
	g := testworld.GroupSetup{Name: "iac-asg", Parameter: "/golden/iac", Min: 2, Max: 4, Desired: 2, MixedInstances: mixed}
	if mixed {
		g.Overrides = []string{"m7g.large", "m6g.large"}
	}
	w := buildAlerting(t, oneGroup(&g), g)
	rollTo(t, w.World, g, testworld.ImageB)
	return w, g
}

// setBacks returns the SetBacks counter of the world's group (0 when never counted).
func (w alertWorld) setBacks() float64 {
	for _, s := range w.reg.Collect() {
		if s.Name == metrics.SetBacks && s.Group == w.g.Name {
			return s.Value
		}
	}
	return 0
}

// launches returns the AMI the group's launch template reference resolves to now, and the reference's version.
func launches(w alertWorld) (image, version string) {
	grp := w.Account.Group(w.g.Name)
	lt, ok := w.Account.LaunchTemplate(grp.LaunchTemplateID)
	if !ok {
		return "", grp.LaunchTemplateVersion
	}
	n, err := strconv.ParseInt(grp.LaunchTemplateVersion, 10, 64)
	switch {
	case grp.LaunchTemplateVersion == "$Latest":
		n = lt.LatestVersion
	case err != nil:
		n = lt.DefaultVersion
	}
	return lt.ImageIDs[n], grp.LaunchTemplateVersion
}

// setBackHistory returns the group's set-back history entries.
func setBackHistory(t *testing.T, w alertWorld) []state.HistoryEntry {
	t.Helper()
	h, err := w.Store.History(context.Background(), w.g.Name)
	require.NoError(t, err)
	var out []state.HistoryEntry
	for _, e := range h {
		if e.Event == engine.TriggerSetBack {
			out = append(out, e)
		}
	}
	return out
}

// statusOf returns the group's row of `patch-agent status` and its line in the default table.
func statusOf(t *testing.T, w alertWorld) (operator.StatusRow, string) {
	t.Helper()
	rows, err := operator.Status(context.Background(), w.Store, w.g.Name, w.Account.Clock().Now())
	require.NoError(t, err)
	require.Len(t, rows, 1)
	var b strings.Builder
	operator.RenderTable(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	return rows[0], lines[1]
}

// setBackTwice rolls the world's group to ImageB, then plays two applies that set it back to ImageA, and runs
// the agent after each: the first is rolled again, the second holds the group. It returns the version numbers
// of the two applies.
func setBackTwice(t *testing.T, w alertWorld) (first, second int64) {
	t.Helper()
	ctx := context.Background()
	first = w.Account.ApplyLaunchTemplate(w.g.Name, testworld.ImageA, terraformRole)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, w.g.Name)
		return r.SetBacks == 1 && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rolled again after the first set-back: %+v", w.Rollout(ctx, w.g.Name))
	second = w.Account.ApplyLaunchTemplate(w.g.Name, testworld.ImageA, terraformRole)
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, w.g.Name).Phase == state.PhaseWaiting })
	require.NoError(t, err)
	require.True(t, done, "held after the second set-back: %+v", w.Rollout(ctx, w.g.Name))
	settle(t, w.World, 30*time.Minute)
	return first, second
}

// Field case C25: a terraform apply writes a launch template version with the old AMI and points the group (a
// mixed instances policy's template) at it after the agent rolled the group to AMI B. The agent reports the
// set-back — history naming the version and its CreatedBy, the SetBacks metric, one SetBack notification, the
// status note — and rolls AMI B again, once: the group launches B from a version of the agent's. A second apply
// that does the same holds the group in Waiting, its reason naming the version and the fix, with no third
// rollout however long it waits; a third apply whose version launches AMI B (the code now reads the SSM
// parameter) ends the hold and the set-back count.
func TestC25SetBackByAnApplyIsReportedRolledAgainOnceThenHeldUntilTheTemplateChanges(t *testing.T) {
	ctx := context.Background()
	w, g := setBackWorld(t, true)
	completed := w.Rollout(ctx, g.Name)
	require.Equal(t, 0, completed.SetBacks)

	first := w.Account.ApplyLaunchTemplate(g.Name, testworld.ImageA, terraformRole)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.SetBacks == 1 && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rolled again after the first set-back: %+v", w.Rollout(ctx, g.Name))
	r := w.Rollout(ctx, g.Name)
	require.Contains(t, r.SetBackBy, "version "+strconv.FormatInt(first, 10)+" by "+terraformRole)
	image, version := launches(w)
	require.Equal(t, testworld.ImageB, image, "the group launches AMI B again")
	require.NotEqual(t, strconv.FormatInt(first, 10), version, "from a version of the agent's, not the apply's")
	require.Equal(t, version, r.NewTemplateVersion)
	hist := setBackHistory(t, w)
	require.Len(t, hist, 1)
	require.Equal(t, testworld.ImageA, hist[0].PreviousImage)
	require.Equal(t, testworld.ImageB, hist[0].NewImage)
	require.Contains(t, hist[0].Detail, "set back by an outside change")
	require.Equal(t, 1.0, w.setBacks(), "counted once")
	require.Equal(t, 1.0, w.alerts(model.AlertSetBack))
	sent := w.notified(t, model.AlertSetBack)
	require.Len(t, sent, 1, "notified once")
	require.Equal(t, terraformRole, sent[0].Who)
	require.Equal(t, testworld.ImageA, sent[0].ImageID)
	row, line := statusOf(t, w)
	require.Equal(t, "set back by an outside change 1 time(s), last by "+r.SetBackBy, row.SetBack)
	require.Contains(t, line, "set back by an outside change 1 time(s)", "status shows the set-back")
	for _, i := range w.Account.Group(g.Name).Instances {
		require.Equal(t, testworld.ImageB, i.ImageID)
	}

	second := w.Account.ApplyLaunchTemplate(g.Name, testworld.ImageA, terraformRole)
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseWaiting })
	require.NoError(t, err)
	require.True(t, done, "held after the second set-back: %+v", w.Rollout(ctx, g.Name))
	settle(t, w.World, 2*time.Hour)
	r = w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Equal(t, 2, r.SetBacks)
	require.Contains(t, r.Reason, "set back by an outside change 2 times")
	require.Contains(t, r.Reason, "version "+strconv.FormatInt(second, 10)+" by "+terraformRole)
	require.Contains(t, r.Reason, "point the infrastructure code at the SSM parameter /golden/iac")
	require.Contains(t, r.Reason, "patch-agent audit --iac PATH")
	require.Contains(t, r.Reason, "patch-agent approve iac-asg")
	require.True(t, operator.WaitingForApproval(r), "approve releases it")
	image, version = launches(w)
	require.Equal(t, testworld.ImageA, image, "no third rollout: the apply's version stays")
	require.Equal(t, strconv.FormatInt(second, 10), version)
	lt, _ := w.Account.LaunchTemplate(w.Account.Group(g.Name).LaunchTemplateID)
	require.Equal(t, second, lt.LatestVersion, "no launch template version created since")
	require.Equal(t, 2.0, w.setBacks())
	require.Len(t, w.notified(t, model.AlertSetBack), 2, "one notification per set-back")
	require.Len(t, setBackHistory(t, w), 2)
	_, line = statusOf(t, w)
	require.Contains(t, line, "Waiting")
	require.Contains(t, line, "approval: set back by an outside change 2 times")

	fixed := w.Account.ApplyLaunchTemplate(g.Name, testworld.ImageB, terraformRole)
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "the hold ends when the template launches another AMI: %+v", w.Rollout(ctx, g.Name))
	settle(t, w.World, 30*time.Minute)
	r = w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase)
	require.Zero(t, r.SetBacks, "the count starts over")
	require.Empty(t, r.SetBackBy)
	image, version = launches(w)
	require.Equal(t, testworld.ImageB, image)
	require.Equal(t, strconv.FormatInt(fixed, 10), version, "the apply's own version launches the target: kept")
	require.Equal(t, 2.0, w.setBacks(), "not a set-back")
	require.Empty(t, w.Checker.Finish())
}

// Field case C25: a group held after two set-backs is released by `patch-agent approve`: AMI B is rolled once
// more, and the next set-back holds it again at once (an approval is one more rollout, not a new allowance).
func TestC25GroupHeldAfterSetBacksIsReleasedByApproveOnceAndHeldAgainAtTheNextSetBack(t *testing.T) {
	ctx := context.Background()
	w, g := setBackWorld(t, false)
	_, second := setBackTwice(t, w)
	_, err := operator.Approve(ctx, w.Store, g.Name, "", "alice", false, w.Account.Clock().Now())
	require.NoError(t, err)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done, "approved: rolled once more: %+v", w.Rollout(ctx, g.Name))
	image, version := launches(w)
	require.Equal(t, testworld.ImageB, image)
	require.NotEqual(t, strconv.FormatInt(second, 10), version)

	third := w.Account.ApplyLaunchTemplate(g.Name, testworld.ImageA, terraformRole)
	done, err = w.RunUntil(ctx, tick, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseWaiting })
	require.NoError(t, err)
	require.True(t, done, "held at once: %+v", w.Rollout(ctx, g.Name))
	settle(t, w.World, time.Hour)
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Equal(t, 3, r.SetBacks)
	image, version = launches(w)
	require.Equal(t, testworld.ImageA, image)
	require.Equal(t, strconv.FormatInt(third, 10), version, "not rolled again")
	require.Equal(t, 3.0, w.setBacks())
	require.Len(t, w.notified(t, model.AlertSetBack), 3)
	require.Empty(t, w.Checker.Finish())
}

// Field case C25: what is not a set-back. An apply that writes a new launch template version with the AMI the
// agent rolled the group to (infrastructure code that reads the SSM parameter) changes nothing the agent
// reports or does: the group keeps the apply's version, which the agent reads once.
func TestC25NewTemplateVersionWithTheTargetAMIIsNotASetBack(t *testing.T) {
	ctx := context.Background()
	w, g := setBackWorld(t, false)
	applied := w.Account.ApplyLaunchTemplate(g.Name, testworld.ImageB, terraformRole)
	launched := w.Account.LaunchedInstances(g.Name)
	reads := w.Account.Calls()["ec2:DescribeLaunchTemplateVersions"]
	settle(t, w.World, time.Hour)
	require.Equal(t, reads+1, w.Account.Calls()["ec2:DescribeLaunchTemplateVersions"],
		"the apply's version is read once, not on every look")
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase)
	require.Zero(t, r.SetBacks)
	_, version := launches(w)
	require.Equal(t, strconv.FormatInt(applied, 10), version, "the apply's version is kept")
	require.Equal(t, launched, w.Account.LaunchedInstances(g.Name))
	require.Zero(t, w.setBacks())
	require.Empty(t, w.notified(t, model.AlertSetBack))
	require.Empty(t, setBackHistory(t, w))
	row, _ := statusOf(t, w)
	require.Empty(t, row.SetBack)
	require.Empty(t, w.Checker.Finish())
}

// Field case C25: the agent's own rollback (a new AMI whose replacements never get healthy: the launch template
// goes back to the version before the rollout) and an operator's rollback (`patch-agent rollback` to AMI A while
// the parameter names B, after an apply set the group back once) both leave the group launching another AMI than
// the source names; neither is a set-back, neither is rolled again, and the operator's rollback forgets the
// set-back counted against the AMI it rolled back from.
func TestC25AgentRollbackAndManualRollbackAreNotSetBacks(t *testing.T) {
	ctx := context.Background()
	t.Run("agent rollback", func(t *testing.T) {
		w, g := setBackWorld(t, false)
		w.Account.MarkImageUnhealthy(imageC)
		w.PublishAMI(g.Parameter, imageC)
		done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseRolledBack })
		require.NoError(t, err)
		require.True(t, done, "rolled back: %+v", w.Rollout(ctx, g.Name))
		launched := w.Account.LaunchedInstances(g.Name)
		settle(t, w.World, time.Hour)
		r := w.Rollout(ctx, g.Name)
		require.Equal(t, state.PhaseRolledBack, r.Phase)
		require.Equal(t, imageC, r.TargetImageID)
		image, _ := launches(w)
		require.Equal(t, testworld.ImageB, image, "the template the rollout started from")
		require.Zero(t, r.SetBacks)
		require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "not rolled again")
		require.Zero(t, w.setBacks())
		require.Empty(t, w.notified(t, model.AlertSetBack))
		require.Empty(t, setBackHistory(t, w))
		require.Empty(t, w.Checker.Finish())
	})
	t.Run("manual rollback", func(t *testing.T) {
		w, g := setBackWorld(t, false)
		w.Account.ApplyLaunchTemplate(g.Name, testworld.ImageA, terraformRole)
		done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
			r := w.Rollout(ctx, g.Name)
			return r.SetBacks == 1 && r.Phase == state.PhaseCompleted
		})
		require.NoError(t, err)
		require.True(t, done, "set back once and rolled again: %+v", w.Rollout(ctx, g.Name))
		_, err = operator.Rollback(ctx, w.Store, g.Name, testworld.ImageA, "alice", false, w.Account.Clock().Now())
		require.NoError(t, err)
		done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
			r := w.Rollout(ctx, g.Name)
			return r.TargetImageID == testworld.ImageA && r.Phase == state.PhaseCompleted
		})
		require.NoError(t, err)
		require.True(t, done, "the rollback completes: %+v", w.Rollout(ctx, g.Name))
		launched := w.Account.LaunchedInstances(g.Name)
		settle(t, w.World, time.Hour)
		r := w.Rollout(ctx, g.Name)
		require.Equal(t, state.PhaseCompleted, r.Phase)
		require.Zero(t, r.SetBacks, "the set-back counted against AMI B is forgotten with it")
		row, _ := statusOf(t, w)
		require.Empty(t, row.SetBack)
		image, _ := launches(w)
		require.Equal(t, testworld.ImageA, image)
		require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "not rolled again")
		require.Equal(t, 1.0, w.setBacks(), "only the apply's set-back")
		require.Len(t, w.notified(t, model.AlertSetBack), 1)
		require.Empty(t, w.Checker.Finish())
	})
}

// Field case C25: an apply that creates no version but points the group back at an older one (the code's version
// reverted to the template's first, AMI A, which EC2 reports without a CreatedBy) is a set-back too; its version is
// named without a principal, and the group launches AMI B again from a version of the agent's.
func TestC25GroupPointedBackAtAnOlderVersionIsASetBack(t *testing.T) {
	ctx := context.Background()
	w, g := setBackWorld(t, false)
	w.Account.PointGroupAtVersion(g.Name, "1")
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.SetBacks == 1 && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rolled again: %+v", w.Rollout(ctx, g.Name))
	r := w.Rollout(ctx, g.Name)
	lt := w.Account.Group(g.Name).LaunchTemplateID
	require.Equal(t, "launch template "+lt+" version 1", r.SetBackBy)
	image, version := launches(w)
	require.Equal(t, testworld.ImageB, image)
	require.Equal(t, r.NewTemplateVersion, version)
	sent := w.notified(t, model.AlertSetBack)
	require.Len(t, sent, 1)
	require.Empty(t, sent[0].Who, "EC2 reported no CreatedBy")
	require.Equal(t, 1.0, w.setBacks())
	require.Empty(t, w.Checker.Finish())
}
