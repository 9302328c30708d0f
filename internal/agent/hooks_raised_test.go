package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Field case C4, a HeartbeatTimeout raised by a stack update (60 s to 600 s) while a terminating action is
// held: Auto Scaling keeps the action's timeout as the hook had it when the action began (the simulated
// account's model, and a reading of RecordLifecycleActionHeartbeat that the agent cannot rule out), while the
// agent's cache of the group's hooks is read again for the group's next action. The held action must still be
// heartbeated within its 60 s, not at a third of the new 600 s, or it times out and the instance terminates
// undrained.
func TestC4HeartbeatTimeoutRaisedWhileAnActionIsHeldKeepsItsHeartbeatsWithinTheOldTimeout(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 3, HeartbeatTimeout: 60 * time.Second}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 100 * time.Second // three stop stages: the drain takes 300 s
	w := build(t, spec)
	settle(t, w, 30*time.Second)
	first, start := scaleInOne(t, w, g)
	settle(t, w, 20*time.Second) // confirmed and drained on the 60 s hook
	require.Empty(t, completionsOf(w, first))

	require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: testworld.HookName, Transition: sim.TransitionTerminating,
		HeartbeatTimeout: 600 * time.Second, QueueURL: w.QueueURL}))
	g.Desired--
	scaleInOne(t, w, g) // the group's next action: its first look reads the hooks again
	settle(t, w, 15*time.Minute)
	requireKeptAlive(t, w, first, start, 60*time.Second, true)
}

// Field case C4 with a dead owner: the agent dies after a heartbeat of a terminating action on a 60 s hook, a
// stack update then raises the hook's HeartbeatTimeout to 600 s, and a new incarnation with another --owner-id
// starts (it reads the hooks afresh). While the dead owner's claim holds, the new one rescues the action with
// heartbeats at half the timeout the action runs on (60 s, kept on its record), not half the new 600 s; it then
// takes it over, drains it and continues it once.
func TestC4HeartbeatTimeoutRaisedWhileTheOwnerIsDeadStillGetsTheActionRescuedInTime(t *testing.T) {
	hb := 60 * time.Second
	w, instance, start, _, _ := crashWhileWorking(t, hb, crashAfterAHeartbeat)
	require.NoError(t, w.Account.PutLifecycleHook("g", sim.HookSpec{Name: testworld.HookName, Transition: sim.TransitionTerminating,
		HeartbeatTimeout: 600 * time.Second, QueueURL: w.QueueURL}))
	restartAs(w, "incarnation-2")
	done, err := w.RunEvents(context.Background(), 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
	require.NoError(t, err)
	require.True(t, done, "the action is completed")
	requireKeptAlive(t, w, instance, start, hb, true)
}
