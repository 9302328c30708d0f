package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// TestLifecycleSweepFailureLogsACountAndTheFirstFewGroups: when the lifecycle sweep's
// DescribeAutoScalingGroups fails, its warning carries how many groups it was about (group_count) and names
// at most the first few, not every group of the fleet on one line.
func TestLifecycleSweepFailureLogsACountAndTheFirstFewGroups(t *testing.T) {
	const groups = 30
	ctx := context.Background()
	core, logs := observer.New(zapcore.WarnLevel)
	faults := sim.NewFaults(1, nil)
	spec := testworld.Spec{WakeUpEvents: true, WakeUpQueue: true, Log: zap.New(core), Faults: faults}
	for i := range groups {
		spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: fmt.Sprintf("g%03d", i), Cluster: "c", Parameter: "/golden/fleet",
			Min: 1, Max: 2, Desired: 1, HeartbeatTimeout: 60 * time.Second})
	}
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 3*time.Minute, func() bool { return false })
	require.NoError(t, err)

	faults.SetRules(sim.FaultRule{Op: "autoscaling:DescribeAutoScalingGroups", Every: 1, Codes: []string{sim.FaultThrottling}})
	w.Agent.SweepLifecycle(ctx)
	lines := logs.FilterMessageSnippet("lifecycle sweep: describing the groups failed").All()
	require.Len(t, lines, 1)
	fields := lines[0].ContextMap()
	require.Equal(t, int64(groups), fields[logging.GroupCount])
	named := fields[logging.Group].(string)
	require.Equal(t, "g000,g001,g002,g003,g004 and 25 more", named)
	require.Less(t, len(named), 60, "a short line whatever the fleet")
	require.False(t, strings.Contains(named, "g029"))
}
