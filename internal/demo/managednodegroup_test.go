package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestManagedNodegroupDemoEndsCompletedWithTheNodesOnTheNewRelease: the demo scenario managed-node-group
// ends Completed, the node group on the new release, every node on its AMI, one EKS update, and no Auto
// Scaling change made by the agent.
func TestManagedNodegroupDemoEndsCompletedWithTheNodesOnTheNewRelease(t *testing.T) {
	s, err := RunManagedNodegroup(context.Background(), nil, nil)
	require.NoError(t, err)
	require.Equal(t, "Completed", s.Phase, s.Reason)
	require.Equal(t, MNGReleaseNew, s.ReleaseVersion)
	require.Equal(t, []string{MNGImageNew, MNGImageNew, MNGImageNew}, s.Nodes)
	require.Equal(t, 1, s.Updates)
	require.Zero(t, s.AgentGroupCalls)
	require.GreaterOrEqual(t, s.HistoryEntries, 2, "detected and completed")
}
