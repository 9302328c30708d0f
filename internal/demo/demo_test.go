package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDemoRollsThreeInstancesToImageB(t *testing.T) {
	s, err := Run(context.Background(), Options{})
	require.NoError(t, err)
	require.Len(t, s.Groups, 1)
	g := s.Groups[0]
	require.Equal(t, "Completed", g.State, g.Reason)
	require.Equal(t, ImageB, g.TargetImageID)
	require.Equal(t, 3, g.OnTarget)
	require.Equal(t, 3, g.Instances)
	require.GreaterOrEqual(t, g.MinInServiceDuringRollout, 3)
	require.Zero(t, s.InvariantViolations, s.Violations)
}
