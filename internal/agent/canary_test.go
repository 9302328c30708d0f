package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// canaryGroup is refreshGroup(1) with a canary of 2 instances baking 30 minutes under the alarm "p99-latency".
func canaryGroup() testworld.GroupSetup {
	g := refreshGroup(1)
	g.Tags[model.TagCanary] = "2"
	g.Tags[model.TagCanaryBake] = "30m"
	g.Tags[model.TagAlarms] = "p99-latency"
	return g
}

// refreshesOf returns the group's instance refreshes as Auto Scaling describes them, oldest first.
func refreshesOf(t *testing.T, w *testworld.World, group string) []astypes.InstanceRefresh {
	t.Helper()
	out, err := w.Account.AutoScaling().DescribeInstanceRefreshes(context.Background(), &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String(group)})
	require.NoError(t, err)
	rs := slices.Clone(out.InstanceRefreshes)
	slices.Reverse(rs)
	return rs
}

// A canary: the first refresh replaces 2 of 10 instances (checkpoint 20 %) and bakes 30 minutes under the
// target's alarm; then a second refresh, without a checkpoint, replaces the rest.
func TestRefreshCanaryReplacesTheFirstInstancesBakesThenTheRest(t *testing.T) {
	g := canaryGroup()
	w := buildRefresh(t, oneGroup(&g))
	w.Account.SetAlarm("p99-latency", "OK")
	w.PublishAMI(g.Parameter, testworld.ImageB)
	r := runTo(t, w, 4*time.Hour, "completed", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	rs := refreshesOf(t, w, g.Name)
	require.Len(t, rs, 2, "the canary's refresh, then the rest's")
	require.Equal(t, []int32{20}, rs[0].Preferences.CheckpointPercentages)
	require.Equal(t, int32(1800), aws.ToInt32(rs[0].Preferences.CheckpointDelay))
	require.Equal(t, []string{"p99-latency"}, rs[0].Preferences.AlarmSpecification.Alarms)
	require.Empty(t, rs[1].Preferences.CheckpointPercentages)
	require.GreaterOrEqual(t, rs[1].StartTime.Sub(*rs[0].StartTime), 30*time.Minute, "the rest waits for the bake")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// The canary's alarm goes into ALARM during the bake: the refresh fails, the agent halts and rolls the group
// back; no instance beyond the canary's ever ran the new AMI.
func TestRefreshCanaryAlarmDuringTheBakeRollsBackOnlyTheCanary(t *testing.T) {
	g := canaryGroup()
	w := buildRefresh(t, oneGroup(&g))
	w.Account.SetAlarm("p99-latency", "OK")
	w.PublishAMI(g.Parameter, testworld.ImageB)
	runTo(t, w, 2*time.Hour, "baking", func(r state.Rollout) bool {
		return r.Refresh != nil && r.OnTarget >= 2 && r.Refresh.PercentageComplete >= 20
	}, g.Name)
	w.Account.SetAlarm("p99-latency", "ALARM")
	r := runTo(t, w, 3*time.Hour, "rolled back", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	seen := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		seen[i.ID] = true
	}
	for _, term := range w.Account.Terminations() {
		if term.Group == g.Name {
			seen[term.InstanceID] = true
		}
	}
	launchedOnB := 0
	for id := range seen {
		if i, ok := w.Account.Instance(id); ok && i.ImageID == testworld.ImageB {
			launchedOnB++
		}
	}
	require.Equal(t, 2, launchedOnB, "only the canary ran the new AMI")
	w.Account.SetAlarm("p99-latency", "OK")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageA, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// The alarm fires after the canary, while the rest is replaced: the canary's refresh already moved the group
// to the new launch template version, so Auto Scaling's RollbackInstanceRefresh would return it there; the agent
// cancels the refresh and rolls back by a refresh to the version before the rollout. Every instance ends on
// the previous AMI.
func TestRefreshAlarmAfterTheCanaryRollsTheWholeGroupBack(t *testing.T) {
	g := canaryGroup()
	w := buildRefresh(t, oneGroup(&g))
	w.Account.SetAlarm("p99-latency", "OK")
	w.PublishAMI(g.Parameter, testworld.ImageB)
	runTo(t, w, 4*time.Hour, "the rest's refresh under way", func(r state.Rollout) bool {
		return r.Refresh != nil && r.Refresh.CanaryPercentage == 0 && r.Refresh.ID != "" && r.OnTarget >= 4
	}, g.Name)
	w.Account.SetAlarm("p99-latency", "ALARM")
	r := runTo(t, w, 3*time.Hour, "rolled back", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	require.Zero(t, refreshCalls(w, "autoscaling:RollbackInstanceRefresh"), "Auto Scaling's rollback would return to the canary's version")
	w.Account.SetAlarm("p99-latency", "OK")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageA, 10)
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}
