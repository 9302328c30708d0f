package agent_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

const tick = 5 * time.Second

func build(t *testing.T, spec testworld.Spec) *testworld.World {
	t.Helper()
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	return w
}

// oneGroup fills in g's cluster and parameter and returns a spec with g alone and a service of 2 tasks per
// instance.
func oneGroup(g *testworld.GroupSetup) testworld.Spec {
	if g.Cluster == "" {
		g.Cluster = "c1"
	}
	if g.Parameter == "" {
		g.Parameter = "/golden/" + g.Name
	}
	return testworld.Spec{Groups: []testworld.GroupSetup{*g}, Services: map[string]int{"web": 2 * int(g.Desired)}}
}

// rollTo publishes image on the group's parameter and runs the world until the rollout ends, asserting the
// invariants after every step.
func rollTo(t *testing.T, w *testworld.World, g testworld.GroupSetup, image string) state.Rollout {
	t.Helper()
	ctx := context.Background()
	w.PublishAMI(g.Parameter, image)
	done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.TargetImageID == image && !r.Active()
	})
	require.NoError(t, err)
	require.True(t, done, "rollout of %s did not end: %+v", g.Name, w.Rollout(ctx, g.Name))
	_, err = w.RunUntil(ctx, tick, time.Minute, func() bool { return false }) // let hooks settle
	require.NoError(t, err)
	require.Empty(t, w.Checker.Finish())
	return w.Rollout(ctx, g.Name)
}

// requireAllOn asserts that the group has n instances that are not leaving, all InService on image.
func requireAllOn(t *testing.T, w *testworld.World, group, image string, n int) {
	t.Helper()
	staying := 0
	for _, i := range w.Account.Group(group).Instances {
		if strings.HasPrefix(i.LifecycleState, "Terminating") {
			continue // a drained instance still shutting down
		}
		staying++
		require.Equal(t, "InService", i.LifecycleState, i.ID)
		require.Equal(t, image, i.ImageID, i.ID)
	}
	require.Equal(t, n, staying)
}

func TestInvariantsHoldAfterEveryStepOfARollout(t *testing.T) {
	g := testworld.GroupSetup{Name: "web-asg", Min: 3, Max: 6, Desired: 3}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	steps := 0
	for ; steps < 2000; steps++ {
		require.NoError(t, w.Agent.RunOnce(ctx))
		require.Empty(t, w.Checker.Check(), "after agent step %d", steps)
		w.Account.Advance(tick)
		require.Empty(t, w.Checker.Check(), "after world step %d", steps)
		if r := w.Rollout(ctx, g.Name); r.Phase == state.PhaseCompleted {
			break
		}
	}
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase)
	requireAllOn(t, w, g.Name, testworld.ImageB, 3)
	require.GreaterOrEqual(t, w.Checker.MinServing[g.Name], 3)
	require.Equal(t, 3, r.OnTarget)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	oldGone := 0
	for _, term := range w.Account.Terminations() {
		if i, _ := w.Account.Instance(term.InstanceID); i.ImageID == testworld.ImageA {
			oldGone++
		}
	}
	require.Equal(t, 3, oldGone, "each old instance replaced once")
	requireNoCapacityWrites(t, w, g.Name)
}

