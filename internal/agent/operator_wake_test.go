package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// sendOperatorWakeUp puts on the agent's queue the wake-up an operator command sends after its write
// (events.NewOperatorWakeUp): the same body, whoever sends it.
func sendOperatorWakeUp(t *testing.T, w *testworld.World, o events.OperatorWakeUp) {
	t.Helper()
	body, err := events.NewOperatorWakeUp(o, "op-"+o.Action+"-"+o.Group, "us-east-1", "111122223333", w.Account.Clock().Now())
	require.NoError(t, err)
	w.Account.SendMessage(w.QueueURL, string(body))
}

// operatorWorld is one group of 2 instances at the production safety poll (2 minutes, wake-up events on),
// looked at once and then left 20 s after that full pass, so that the next Step is not a safety poll.
func operatorWorld(t *testing.T, tags map[string]string) (*testworld.World, testworld.GroupSetup) {
	t.Helper()
	g := testworld.GroupSetup{Name: "g", Cluster: "c", Parameter: "/golden-ami/g", Min: 2, Max: 3, Desired: 2, Tags: tags}
	spec := oneGroup(&g)
	spec.WakeUpEvents = true
	w := build(t, spec)
	_, err := w.RunEvents(context.Background(), 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	return w, g
}

// stepBetweenPolls moves the clock to 20 s after the last full pass (well before the next safety poll) and
// runs one turn of the loop (testworld.World.RunEvents's step: one receive, then the woken looks); it fails when
// that turn was a full pass.
func stepBetweenPolls(t *testing.T, w *testworld.World) {
	t.Helper()
	last := w.Agent.LastTick()
	if at := last.Add(20 * time.Second); w.Account.Clock().Now().Before(at) {
		w.Account.Advance(at.Sub(w.Account.Clock().Now()))
	}
	_, err := w.Agent.Step(context.Background())
	require.NoError(t, err)
	require.Equal(t, last, w.Agent.LastTick(), "the turn was not a safety poll (whole-fleet pass)")
}

// TestOperatorApproveIsActedOnWithinOneReceiveOfItsWakeUp: a group tagged approval=manual waits for approval;
// `approve` writes the approval and sends its wake-up. The turn of the loop that receives the wake-up starts
// the rollout (a new launch template version), 20 s after the last safety poll, not at the next one. Without
// the wake-up the same turn starts nothing.
func TestOperatorApproveIsActedOnWithinOneReceiveOfItsWakeUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wakeUp bool
	}{{"with the wake-up the rollout starts", true}, {"without it the approval waits for the poll", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			w, g := operatorWorld(t, map[string]string{model.TagApproval: model.ApprovalManual})
			w.PublishAMI(g.Parameter, testworld.ImageB)
			_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return operator.WaitingForApproval(w.Rollout(ctx, g.Name)) })
			require.NoError(t, err)
			require.True(t, operator.WaitingForApproval(w.Rollout(ctx, g.Name)), "%+v", w.Rollout(ctx, g.Name))
			_, err = operator.Approve(ctx, w.Store, g.Name, "", "arn:aws:sts::111122223333:assumed-role/ops/alice", false, w.Account.Clock().Now())
			require.NoError(t, err)
			if tc.wakeUp {
				sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: events.OperatorApprove, Group: g.Name, Who: "arn:aws:sts::111122223333:assumed-role/ops/alice"})
			}
			stepBetweenPolls(t, w)
			r := w.Rollout(ctx, g.Name)
			if !tc.wakeUp {
				require.Equal(t, state.PhaseWaiting, r.Phase, "no look at the group before the safety poll")
				return
			}
			require.NotEqual(t, state.PhaseWaiting, r.Phase, "the approval was acted on in the turn that received the wake-up: %+v", r)
			require.NotEmpty(t, r.NewTemplateVersion, "the rollout prepared its launch template version")
			w.Agent.Consumer.FlushDeletes(ctx) // its delete waits for a batch (events.Consumer.DeleteDeadline)
			visible, inFlight := w.Account.QueueDepth(w.QueueURL)
			require.Zero(t, visible+inFlight, "the wake-up is deleted")
			require.Empty(t, w.Checker.Check())
		})
	}
}

