package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A replacement that cannot launch for lack of EC2 capacity (a failed scaling activity whose StatusMessage says
// InsufficientInstanceCapacity, or a Spot shortfall) is not a bad AMI: the rollout neither halts nor rolls
// back; it keeps its surge while Auto Scaling retries, reads the scaling activities again after a growing
// health window (10 min, 15 min, 22.5 min, ...), says why on the status and alerts once per retry. Once
// capacity is back the rollout completes on the new AMI.
func TestLaunchShortOfCapacityIsRetriedWithBackoffNotRolledBack(t *testing.T) {
	for _, tc := range []struct {
		name      string
		shortfall sim.Shortfall
		want      string
	}{
		{"on-demand InsufficientInstanceCapacity", sim.Shortfall{}, "We currently do not have sufficient"},
		{"spot shortfall", sim.Shortfall{Spot: true}, "There is no Spot capacity available"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := demo.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
			w := buildAlerting(t, oneGroup(&g), g)
			ctx := context.Background()
			w.run(t, time.Minute)
			w.Account.SetLaunchShortfall(g.Name, tc.shortfall)
			w.Account.ResetCalls()
			w.PublishAMI(g.Parameter, demo.ImageB)
			w.run(t, 45*time.Minute)

			r := w.Rollout(ctx, g.Name)
			require.Equal(t, state.PhaseReplacing, r.Phase, "not halted, not rolled back: %s", r.Reason)
			require.NotNil(t, r.Current)
			require.Equal(t, state.StepReplacementHealthy, r.Current.Step, "the surge stays while Auto Scaling retries")
			require.Contains(t, r.Reason, "launch short of EC2 capacity (retry 2")
			require.Contains(t, r.Reason, tc.want)
			require.Greater(t, w.Account.FailedLaunches(g.Name), 10, "Auto Scaling kept trying")
			require.Equal(t, 2.0, w.alerts(lifecycle.AlertLaunchCapacity), "one alert per retry (at 10 and 25 minutes)")
			notes := w.notified(t, lifecycle.AlertLaunchCapacity)
			require.Len(t, notes, 2)
			require.Contains(t, notes[0].Detail, tc.want)
			require.Equal(t, demo.ImageB, notes[0].ImageID)
			require.LessOrEqual(t, w.Account.Calls()["autoscaling:DescribeScalingActivities"], 2, "read at the end of each health window, not every tick")
			require.Zero(t, w.Account.Calls()["autoscaling:TerminateInstanceInAutoScalingGroup"], "nothing drained or terminated")
			requireAllOn(t, w.World, g.Name, demo.ImageA, 2)

			w.Account.ClearLaunchShortfall(g.Name)
			done, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return !w.Rollout(ctx, g.Name).Active() })
			require.NoError(t, err)
			require.True(t, done)
			r = w.Rollout(ctx, g.Name)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			requireAllOn(t, w.World, g.Name, demo.ImageB, 2)
			w.run(t, time.Minute)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// A launch that fails for another reason than capacity is still a failure of the rollout: it halts and rolls
// back at the health deadline as before (IsCapacityFailure matches only capacity messages).
func TestCapacityFailureMessagesAreToldFromOtherLaunchFailures(t *testing.T) {
	for msg, want := range map[string]bool{
		"We currently do not have sufficient m5.large capacity in the Availability Zone you requested (us-east-1a). Launching EC2 instance failed.": true,
		"Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches your request.":            true,
		"Could not launch On-Demand Instances. UnfulfillableCapacity - Unable to fulfill capacity due to your request configuration.":               true,
		"Launching EC2 instance failed. InsufficientCapacity":                                                                                       true,
		"The image id '[ami-0b1b2b3b4b5b6b7b8]' does not exist. Launching EC2 instance failed.":                                                     false,
		"Invalid IamInstanceProfile name. Launching EC2 instance failed.":                                                                           false,
		"You have requested more vCPU capacity than your current vCPU limit of 32 allows. Launching EC2 instance failed.":                           false,
	} {
		require.Equal(t, want, lifecycle.IsCapacityFailure(msg), msg)
	}
}
