package notify_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// lazyEventBridge sends to the world's simulated EventBridge once the world is built (the notifier is the
// world's observer, so it exists first).
type lazyEventBridge struct{ w **testworld.World }

func (l lazyEventBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, o ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return (*l.w).Account.EventBridge().PutEvents(ctx, in, o...)
}

// runDemo rolls the demo group (with tags added) to ImageB with a notifier as the agent's observer, setup
// changing the world first, until the rollout satisfies until, and returns what the simulated EventBridge
// received.
func runDemo(t *testing.T, tags map[string]string, setup func(*testworld.World), until func(state.Rollout) bool) []sim.PublishedEvent {
	t.Helper()
	ctx := context.Background()
	var w *testworld.World
	n := notify.New(lazyEventBridge{&w}, notify.Options{})
	spec := testworld.DemoSpec()
	for k, v := range tags {
		if spec.Groups[0].Tags == nil {
			spec.Groups[0].Tags = map[string]string{}
		}
		spec.Groups[0].Tags[k] = v
	}
	spec.Observer = n
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	if setup != nil {
		setup(w)
	}
	_, err = w.RunUntil(ctx, 5*time.Second, time.Minute, func() bool { return false })
	require.NoError(t, err)
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	done, err := w.RunUntil(ctx, 5*time.Second, 3*time.Hour, func() bool { return until(w.Rollout(ctx, testworld.GroupName)) })
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, testworld.GroupName))
	_, err = w.RunUntil(ctx, 5*time.Second, time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.NoError(t, n.Flush(ctx))
	return w.Account.PublishedEvents()
}

// rolloutKinds returns the events announced for the demo's ECS group, in order, and how many of its
// lifecycle actions were announced.
func rolloutKinds(t *testing.T, evs []sim.PublishedEvent) (kinds []string, lifecycleActions map[string]int) {
	lifecycleActions = map[string]int{}
	t.Helper()
	for _, e := range evs {
		require.Equal(t, notify.Source, e.Source)
		require.Equal(t, notify.DefaultBus, e.Bus)
		var common struct {
			SchemaVersion, Group, Platform, Cluster string
		}
		require.NoError(t, json.Unmarshal([]byte(e.Detail), &common))
		require.Equal(t, notify.SchemaVersion, common.SchemaVersion)
		if common.Group != testworld.GroupName {
			continue // the demo's other groups
		}
		require.Equal(t, model.PlatformECS, common.Platform)
		require.Equal(t, testworld.Cluster, common.Cluster)
		switch e.DetailType {
		case notify.DetailTypeRollout:
			var d notify.RolloutDetail
			require.NoError(t, json.Unmarshal([]byte(e.Detail), &d))
			require.Equal(t, testworld.ImageB, d.TargetImageID)
			kinds = append(kinds, d.Event)
		case notify.DetailTypeLifecycle:
			var d notify.LifecycleDetail
			require.NoError(t, json.Unmarshal([]byte(e.Detail), &d))
			lifecycleActions[d.LifecycleTransition]++
		default:
			t.Fatalf("unexpected detail-type %q", e.DetailType)
		}
	}
	return kinds, lifecycleActions
}

func TestTheDemoRolloutAnnouncesItsStartAndCompletion(t *testing.T) {
	evs := runDemo(t, nil, nil, func(r state.Rollout) bool { return r.TargetImageID == testworld.ImageB && !r.Active() })
	kinds, actions := rolloutKinds(t, evs)
	require.Equal(t, []string{notify.EventStarted, notify.EventCompleted}, kinds)
	require.Equal(t, map[string]int{events.TransitionLaunching: 3, events.TransitionTerminating: 3}, actions,
		"the launching hook of each new instance and the terminating hook of each replaced one")
}

func TestABadAMIAnnouncesTheRollbackAndItsEnd(t *testing.T) {
	evs := runDemo(t, nil, func(w *testworld.World) { w.Account.MarkImageUnhealthy(testworld.ImageB) },
		func(r state.Rollout) bool { return r.Phase == state.PhaseRolledBack })
	kinds, _ := rolloutKinds(t, evs)
	require.Equal(t, []string{notify.EventStarted, notify.EventRollingBack, notify.EventRolledBack}, kinds)
}

func TestASoakWaitIsAnnouncedOnceWhileItsRemainingTimeChanges(t *testing.T) {
	evs := runDemo(t, map[string]string{model.TagMinAMIAge: "48h"}, nil, func(r state.Rollout) bool {
		return r.Phase == state.PhaseWaiting && r.UpdatedAt.Sub(r.DetectedAt) > 30*time.Minute
	})
	kinds, _ := rolloutKinds(t, evs)
	require.Equal(t, []string{notify.EventStarted, notify.EventWaiting}, kinds)
}
