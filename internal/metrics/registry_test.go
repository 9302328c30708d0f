package metrics_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const (
	group    = "web-asg"
	platform = "ecs"
	tick     = 5 * time.Second
)

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// values collects a registry into SeriesKey -> value.
func values(r *metrics.Registry) map[string]float64 {
	out := map[string]float64{}
	for _, s := range r.Collect() {
		out[s.Key()] = s.Value
	}
	return out
}

func key(name string) string { return metrics.SeriesKey(name, group, platform) }

func rec(phase state.Phase, reason string) state.Rollout {
	return state.Rollout{Group: group, Platform: platform, Phase: phase, Reason: reason, TargetImageID: testworld.ImageB}
}

func TestRolloutGauges(t *testing.T) {
	for _, tc := range []struct {
		name               string
		phase              state.Phase
		reason             string
		inProgress, halted float64
	}{
		{"a halted rollout is halted and not in progress", state.PhaseHalted, "failed: drain of i-1 did not finish", 0, 1},
		{"rolling back after a failure is halted and in progress", state.PhaseRollingBack, "failed: replacement i-5 not healthy", 1, 1},
		{"rolled back after a failure stays halted", state.PhaseRolledBack, "failed: replacement i-5 not healthy", 0, 1},
		{"rolled back without a failure is not halted", state.PhaseRolledBack, "", 0, 0},
		{"waiting on a gate is in progress", state.PhaseWaiting, "soak: AMI is 1h old", 1, 0},
		{"replacing is in progress", state.PhaseReplacing, "", 1, 0},
		{"completed is neither", state.PhaseCompleted, "", 0, 0},
		{"idle is neither", state.PhaseIdle, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := metrics.NewRegistry(testingclock.NewFakePassiveClock(t0))
			r.RolloutTransition(rec(state.PhaseReplacing, ""), rec(tc.phase, tc.reason), "x")
			v := values(r)
			require.Equal(t, tc.inProgress, v[key(metrics.RolloutInProgress)])
			require.Equal(t, tc.halted, v[key(metrics.RolloutHalted)])
		})
	}
}

func TestReplacementsSucceededCountsRetiredInstancesOfOneTarget(t *testing.T) {
	r := metrics.NewRegistry(nil)
	prev := rec(state.PhaseReplacing, "")
	next := prev
	next.Replaced = []string{"i-1"}
	r.RolloutTransition(prev, next, "old instance terminated")
	prev = next
	next.Replaced = []string{"i-1", "i-2"}
	r.RolloutTransition(prev, next, "old instance terminated")
	r.RolloutTransition(next, next, "waiting") // no new retirement
	newTarget := next
	newTarget.TargetImageID, newTarget.Replaced = "ami-0c", []string{"i-9", "i-8", "i-7"}
	r.RolloutTransition(next, newTarget, "new AMI detected") // a new rollout's list is not an increase
	require.Equal(t, 2.0, values(r)[key(metrics.ReplacementsSucceeded)])
}

// An instance refresh counts the instances it updated: the fall of InstancesToUpdate within one refresh (the
// record's progress is edited in place, as the orchestrator does), not the rise from Pending's 0, not a new
// refresh's first value, not a rollback's refresh.
func TestReplacementsSucceededCountsTheInstancesAnInstanceRefreshUpdated(t *testing.T) {
	r := metrics.NewRegistry(nil)
	p := &state.RefreshProgress{ID: "ir-1"}
	next := rec(state.PhaseReplacing, "")
	next.Refresh = p
	for _, left := range []int32{0, 3, 2, 2} { // Pending, then InProgress
		p.InstancesToUpdate = left
		r.RolloutTransition(next, next, "instance refresh progress")
	}
	require.Equal(t, 1.0, values(r)[key(metrics.ReplacementsSucceeded)])
	p.ID, p.InstancesToUpdate = "ir-2", 2 // cancelled by a pause; the new refresh skips the updated instance
	r.RolloutTransition(next, next, "instance refresh started")
	for _, left := range []int32{1, 0} {
		p.InstancesToUpdate = left
		r.RolloutTransition(next, next, "instance refresh progress")
	}
	require.Equal(t, 3.0, values(r)[key(metrics.ReplacementsSucceeded)])
	p.ID, p.Rollback, p.InstancesToUpdate = "ir-3", true, 3
	r.RolloutTransition(next, next, "rolling back")
	p.InstancesToUpdate = 0
	r.RolloutTransition(next, next, "rolled back")
	require.Equal(t, 3.0, values(r)[key(metrics.ReplacementsSucceeded)], "a rollback is no replacement to the target")
}

