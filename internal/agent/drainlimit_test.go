package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// --drain-timeout against each managed hook's global timeout (Amazon EC2 Auto Scaling API Reference,
// "LifecycleHook": GlobalTimeout is min(100 x HeartbeatTimeout, 172800 s); heartbeats extend the wait only up
// to it). A scale-in drain that never finishes (tasks take 6 h to stop): with a hook whose global timeout is
// shorter than --drain-timeout, the agent caps that hook's drains (status note, one DrainTimeoutCapped alert)
// and completes the action itself before Auto Scaling's global timeout would end it (invariant 4: completed by
// CompleteLifecycleAction, not by a timeout), instead of heartbeating on until the global timeout takes the
// instance. Either way the undrained CONTINUE at the deadline is a DrainDeadline alert.
func TestDrainTimeoutLongerThanTheHooksGlobalTimeoutIsCappedWithANoteAndTheDeadlineIsAnAlert(t *testing.T) {
	for _, tc := range []struct {
		name      string
		heartbeat time.Duration
		// wantBy is when, after the termination began, the agent must have continued the action.
		wantAfter, wantBy time.Duration
		capped            bool
	}{
		// Global timeout 100 x 60 s = 100 min; the cap keeps a tenth of it: 90 min.
		{name: "hook global timeout 100m below drain timeout 3h", heartbeat: time.Minute, wantAfter: 90 * time.Minute, wantBy: 95 * time.Minute, capped: true},
		// Global timeout 100 x 300 s = 8h20m, less a margin of 30 min: --drain-timeout 3h fits.
		{name: "hook global timeout 8h20m above drain timeout 3h", heartbeat: 300 * time.Second, wantAfter: 3 * time.Hour, wantBy: 3*time.Hour + 5*time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2, HeartbeatTimeout: tc.heartbeat}
			spec := oneGroup(&g)
			spec.Policy = model.DefaultPolicy()
			spec.Policy.DrainTimeout = 3 * time.Hour
			spec.Sim.TaskStopStageDelay = 2 * time.Hour // three stop stages: the tasks need 6 h to stop
			w := buildAlerting(t, spec, g)
			ctx := context.Background()
			w.run(t, 30*time.Second)
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
			w.Checker.Baseline[g.Name] = 1
			done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return len(acceptedCompletions(w.World)) == 1 })
			require.NoError(t, err)
			require.True(t, done, "the agent completed the action itself")
			w.run(t, 10*time.Minute)
			require.Empty(t, w.Checker.Finish(), "no action ended by Auto Scaling's global timeout (invariant 4)")

			var completion sim.Completion
			for _, cs := range acceptedCompletions(w.World) {
				completion = cs[0]
			}
			require.Equal(t, sim.ResultContinue, completion.Result)
			require.False(t, completion.Drained, "the tasks were still stopping")
			began := w.Account.Terminations()[0].RequestedAt
			took := completion.At.Sub(began)
			require.GreaterOrEqual(t, took, tc.wantAfter, "drained for as long as the deadline allows")
			require.Less(t, took, tc.wantBy)
			w.Account.Observe(func(v *sim.View) {
				for _, act := range v.LifecycleActions() {
					require.False(t, act.TimedOut, "action %s of %s ended by a timeout", act.Token, act.InstanceID)
				}
			})

			require.Equal(t, 1.0, w.alerts(model.AlertDrainDeadline), "the undrained CONTINUE is an alert")
			deadline := w.notified(t, model.AlertDrainDeadline)
			require.Len(t, deadline, 1)
			require.Contains(t, deadline[0].Detail, completion.InstanceID)
			warning := withoutDeprecationNote(w.Rollout(ctx, g.Name).Warning)
			if !tc.capped {
				require.Empty(t, warning)
				require.Zero(t, w.alerts(model.AlertDrainTimeoutCapped))
				return
			}
			require.Contains(t, warning, "--drain-timeout 3h0m0s is longer than lifecycle hook "+testworld.HookName+" allows", "status note")
			require.Contains(t, warning, "raise its HeartbeatTimeout to at least 2m0s")
			require.Equal(t, 1.0, w.alerts(model.AlertDrainTimeoutCapped), "once, not at every poll")
			require.Len(t, w.notified(t, model.AlertDrainTimeoutCapped), 1)
		})
	}
}
