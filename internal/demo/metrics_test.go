package demo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func TestDemoSummaryShowsTheMetricsItPublished(t *testing.T) {
	s, err := Run(context.Background(), Options{})
	require.NoError(t, err)
	k := func(name string) string { return metrics.SeriesKey(name, testworld.GroupName, model.PlatformECS) }
	require.Equal(t, 0.0, s.Metrics[k(metrics.InstancesOutdated)], "%v", s.Metrics)
	require.Equal(t, 3.0, s.Metrics[k(metrics.InstancesOnTargetAMI)])
	require.Equal(t, 3.0, s.Metrics[k(metrics.ReplacementsSucceeded)])
	require.Equal(t, 0.0, s.Metrics[k(metrics.RolloutHalted)])
	require.Equal(t, 1.0, s.Metrics[metrics.AgentHeartbeat])
	require.Equal(t, float64(s.Messages.Processed), s.Metrics[metrics.MessagesProcessed])
}

// TestDemoMessageMetricsCountTheWakeUpQueuesConsumer: with a wake-up queue of its own, the agent's wake-up
// consumer handles the wake-up events; the demo's message metrics count its messages beside the main
// consumer's, as `patch-agent run` does.
func TestDemoMessageMetricsCountTheWakeUpQueuesConsumer(t *testing.T) {
	spec := testworld.DemoSpec()
	spec.Groups = spec.Groups[:1] // the ECS group
	spec.WakeUpEvents, spec.WakeUpQueue = true, true
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	w.PublishAMI(testworld.Parameter, testworld.ImageB)
	ctx := context.Background()
	done, err := w.RunEvents(ctx, 3*time.Hour, func() bool {
		r, err := w.Store.GetRollout(ctx, testworld.GroupName)
		return err == nil && r.TargetImageID == testworld.ImageB && !r.Active()
	})
	require.NoError(t, err)
	require.True(t, done, "the rollout completed")
	require.NotNil(t, w.Agent.WakeUpConsumer)
	mainN, wakeN := w.Agent.Consumer.Stats.Processed.Load(), w.Agent.WakeUpConsumer.Stats.Processed.Load()
	require.Positive(t, wakeN, "the wake-up consumer handled the wake-up events")

	reg := metrics.NewRegistry(nil)
	reg.Consumer = w.MessageStats
	var processed float64
	for _, s := range reg.Collect() {
		if s.Name == metrics.MessagesProcessed {
			processed = s.Value
		}
	}
	require.Equal(t, float64(mainN+wakeN), processed)
}