func TestReplacementsFailedCountsHaltsDuringAReplacementOnce(t *testing.T) {
	r := metrics.NewRegistry(nil)
	replacing := rec(state.PhaseReplacing, "")
	replacing.Current = &state.Replacement{Step: state.StepReplacementHealthy, OldInstanceID: "i-1"}
	rollingBack := replacing
	rollingBack.Phase, rollingBack.Reason = state.PhaseRollingBack, "failed: replacement i-5 not healthy after 10m0s"
	r.RolloutTransition(replacing, rollingBack, "rolling-back")
	r.RolloutTransition(rollingBack, rollingBack, "waiting")
	rolledBack := rollingBack
	rolledBack.Phase, rolledBack.Current = state.PhaseRolledBack, nil
	r.RolloutTransition(rollingBack, rolledBack, "rolled back")
	// A halt before any replacement (the group's launch template cannot be read) is no failed replacement.
	preparing := rec(state.PhasePreparing, "")
	halted := preparing
	halted.Phase, halted.Reason = state.PhaseHalted, "failed: group has no launch template"
	r.RolloutTransition(preparing, halted, "halted")
	require.Equal(t, 1.0, values(r)[key(metrics.ReplacementsFailed)])
}

// DrainSeconds is the duration of the last drain the agent completed a terminating lifecycle action for: a
// refresh's replacement and a scale-in alike; a launching action (no drain) leaves it as it was.
func TestDrainSecondsIsTheLastTerminatingActionsDrain(t *testing.T) {
	r := metrics.NewRegistry(nil)
	r.RolloutTransition(rec(state.PhaseReplacing, ""), rec(state.PhaseReplacing, ""), "instance refresh started") // the group's platform
	r.LifecycleActionCompleted(state.Hook{Group: group, InstanceID: "i-1", Transition: events.TransitionTerminating}, 95*time.Second)
	v := values(r)
	require.Equal(t, 95.0, v[key(metrics.DrainSeconds)])
	require.Equal(t, 1.0, v[key(metrics.LifecycleActionsCompleted)])
	r.LifecycleActionCompleted(state.Hook{Group: group, InstanceID: "i-9", Transition: events.TransitionLaunching}, 0)
	require.Equal(t, 95.0, values(r)[key(metrics.DrainSeconds)])
	r.LifecycleActionCompleted(state.Hook{Group: group, InstanceID: "i-7", Transition: events.TransitionTerminating}, 42*time.Second)
	require.Equal(t, 42.0, values(r)[key(metrics.DrainSeconds)])
}