// TestOperatorRollbackIsActedOnWithinOneReceiveOfItsWakeUp: after a completed rollout to ImageB, `rollback`
// points the record back at ImageA and sends its wake-up; the turn that receives it prepares the rollback's
// launch template version and starts its instance refresh, between two safety polls.
func TestOperatorRollbackIsActedOnWithinOneReceiveOfItsWakeUp(t *testing.T) {
	ctx := context.Background()
	w, g := operatorWorld(t, nil)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	done, err := w.RunEvents(ctx, time.Hour, func() bool { return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted })
	require.NoError(t, err)
	require.True(t, done)
	_, err = w.RunEvents(ctx, 3*time.Minute, func() bool { return false })
	require.NoError(t, err)
	r, err := operator.Rollback(ctx, w.Store, g.Name, testworld.ImageA, "alice", false, w.Account.Clock().Now())
	require.NoError(t, err)
	require.Equal(t, state.PhaseDetected, r.Phase)
	starts := refreshCalls(w, "autoscaling:StartInstanceRefresh")
	sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: events.OperatorRollback, Group: g.Name, Who: "alice"})
	stepBetweenPolls(t, w)
	r = w.Rollout(ctx, g.Name)
	require.Equal(t, testworld.ImageA, r.TargetImageID)
	require.NotEqual(t, state.PhaseDetected, r.Phase, "the rollback was acted on in the turn that received the wake-up: %+v", r)
	require.Equal(t, starts+1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "its refresh back to ImageA is started")
	require.NotNil(t, r.Refresh)
	require.NotEmpty(t, r.Refresh.ID, "the rollout follows the refresh it started: %+v", r)
	require.Empty(t, w.Checker.Check())
}

// TestPauseUntilExpiryResumesWithinSecondsOfItsEndWithoutASafetyPoll: a group paused with --until T waits
// paused; the agent, reading the pause before the rollout's first destructive step, sets a timer for T, and
// the rollout prepares its launch template within 2 s after T through a woken look — no whole-fleet pass (safety poll) ran
// between T and the move.
func TestPauseUntilExpiryResumesWithinSecondsOfItsEndWithoutASafetyPoll(t *testing.T) {
	ctx := context.Background()
	w, g := operatorWorld(t, nil)
	// T falls 61 s after a safety poll: the poll before it is a minute early, the one after it a minute late.
	until := w.Agent.LastTick().Add(2*2*time.Minute + 61*time.Second)
	require.NoError(t, operator.Pause(ctx, w.Store, g.Name, "load test", "alice", until, w.Account.Clock().Now()))
	sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: events.OperatorPause, Group: g.Name, Who: "alice"})
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunEvents(ctx, 30*time.Second, func() bool { return false })
	require.NoError(t, err)
	r := w.Rollout(ctx, g.Name)
	require.Contains(t, r.Reason, "paused", "held by the pause: %+v", r)
	require.Empty(t, r.NewTemplateVersion)

	done, err := w.RunEvents(ctx, 10*time.Minute, func() bool { return w.Rollout(ctx, g.Name).NewTemplateVersion != "" })
	require.NoError(t, err)
	require.True(t, done)
	moved := w.Rollout(ctx, g.Name).UpdatedAt
	require.False(t, moved.Before(until), "never before the pause ends")
	require.LessOrEqual(t, moved.Sub(until), 2*time.Second, "the pause's end wakes the group at its time, not at the next safety poll")
	require.True(t, w.Agent.LastTick().Before(until), "no safety poll ran between the pause's end and the move")
	require.Empty(t, w.Checker.Check())
}