// Field case C10 (../shared/CASES.md): a group of desired = min = max = 1 has no room for the refresh to launch
// before it terminates, and the agent never raises MaxSize: the rollout waits with a status naming MaxSize and
// replaces nothing. With MaxSize 2 it completes, the replacement serving before the old instance drains,
// without any capacity write of the agent.
func TestC10SingleInstanceGroupAtMaxWaitsNamingMaxSizeAndWithMax2RollsWithoutCapacityWrites(t *testing.T) {
	t.Run("max 1", func(t *testing.T) {
		g := testworld.GroupSetup{Name: "solo", Min: 1, Max: 1, Desired: 1}
		w := build(t, oneGroup(&g))
		w.PublishAMI(g.Parameter, testworld.ImageB)
		settle(t, w, time.Hour)
		r := w.Rollout(context.Background(), g.Name)
		require.True(t, r.Active(), "%+v", r)
		require.Contains(t, r.Reason, "MaxSize (1)")
		require.Contains(t, r.Reason, "never raises MaxSize")
		grp := w.Account.Group(g.Name)
		require.Equal(t, int32(1), grp.Max)
		require.Equal(t, int32(1), grp.Desired)
		requireAllOn(t, w, g.Name, testworld.ImageA, 1)
		require.Empty(t, w.Account.Terminations(), "nothing replaced")
		requireNoCapacityWrites(t, w, g.Name)
		require.Empty(t, w.Checker.Finish())
	})
	t.Run("max 2", func(t *testing.T) {
		g := testworld.GroupSetup{Name: "solo", Min: 1, Max: 2, Desired: 1}
		w := build(t, oneGroup(&g))
		ctx := context.Background()
		maxSeen := int32(0)
		w.PublishAMI(g.Parameter, testworld.ImageB)
		done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
			maxSeen = max(maxSeen, w.Account.Group(g.Name).Max)
			return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted
		})
		require.NoError(t, err)
		require.True(t, done, "%+v", w.Rollout(ctx, g.Name))
		require.Equal(t, int32(2), maxSeen, "MaxSize untouched")
		settle(t, w, time.Minute)
		grp := w.Account.Group(g.Name)
		require.Equal(t, int32(2), grp.Max)
		require.Equal(t, int32(1), grp.Desired)
		require.Equal(t, int32(1), grp.Min)
		requireAllOn(t, w, g.Name, testworld.ImageB, 1)
		require.Equal(t, 1, w.Checker.MinServing[g.Name], "the replacement served before the old instance was drained")
		requireNoCapacityWrites(t, w, g.Name)
		require.Empty(t, w.Checker.Finish())
	})
}

// Field case C11 (../shared/CASES.md).
func TestC11GroupLaunchesTheNewAMIWhateverItsTemplateReference(t *testing.T) {
	for _, c := range []struct {
		name, version string
		mixed         bool
	}{
		{"$Default while $Latest differs", "$Default", false},
		{"$Latest", "$Latest", false},
		{"explicit version", "1", false},
		{"mixed instances policy", "$Default", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, TemplateVersion: c.version, MixedInstances: c.mixed}
			w := build(t, oneGroup(&g))
			grp := w.Account.Group(g.Name)
			if c.version == "$Default" {
				// A newer version exists that is not the default: the group must not pick up its AMI.
				w.Account.CreateLaunchTemplateVersion(grp.LaunchTemplateID, "ami-0c0c0c0c0c0c0c0c0")
			}
			r := rollTo(t, w, g, testworld.ImageB)
			require.Equal(t, state.PhaseCompleted, r.Phase)
			requireAllOn(t, w, g.Name, testworld.ImageB, 2)
			grp = w.Account.Group(g.Name)
			require.Equal(t, r.NewTemplateVersion, grp.LaunchTemplateVersion, "group points at the explicit new version")
			lt, ok := w.Account.LaunchTemplate(grp.LaunchTemplateID)
			require.True(t, ok)
			require.Equal(t, int64(1), lt.DefaultVersion, "the template's default version (shared with other groups) is unchanged")
		})
	}
}

// Field case C13 (../shared/CASES.md).
func TestC13NewParameterVersionWithTheSameImageStartsNoRollout(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	_, err := w.RunUntil(ctx, tick, time.Minute, func() bool { return false })
	require.NoError(t, err)
	before := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseIdle, before.Phase)
	lt, _ := w.Account.LaunchTemplate(w.Account.Group(g.Name).LaunchTemplateID)

	w.PublishAMI(g.Parameter, testworld.ImageA) // Version 1 -> 2, same image id
	_, err = w.RunUntil(ctx, tick, 15*time.Minute, func() bool { return false })
	require.NoError(t, err)

	after := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseIdle, after.Phase)
	require.Equal(t, before.Version, after.Version, "no transition written")
	lt2, _ := w.Account.LaunchTemplate(w.Account.Group(g.Name).LaunchTemplateID)
	require.Equal(t, lt.LatestVersion, lt2.LatestVersion, "no launch template version created")
	require.Zero(t, w.Account.Calls()["autoscaling:SetDesiredCapacity"])
}

