package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/metrics"
)

func TestDemoSummaryShowsTheMetricsItPublished(t *testing.T) {
	s, err := Run(context.Background(), Options{})
	require.NoError(t, err)
	k := func(name string) string { return metrics.SeriesKey(name, GroupName, lifecycle.PlatformECS) }
	require.Equal(t, 0.0, s.Metrics[k(metrics.InstancesOutdated)], "%v", s.Metrics)
	require.Equal(t, 3.0, s.Metrics[k(metrics.InstancesOnTargetAMI)])
	require.Equal(t, 3.0, s.Metrics[k(metrics.ReplacementsSucceeded)])
	require.Equal(t, 0.0, s.Metrics[k(metrics.RolloutHalted)])
	require.Equal(t, 1.0, s.Metrics[metrics.AgentHeartbeat])
	require.Equal(t, float64(s.Messages.Processed), s.Metrics[metrics.MessagesProcessed])
}
