package demo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEveryDemoScenarioEndsAsDescribed(t *testing.T) {
	for _, name := range Scenarios() {
		t.Run(name, func(t *testing.T) {
			s, err := Run(context.Background(), Options{Scenario: name})
			require.NoError(t, err)
			require.Len(t, s.Groups, 1)
			g := s.Groups[0]
			require.Equal(t, s.Expected, g.State, g.Reason)
			require.Zero(t, s.InvariantViolations, s.Violations)
			require.GreaterOrEqual(t, g.MinInServiceDuringRollout, 3)
			switch name {
			case "rollout", "crash", "pause", "window":
				require.Equal(t, 3, g.OnTarget)
			case "bad-ami":
				require.Zero(t, g.OnTarget, "every in-service instance still on the old AMI")
				require.Contains(t, g.Reason, "not healthy after 10m0s")
			case "soak":
				require.Contains(t, g.Reason, "may start at")
			}
			if name == "crash" {
				require.Greater(t, s.Restarts, 10)
			}
		})
	}
}

func TestUnknownScenarioIsAClearError(t *testing.T) {
	_, err := Run(context.Background(), Options{Scenario: "chaos"})
	require.ErrorContains(t, err, `unknown scenario "chaos": want one of`)
}