// Field case C1 (../shared/CASES.md).
func TestC1HookTestNotificationIsDeletedAndCountedIgnored(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 2, Desired: 1}
	w := build(t, oneGroup(&g)) // creating each hook (launching, terminating) sends autoscaling:TEST_NOTIFICATION to the queue
	visible, _ := w.Account.QueueDepth(w.QueueURL)
	require.Equal(t, 2, visible)
	require.NoError(t, w.Agent.RunOnce(context.Background()))
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "deleted, not left to be redelivered")
	require.Equal(t, int64(2), w.Agent.Consumer.Stats.Ignored.Load())
	require.Zero(t, w.Agent.Consumer.Stats.Failed.Load())
}

func TestUnmanagedGroupIsNeverTouched(t *testing.T) {
	g := testworld.GroupSetup{Name: "managed", Min: 1, Max: 2, Desired: 1}
	spec := oneGroup(&g)
	spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: "theirs", Cluster: "c1", Parameter: "/golden/managed",
		Min: 1, Max: 2, Desired: 1, Unmanaged: true})
	w := build(t, spec)
	rollTo(t, w, spec.Groups[0], testworld.ImageB)
	theirs := w.Account.Group("theirs")
	require.Len(t, theirs.Instances, 1)
	require.Equal(t, testworld.ImageA, theirs.Instances[0].ImageID)
	require.Equal(t, "ACTIVE", theirs.Instances[0].ContainerInstanceStatus)
	require.Equal(t, "$Default", theirs.LaunchTemplateVersion)
	lt, _ := w.Account.LaunchTemplate(theirs.LaunchTemplateID)
	require.Equal(t, int64(1), lt.LatestVersion, "no version added to their template")
}

// Field case C15 (../shared/CASES.md): the launching hook ABANDONs the first launch of the bad AMI at the health
// deadline, the refresh halts (no old instance is touched) and the group is refreshed back to the last good AMI.
func TestC15UnhealthyReplacementRollsBack(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	w := build(t, oneGroup(&g))
	w.Account.MarkImageUnhealthy(testworld.ImageB)
	before := w.Account.Group(g.Name)
	r := rollTo(t, w, g, testworld.ImageB)
	require.Equal(t, state.PhaseRolledBack, r.Phase)
	require.Contains(t, r.Reason, "ABANDONed by lifecycle hook")
	require.Contains(t, r.Reason, "not healthy in cluster after 10m0s")
	after := w.Account.Group(g.Name)
	requireAllOn(t, w, g.Name, testworld.ImageA, 2)
	lt, ok := w.Account.LaunchTemplate(after.LaunchTemplateID)
	require.True(t, ok)
	version := lt.DefaultVersion
	if after.LaunchTemplateVersion != "$Default" {
		var err error
		version, err = strconv.ParseInt(after.LaunchTemplateVersion, 10, 64)
		require.NoError(t, err)
	}
	require.Equal(t, testworld.ImageA, lt.ImageIDs[version], "the group's launch template reference (%s) resolves to the last good AMI again", after.LaunchTemplateVersion)
	require.Equal(t, before.LaunchTemplateID, after.LaunchTemplateID)
	require.Equal(t, before.Desired, after.Desired)
	for _, term := range w.Account.Terminations() {
		i, _ := w.Account.Instance(term.InstanceID)
		require.Equal(t, testworld.ImageB, i.ImageID, "only the unhealthy replacement was removed")
	}
	requireNoCapacityWrites(t, w, g.Name)
	h, err := w.Store.History(context.Background(), g.Name)
	require.NoError(t, err)
	require.Equal(t, "rolled-back", h[len(h)-1].Event)
}

var _ = model.TagEnabled
var _ = sim.TransitionTerminating

func TestPublicParameterWithoutEventsIsPolled(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2, Parameter: "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended"}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	settle(t, w, time.Minute)
	// AWS public parameters emit no change events into an account: only the poll can see the new AMI.
	w.Account.PutParameter(g.Parameter, `{"image_id":"`+testworld.ImageB+`","image_name":"al2023-ami-ecs-hvm"}`)
	settle(t, w, 5*time.Minute)
	require.Equal(t, state.PhaseIdle, w.Rollout(ctx, g.Name).Phase, "not before the poll interval")
	done, err := w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return w.Rollout(ctx, g.Name).TargetImageID == testworld.ImageB })
	require.NoError(t, err)
	require.True(t, done, "the 10-minute poll found the new AMI")
	require.False(t, w.Rollout(ctx, g.Name).SourceModified.IsZero(), "LastModifiedDate recorded with the detection")
}