// TestForgedOperatorWakeUpForAPausedGroupMakesNoDestructiveStep: a group is paused mid-rollout; operator
// wake-ups claiming a resume, an approval and a rollback (no command wrote any of them) arrive. Each makes the
// agent look at the group — and the look reads the pause lock from the store, which still holds: no refresh,
// no drain, no termination, and the record still says paused. A wake-up for a group the agent does not
// manage is ignored; a malformed one is left on the queue for its dead-letter queue.
func TestForgedOperatorWakeUpForAPausedGroupMakesNoDestructiveStep(t *testing.T) {
	ctx := context.Background()
	w, g := operatorWorld(t, nil)
	require.NoError(t, operator.Pause(ctx, w.Store, g.Name, "incident", "alice", time.Time{}, w.Account.Clock().Now()))
	w.PublishAMI(g.Parameter, testworld.ImageB)
	_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return strings.Contains(w.Rollout(ctx, g.Name).Reason, "paused") })
	require.NoError(t, err)
	require.Contains(t, w.Rollout(ctx, g.Name).Reason, "paused")
	phase := w.Rollout(ctx, g.Name).Phase
	changes := len(w.Account.DesiredChanges(g.Name))
	processed, ignored := w.Agent.Consumer.Stats.Processed.Load(), w.Agent.Consumer.Stats.Ignored.Load()

	for _, action := range []string{events.OperatorResume, events.OperatorApprove, events.OperatorRollback} {
		sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: action, Group: g.Name, Who: "mallory"})
		stepBetweenPolls(t, w)
		r := w.Rollout(ctx, g.Name)
		require.Equal(t, phase, r.Phase, "a forged %s moves nothing: %+v", action, r)
		require.Empty(t, r.NewTemplateVersion, "no launch template version")
		require.Contains(t, r.Reason, "paused", "the look read the pause from the store")
		require.Len(t, w.Account.DesiredChanges(g.Name), changes, "no capacity write after a forged %s", action)
		require.Empty(t, w.Account.Terminations(), "no termination")
	}
	w.Agent.Consumer.FlushDeletes(ctx) // their deletes wait for a batch (events.Consumer.DeleteDeadline)
	require.Equal(t, processed+3, w.Agent.Consumer.Stats.Processed.Load(), "each forged wake-up made one look")
	sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: events.OperatorResume, Group: "someone-elses-asg", Who: "mallory"})
	stepBetweenPolls(t, w)
	w.Agent.Consumer.FlushDeletes(ctx)
	require.Equal(t, ignored+1, w.Agent.Consumer.Stats.Ignored.Load(), "a group the agent does not manage: ignored")
	// Malformed (no action): never deleted, left for the dead-letter queue like every malformed message.
	failed := w.Agent.Consumer.Stats.Failed.Load()
	w.Account.SendMessage(w.QueueURL, `{"version":"0","id":"op-bad","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"group":"g","who":"mallory"}}`)
	stepBetweenPolls(t, w)
	require.Equal(t, failed+1, w.Agent.Consumer.Stats.Failed.Load(), "the malformed wake-up failed")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Equal(t, 1, visible+inFlight, "and stays on the queue, for its redrive to the dead-letter queue")
	require.Len(t, w.Account.DesiredChanges(g.Name), changes)
	require.Empty(t, w.Checker.Check())
}

// TestGlobalResumeWakeUpWakesEveryManagedGroup: under the global pause two groups hold their rollouts; after
// `resume` (the global lock deleted) its wake-up, naming the global scope, makes the turn that receives it look
// at both groups, and both rollouts go on before the next safety poll.
func TestGlobalResumeWakeUpWakesEveryManagedGroup(t *testing.T) {
	ctx := context.Background()
	spec := testworld.Spec{WakeUpEvents: true, Groups: []testworld.GroupSetup{
		{Name: "a", Cluster: "c", Parameter: "/golden-ami/fleet", Min: 1, Max: 2, Desired: 1},
		{Name: "b", Cluster: "c", Parameter: "/golden-ami/fleet", Min: 1, Max: 2, Desired: 1},
	}}
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.NoError(t, operator.Pause(ctx, w.Store, "", "freeze", "alice", time.Time{}, w.Account.Clock().Now()))
	w.PublishAMI("/golden-ami/fleet", testworld.ImageB)
	_, err = w.RunEvents(ctx, 5*time.Minute, func() bool {
		return strings.Contains(w.Rollout(ctx, "a").Reason, "paused") && strings.Contains(w.Rollout(ctx, "b").Reason, "paused")
	})
	require.NoError(t, err)
	for _, g := range []string{"a", "b"} {
		require.Contains(t, w.Rollout(ctx, g).Reason, "paused", g)
	}
	_, resumeErr := operator.Resume(ctx, w.Store, "", w.Account.Clock().Now())
	require.NoError(t, resumeErr)
	sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: events.OperatorResume, Scope: events.OperatorGlobal, Who: "alice"})
	stepBetweenPolls(t, w)
	for _, g := range []string{"a", "b"} {
		require.NotEmpty(t, w.Rollout(ctx, g).NewTemplateVersion, "%s's rollout went on in the turn that received the wake-up", g)
	}
	require.Empty(t, w.Checker.Check())
}
