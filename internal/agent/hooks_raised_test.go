package agent_test

import (
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
