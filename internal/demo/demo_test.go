package demo

import (
	"context"
	"testing"

	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/stretchr/testify/require"
)

func TestDemoRollsThreeInstancesToImageB(t *testing.T) {
	s, err := Run(context.Background(), Options{})
	require.NoError(t, err)
	require.Len(t, s.Groups, 2, "the ECS group and the EKS group")
	for _, g := range s.Groups {
		require.Equal(t, "Completed", g.State, "%s: %s", g.Name, g.Reason)
		require.Equal(t, testworld.ImageB, g.TargetImageID, g.Name)
		require.Equal(t, 3, g.OnTarget, g.Name)
		require.Equal(t, 3, g.Instances, g.Name)
		require.GreaterOrEqual(t, g.MinInServiceDuringRollout, 3, g.Name)
	}
	require.Zero(t, s.InvariantViolations, s.Violations)
}