func TestInstanceCountsAgainstTheTarget(t *testing.T) {
	view := model.GroupView{Name: group, Instances: []model.InstanceView{
		{ID: "i-1", ImageID: testworld.ImageA, LifecycleState: "InService"},
		{ID: "i-2", ImageID: testworld.ImageA, LifecycleState: "Terminating:Wait"}, // leaving: not outdated
		{ID: "i-3", ImageID: testworld.ImageB, LifecycleState: "InService"},
		{ID: "i-4", ImageID: testworld.ImageB, LifecycleState: "Pending"}, // a new instance: on target, not in service yet
	}}
	target := model.Target{Group: group, Platform: platform, Cluster: "c1"}
	for _, tc := range []struct {
		name     string
		rollout  state.Rollout
		ami      *model.ResolvedAMI
		onTarget float64
		outdated float64
	}{
		{"the rollout's target counts", rec(state.PhaseReplacing, ""), nil, 1, 1},
		{"without a rollout the source's AMI is the target", state.Rollout{}, &model.ResolvedAMI{ImageID: testworld.ImageA}, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := metrics.NewRegistry(nil)
			r.TargetObserved(target, view, tc.rollout, tc.ami)
			v := values(r)
			require.Equal(t, 4.0, v[key(metrics.InstancesTotal)])
			require.Equal(t, tc.onTarget, v[key(metrics.InstancesOnTargetAMI)])
			require.Equal(t, tc.outdated, v[key(metrics.InstancesOutdated)])
		})
	}
	t.Run("without any target the counts against it are left out", func(t *testing.T) {
		r := metrics.NewRegistry(nil)
		r.TargetObserved(target, view, state.Rollout{}, nil)
		v := values(r)
		require.Contains(t, v, key(metrics.InstancesTotal))
		require.NotContains(t, v, key(metrics.InstancesOutdated))
		require.NotContains(t, v, key(metrics.InstancesOnTargetAMI))
	})
}

func TestTargetAMIAgeIsMeasuredFromTheSourceChange(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0)
	r := metrics.NewRegistry(clk)
	ro := rec(state.PhaseWaiting, "soak: ...")
	ro.SourceModified = t0.Add(-90 * time.Minute)
	r.RolloutTransition(state.Rollout{}, ro, "new AMI detected")
	require.Equal(t, 1.5, values(r)[key(metrics.TargetAMIAgeHours)])
}

func TestGaugesOfAGroupNoLongerObservedAreLeftOutCountersKept(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0)
	r := metrics.NewRegistry(clk)
	r.StaleAfter = 10 * time.Minute
	r.TargetObserved(model.Target{Group: group, Platform: platform}, model.GroupView{}, rec(state.PhaseCompleted, ""), nil)
	r.LifecycleActionCompleted(state.Hook{Group: group}, 0)
	clk.SetTime(t0.Add(11 * time.Minute))
	v := values(r)
	require.NotContains(t, v, key(metrics.InstancesTotal))
	require.NotContains(t, v, key(metrics.RolloutInProgress))
	require.Equal(t, 1.0, v[key(metrics.LifecycleActionsCompleted)])
}

func TestAgentWideMetricsComeFromTheConsumer(t *testing.T) {
	r := metrics.NewRegistry(nil)
	require.Equal(t, map[string]float64{metrics.AgentHeartbeat: 1}, values(r), "without a consumer only the heartbeat")
	var st events.Stats
	st.Processed.Store(7)
	st.Ignored.Store(2)
	st.Failed.Store(1)
	st.OldestMessageAgeSeconds.Store(33)
	r.Consumer = func() *events.Stats { return &st }
	require.Equal(t, map[string]float64{metrics.AgentHeartbeat: 1, metrics.MessagesProcessed: 7, metrics.MessagesIgnored: 2,
		metrics.MessagesFailed: 1, metrics.OldestMessageAgeSeconds: 33}, values(r))
}

