package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// A deleted or unresolvable AMI source. The stored status says "source missing: ..." within the tick that
// learns it, one Alerts{SourceMissing} count and one notification fire (not one per tick), nothing rolls while
// it lasts — neither a new rollout nor the new instance refresh that would finish one under way (here after a
// pause cancelled its first) — and a restored parameter is picked up, with one SourceRestored alert.
func TestSourceMissingIsShownAlertedOnceHoldsEverythingAndARestoredParameterIsPickedUp(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// lose makes the source stop naming an AMI; restore brings it back with image.
		lose, restore func(w alertWorld, image string)
		wantReason    string
		// within is how long the status may take to say so.
		within time.Duration
	}{
		{name: "deleted, announced by its Parameter Store Change event",
			lose:       func(w alertWorld, _ string) { w.DeleteAMIParameter(w.g.Parameter) },
			restore:    func(w alertWorld, image string) { w.PublishAMI(w.g.Parameter, image) },
			wantReason: "source missing: parameter /golden/g was deleted", within: tick},
		{name: "deleted without an event (seen by the next poll)",
			lose:       func(w alertWorld, _ string) { w.Account.DeleteParameter(w.g.Parameter) },
			restore:    func(w alertWorld, image string) { w.Account.PutParameter(w.g.Parameter, image) },
			wantReason: "source missing: parameter /golden/g does not exist", within: 10*time.Minute + tick},
		{name: "value that is no AMI id (seen by the next poll)",
			lose:       func(w alertWorld, _ string) { w.Account.PutParameter(w.g.Parameter, "not-an-ami") },
			restore:    func(w alertWorld, image string) { w.Account.PutParameter(w.g.Parameter, image) },
			wantReason: "source missing: parameter /golden/g version", within: 10*time.Minute + tick},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("idle group", func(t *testing.T) {
				g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
				w := buildAlerting(t, oneGroup(&g), g)
				w.run(t, 2*time.Minute)
				require.Equal(t, state.PhaseIdle, w.Rollout(ctx, g.Name).Phase)

				tc.lose(w, "")
				done, err := w.RunUntil(ctx, tick, tc.within, func() bool { return strings.HasPrefix(w.Rollout(ctx, g.Name).Reason, "source missing") })
				require.NoError(t, err)
				require.True(t, done, "status within %s: %+v", tc.within, w.Rollout(ctx, g.Name))
				require.Contains(t, w.Rollout(ctx, g.Name).Reason, tc.wantReason)
				w.run(t, 30*time.Minute) // three more polls
				require.Equal(t, 1.0, w.alerts(model.AlertSourceMissing), "one count per transition, not per tick or poll")
				notes := w.notified(t, model.AlertSourceMissing)
				require.Len(t, notes, 1)
				require.Contains(t, notes[0].Detail, tc.wantReason)
				require.Zero(t, w.Account.Calls()["ec2:CreateLaunchTemplateVersion"], "nothing rolls")

				// Restored with a new AMI: picked up and rolled.
				w.RegisterAMI(testworld.ImageB)
				tc.restore(w, testworld.ImageB)
				done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
				require.NoError(t, err)
				require.True(t, done, "%+v", w.Rollout(ctx, g.Name))
				require.NotContains(t, w.Rollout(ctx, g.Name).Reason, "source")
				requireAllOn(t, w.World, g.Name, testworld.ImageB, 2)
				require.Equal(t, 1.0, w.alerts(model.AlertSourceRestored))
				require.Len(t, w.notified(t, model.AlertSourceRestored), 1)
				require.Equal(t, 1.0, w.alerts(model.AlertSourceMissing))
				require.Empty(t, w.Checker.Finish())
			})
			t.Run("mid-rollout", func(t *testing.T) {
				g := testworld.GroupSetup{Name: "g", Min: 3, Max: 6, Desired: 3}
				w := buildAlerting(t, oneGroup(&g), g)
				w.run(t, 2*time.Minute)
				w.PublishAMI(g.Parameter, testworld.ImageB)
				done, err := w.RunUntil(ctx, tick, time.Hour, func() bool { r := w.Rollout(ctx, g.Name); return midRefresh(r) && r.OnTarget >= 1 })
				require.NoError(t, err)
				require.True(t, done)
				// A pause cancels the refresh; the source goes missing while it lasts; the resume must not
				// start the new refresh that would finish the rollout.
				require.NoError(t, operator.Pause(ctx, w.Store, g.Name, "game day", "bob", time.Time{}, w.Account.Clock().Now()))
				done, err = w.RunUntil(ctx, tick, time.Hour, func() bool {
					return w.Rollout(ctx, g.Name).Phase == state.PhaseWaiting && refreshCalls(w.World, "autoscaling:CancelInstanceRefresh") == 1
				})
				require.NoError(t, err)
				require.True(t, done, "the pause cancels the refresh: %+v", w.Rollout(ctx, g.Name))

				tc.lose(w, testworld.ImageB)
				scheduledTick(w.World)             // the EventBridge schedule: every parameter resolved now, not at the next poll
				w.run(t, tc.within+10*time.Minute) // the source seen missing; what the cancel left in flight ends
				_, err = operator.Resume(ctx, w.Store, g.Name, w.Account.Clock().Now())
				require.NoError(t, err)
				done, err = w.RunUntil(ctx, tick, 30*time.Minute, func() bool { return strings.Contains(w.Rollout(ctx, g.Name).Reason, "source missing") })
				require.NoError(t, err)
				require.True(t, done, "the resumed rollout is held by the missing source: %+v", w.Rollout(ctx, g.Name))
				held := w.Rollout(ctx, g.Name)
				require.True(t, held.Active(), "%+v", held)
				require.Less(t, held.OnTarget, 3, "the rollout is not done")
				launched, terminated := w.Account.LaunchedInstances(g.Name), len(w.Account.Terminations())
				w.run(t, time.Hour)
				r := w.Rollout(ctx, g.Name)
				require.Equal(t, launched, w.Account.LaunchedInstances(g.Name), "nothing launched while the source is missing")
				require.Equal(t, terminated, len(w.Account.Terminations()), "nothing terminated while the source is missing")
				require.Equal(t, 1, refreshCalls(w.World, "autoscaling:StartInstanceRefresh"), "no new refresh while the source is missing")
				require.Contains(t, r.Reason, "source missing: parameter /golden/g") // a poll may say "does not exist" after "was deleted"
				require.Equal(t, 1.0, w.alerts(model.AlertSourceMissing), "one alert per outage, whatever the wording")

				tc.restore(w, testworld.ImageB)
				done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
				require.NoError(t, err)
				require.True(t, done, "%+v", w.Rollout(ctx, g.Name))
				requireAllOn(t, w.World, g.Name, testworld.ImageB, 3)
				require.Equal(t, 2, refreshCalls(w.World, "autoscaling:StartInstanceRefresh"), "a new refresh once the source is back")
				requireNoCapacityWrites(t, w.World, g.Name)
				require.Equal(t, 1.0, w.alerts(model.AlertSourceRestored))
				require.Empty(t, w.Checker.Finish())
			})
		})
	}
}

// scheduledTick puts the EventBridge schedule rule's "Scheduled Event" on the agent's queue: the agent resolves
// every parameter at once.
func scheduledTick(w *testworld.World) {
	now := w.Account.Clock().Now()
	w.Account.SendMessage(w.QueueURL, fmt.Sprintf(`{"version":"0","id":"tick-%d","detail-type":"Scheduled Event","source":"aws.events","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:events:us-east-1:111122223333:rule/patch-agent-schedule"],"detail":{}}`,
		now.UnixNano(), now.UTC().Format(time.RFC3339)))
}