func TestDuplicateParameterChangeEventHasOneEffect(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	settle(t, w, time.Minute)
	ignored := w.Agent.Consumer.Stats.Ignored.Load()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	msgs := w.Account.QueueMessages(w.QueueURL)
	require.Len(t, msgs, 1)
	w.Account.SendMessage(w.QueueURL, msgs[0]) // delivered twice in one receive (SQS at-least-once)
	require.NoError(t, w.Agent.RunOnce(ctx))
	w.Account.SendMessage(w.QueueURL, msgs[0]) // and once more later (an EventBridge retry)
	require.NoError(t, w.Agent.RunOnce(ctx))
	require.GreaterOrEqual(t, w.Agent.Consumer.Stats.Ignored.Load()-ignored, int64(1), "the late duplicate is recognised by its event id")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight)
	h, err := w.Store.History(ctx, g.Name)
	require.NoError(t, err)
	require.Len(t, h, 1, "one detection")
}

func TestOptedInGroupOnALaunchConfigurationIsReportedNotRetried(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 2, Desired: 1}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	require.NoError(t, w.Account.CreateLaunchConfiguration("legacy-lc", testworld.ImageA, "m5.large"))
	require.NoError(t, w.Account.CreateGroupOnLaunchConfiguration(sim.GroupSpec{Name: "legacy", Min: 1, Max: 2, Desired: 1,
		ECSCluster: "c1", Tags: map[string]string{model.TagEnabled: "true", model.TagPlatform: "ecs",
			model.TagCluster: "c1", model.TagParameter: g.Parameter}}, "legacy-lc"))
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, "legacy")
	require.Contains(t, r.Reason, "cannot roll this group")
	require.Contains(t, r.Reason, "launch configuration legacy-lc")
	require.Less(t, r.Steps, 5, "the reason is written once, not every tick")
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase, "the other group rolled")
}

func TestANormalRolloutLogsNoErrors(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.Log = zap.New(core)
	w := build(t, spec)
	r := rollTo(t, w, g, testworld.ImageB)
	require.Equal(t, state.PhaseCompleted, r.Phase)
	for _, e := range logs.All() {
		require.NotEqual(t, zapcore.ErrorLevel, e.Level, "error logged in a normal rollout: %s %v", e.Message, e.Context)
	}
}

// Field case C21 (../shared/CASES.md): a cluster autoscaler raises desired capacity in the middle of the refresh
// of an AMI that proves unhealthy. Its scale out launches the refresh's (bad) configuration too; the agent halts
// at the first ABANDON and refreshes the group back to the previous version. Desired capacity ends where the
// autoscaler set it, every instance it asks for serves on the previous AMI, serving capacity never falls below
// what it set (invariant 1, with the instances it asked for allowed their boot: the checker's baseline follows
// its raise), and the agent writes no capacity.
func TestC21AutoscalerRaiseDuringARefreshOfABadAMIKeepsItsDesiredCapacityThroughTheRollback(t *testing.T) {
	for _, p := range refreshPlatforms {
		t.Run(p.name, func(t *testing.T) {
			spec := p.spec(1)
			spec.Groups[0].Max = 14 // room for the autoscaler's raise and the refresh's batch above it
			g := spec.Groups[0]
			w := buildRefresh(t, spec)
			w.Account.MarkImageUnhealthy(testworld.ImageB)
			publish(w, g, testworld.ImageB)
			runTo(t, w, time.Hour, "refresh started", func(r state.Rollout) bool {
				return r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID != ""
			}, g.Name)
			const raised = 12
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, raised), "the autoscaler scales out")
			r := runTo(t, w, 3*time.Hour, "rolled back", ended(testworld.ImageB), g.Name)
			require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
			require.Contains(t, r.Reason, "ABANDON")
			settle(t, w, 30*time.Minute)
			require.Equal(t, int32(raised), w.Account.Group(g.Name).Desired, "desired capacity where the autoscaler set it")
			requireAllOn(t, w, g.Name, testworld.ImageA, raised)
			require.GreaterOrEqual(t, w.Checker.MinServing[g.Name], int(g.Desired), "never below desired capacity before the raise")
			requireNoCapacityWrites(t, w, g.Name)
			require.Empty(t, w.Checker.Finish())
		})
	}
}