// TestRegistryAfterACompletedDemoRollout drives the real agent through a rollout of three instances on the
// simulated account with the registry as its observer.
func TestRegistryAfterACompletedDemoRollout(t *testing.T) {
	ctx := context.Background()
	reg := metrics.NewRegistry(nil)
	spec := testworld.DemoSpec()
	spec.Observer = reg
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	reg.Clock = w.Account.Clock()
	reg.Consumer = func() *events.Stats { return &w.Agent.Consumer.Stats }

	_, err = w.RunUntil(ctx, tick, time.Minute, func() bool { return false })
	require.NoError(t, err)
	k := func(name string) string { return metrics.SeriesKey(name, testworld.GroupName, model.PlatformECS) }
	v := values(reg)
	require.Equal(t, 3.0, v[k(metrics.InstancesOnTargetAMI)], "first sight: already on the source's AMI")
	require.Equal(t, 0.0, v[k(metrics.RolloutInProgress)])

	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	sawProgress := false
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		v := values(reg)
		if v[k(metrics.RolloutInProgress)] == 1 && v[k(metrics.InstancesOutdated)] > 0 {
			sawProgress = true
		}
		r := w.Rollout(ctx, testworld.GroupName)
		return r.TargetImageID == testworld.ImageB && !r.Active()
	})
	require.NoError(t, err)
	require.True(t, done)
	require.True(t, sawProgress, "during the rollout it is in progress with outdated instances")
	_, err = w.RunUntil(ctx, tick, time.Minute, func() bool { return false }) // the last hooks complete
	require.NoError(t, err)

	v = values(reg)
	require.Equal(t, 3.0, v[k(metrics.InstancesTotal)])
	require.Equal(t, 3.0, v[k(metrics.InstancesOnTargetAMI)])
	require.Equal(t, 0.0, v[k(metrics.InstancesOutdated)])
	require.Equal(t, 0.0, v[k(metrics.RolloutInProgress)])
	require.Equal(t, 0.0, v[k(metrics.RolloutHalted)])
	require.Equal(t, 3.0, v[k(metrics.ReplacementsSucceeded)])
	require.Equal(t, 0.0, v[k(metrics.ReplacementsFailed)])
	require.Equal(t, 6.0, v[k(metrics.LifecycleActionsCompleted)], "the launching hook of each new instance and the terminating hook of each old one")
	require.Greater(t, v[k(metrics.DrainSeconds)], 0.0)
	require.Greater(t, v[k(metrics.TargetAMIAgeHours)], 0.0)
	require.Equal(t, float64(w.Agent.Consumer.Stats.Processed.Load()), v[metrics.MessagesProcessed])
	require.Zero(t, v[metrics.MessagesFailed])
}

// docs/operations.md's metric table has one row per metric the agent sends, and no other: its name, its
// CloudWatch unit ("per period" for a counter) and the dimensions Group and Platform for a per-group metric.
func TestTheOperationsDocMetricTableIsTheMetricsSent(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	const header = "| metric | unit | dimensions | meaning | suggested alarm |\n| --- | --- | --- | --- | --- |\n"
	_, table, ok := strings.Cut(string(doc), header)
	require.True(t, ok, "docs/operations.md has the metric table")
	rows := map[string][]string{}
	var order []string
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		require.NotContains(t, rows, name, "%s has one row", name)
		rows[name] = cells
		order = append(order, name)
	}
	var sent []string
	for _, d := range metrics.Definitions() {
		sent = append(sent, d.Name)
		cells, ok := rows[d.Name]
		require.True(t, ok, "docs/operations.md's metric table lacks %s", d.Name)
		unit := strings.TrimSpace(cells[1])
		require.True(t, strings.HasPrefix(unit, string(d.Unit)), "%s: unit %q, sent as %s", d.Name, unit, d.Unit)
		require.Equal(t, d.Kind == metrics.Counter, strings.HasSuffix(unit, "per period"), "%s: %q says whether it is a counter", d.Name, unit)
		require.Equal(t, d.PerGroup, strings.HasPrefix(strings.TrimSpace(cells[2]), "Group, Platform"), "%s: dimensions %q", d.Name, cells[2])
	}
	require.ElementsMatch(t, sent, order, "the table names no metric the agent does not send")
}

func TestOldestMessageAgeIsTheAgeOfTheOldestMessageOfTheLastReceive(t *testing.T) {
	ctx := context.Background()
	reg := metrics.NewRegistry(nil)
	spec := testworld.DemoSpec()
	spec.Observer = reg
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	reg.Consumer = func() *events.Stats { return &w.Agent.Consumer.Stats }
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	w.Account.Advance(90 * time.Second) // the agent was busy: the event waited on the queue
	require.NoError(t, w.Agent.RunOnce(ctx))
	require.Equal(t, 90.0, values(reg)[metrics.OldestMessageAgeSeconds])
	require.NoError(t, w.Agent.RunOnce(ctx))
	require.Equal(t, 0.0, values(reg)[metrics.OldestMessageAgeSeconds], "a receive that returned nothing")
}
