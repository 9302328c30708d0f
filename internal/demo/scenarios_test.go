package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func TestEveryDemoScenarioEndsAsDescribed(t *testing.T) {
	for _, name := range Scenarios() {
		t.Run(name, func(t *testing.T) {
			store := state.NewMemory()
			var out bytes.Buffer
			s, err := Run(context.Background(), Options{Scenario: name, Store: store, Out: &out})
			require.NoError(t, err)
			require.NotEmpty(t, requireReadableProgress(t, out.String()), "progress lines")
			require.Len(t, s.Groups, 2, "the ECS group and the EKS group")
			require.Zero(t, s.InvariantViolations, s.Violations)
			for _, g := range s.Groups {
				require.Equal(t, s.Expected, g.State, "%s: %s", g.Name, g.Reason)
				r, err := store.GetRollout(context.Background(), g.Name)
				require.NoError(t, err)
				switch name {
				case "soak", "refused-ami": // held before a strategy is chosen
					require.Empty(t, r.Strategy, g.Name)
				default: // the default strategy of a group with both of the agent's hooks
					require.Equal(t, model.StrategyRefresh, r.Strategy, g.Name)
				}
				require.GreaterOrEqual(t, g.MinInServiceDuringRollout, 3, g.Name)
				switch name {
				case "rollout", "crash", "pause", "window", "approval", "alarm-gate":
					require.Equal(t, 3, g.OnTarget, g.Name)
				case "ecs-capacity-provider": // C23: size and spread intact
					require.Equal(t, 3, g.OnTarget, g.Name)
					require.Equal(t, int32(3), g.Desired, g.Name)
					require.Equal(t, 3, g.AvailabilityZones, g.Name)
				case "bad-ami":
					require.Zero(t, g.OnTarget, "%s: every in-service instance still on the old AMI", g.Name)
					require.Contains(t, g.Reason, "ABANDONed by lifecycle hook "+testworld.LaunchHookName+" (not healthy in cluster after 10m0s)", g.Name)
				case "soak":
					require.Contains(t, g.Reason, "may start at", g.Name)
				case "refused-ami":
					require.Zero(t, g.OnTarget, "%s: the refused AMI (C20) runs nowhere", g.Name)
					require.Contains(t, g.Reason, "AMI refused: "+testworld.ImageB+" is owned by 999988887777", g.Name)
					require.Equal(t, 1.0, s.Metrics["AMIRejected{Group="+g.Name+",Platform="+g.Platform+",Reason=OwnerNotAllowed}"], g.Name)
				}
			}
			zoneLines := 0
			for _, l := range joinContinuations(out.String()) {
				if strings.Contains(l, "zones: "+testworld.GroupName+", capacity provider") {
					require.Contains(t, l, "3 instance(s) in 3 zone(s)", "the capacity provider's zones, at the start and the end")
					require.Contains(t, l, "service web: 6 tasks RUNNING")
					zoneLines++
				}
			}
			if name == "ecs-capacity-provider" {
				require.Equal(t, 2, zoneLines, "the zones at the start and at the end")
			} else {
				require.Zero(t, zoneLines, "only a capacity provider's scenario prints its zones")
			}
			if name == "crash" {
				require.Greater(t, s.Restarts, 10)
			}
		})
	}
}

// The approval and alarm-gate scenarios show a gate holding: nothing is replaced before the operator's
// approval (an "approved" entry first) or before the alarm returns to OK, gateHold after detection.
func TestApprovalAndAlarmGateScenariosHoldUntilTheGateOpens(t *testing.T) {
	for _, name := range []string{"approval", "alarm-gate"} {
		t.Run(name, func(t *testing.T) {
			store := state.NewMemory()
			s, err := Run(context.Background(), Options{Scenario: name, Store: store})
			require.NoError(t, err)
			require.Zero(t, s.InvariantViolations, s.Violations)
			for _, g := range s.Groups {
				hist, err := store.History(context.Background(), g.Name)
				require.NoError(t, err)
				at := map[string]time.Time{}
				var events []string
				for _, e := range hist {
					events = append(events, e.Event)
					at[e.Event] = e.At
				}
				require.Contains(t, events, "completed", g.Name)
				require.Greater(t, at["completed"].Sub(at["detected"]), gateHold, "%s: the rollout waited for the gate", g.Name)
				if name == "approval" {
					require.Equal(t, []string{"detected", "approved", "completed"}, events, g.Name)
					require.GreaterOrEqual(t, at["approved"].Sub(at["detected"]), gateHold, g.Name)
				}
			}
		})
	}
}

func TestUnknownScenarioIsAClearError(t *testing.T) {
	_, err := Run(context.Background(), Options{Scenario: "chaos"})
	require.ErrorContains(t, err, `unknown scenario "chaos": want one of`)
}
