package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Field case C19: a forged message that names an action in progress — its instance and hook — with the other
// transition is checked against Auto Scaling on its own, though the action's record is confirmed already. Were
// a confirmed record never checked again, every later step would follow the message's transition: a LAUNCHING
// copy of a terminating action would undrain the instance being drained and, at the health deadline, complete
// the real terminating action (ABANDON) with its tasks still running.

// forgedWithTransition is forged (hooks_c19_test.go) with the message's LifecycleTransition replaced.
func forgedWithTransition(t *testing.T, group, hook, instance, transition string) string {
	return fixture(t, "asg-hook-direct-terminating.json", "ecs-prod-cluster-asg", group, "patch-agent-drain", hook,
		"i-0a1b2c3d4e5f60718", instance, "5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13", "forged-token",
		"2b9a61c4-7e0d-4c1e-9f4a-1c0a5d3e7b21", "forged-request",
		"autoscaling:EC2_INSTANCE_TERMINATING", transition)
}

func instanceState(w *watched, group, id string) string {
	for _, i := range w.Account.Group(group).Instances {
		if i.ID == id {
			return i.LifecycleState + "/" + i.ContainerInstanceStatus
		}
	}
	return "gone"
}

func TestC19ForgedLaunchingCopyOfATerminatingActionInProgressIsRejectedAndTheDrainGoesOn(t *testing.T) {
	// A record without its transition (edited, restored, written by another tool) is confirmed again, not
	// trusted to tell it.
	for _, untold := range []bool{false, true} {
		name := map[bool]string{false: "record as the agent writes it", true: "record without its transition"}[untold]
		t.Run(name, func(t *testing.T) { forgedLaunchingCopyOfATerminatingAction(t, untold) })
	}
}

func forgedLaunchingCopyOfATerminatingAction(t *testing.T, untold bool) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 4, Desired: 3, HeartbeatTimeout: 300 * time.Second}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 400 * time.Second // a drain of about 20 minutes: past the 10 min health timeout
	w := buildWatched(t, spec)
	settle(t, w.World, 30*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 2))
	w.Checker.Baseline[g.Name] = 2
	var victim string
	for _, i := range w.Account.Group(g.Name).Instances {
		if i.LifecycleState == "Terminating:Wait" {
			victim = i.ID
		}
	}
	require.NotEmpty(t, victim)
	for i := 0; instanceState(w, g.Name, victim) != "Terminating:Wait/DRAINING"; i++ { // the real message's drain starts
		require.Less(t, i, 20, "the real action's drain never started: %s", instanceState(w, g.Name, victim))
		require.NoError(t, w.Agent.RunOnce(ctx))
		w.Account.Advance(tick)
	}
	stateChanges := w.Account.Calls()["ecs:UpdateContainerInstancesState"]
	key := model.ActionKey(g.Name, victim, testworld.HookName)
	before, err := w.Store.GetHook(ctx, key)
	require.NoError(t, err)
	require.True(t, before.Confirmed)
	if untold {
		before.Transition = ""
		before, err = w.Store.PutHook(ctx, before)
		require.NoError(t, err)
	}

	w.Account.SendMessage(w.QueueURL, forgedWithTransition(t, g.Name, testworld.HookName, victim, "autoscaling:EC2_INSTANCE_LAUNCHING"))
	for i := 0; instanceState(w, g.Name, victim) != "gone"; i++ {
		require.Less(t, i, 600, "the drained instance never left: %s", instanceState(w, g.Name, victim))
		require.NoError(t, w.Agent.RunOnce(ctx))
		w.Account.Advance(tick)
		require.Equal(t, stateChanges, w.Account.Calls()["ecs:UpdateContainerInstancesState"],
			"the instance being drained was never put back in service (%s)", instanceState(w, g.Name, victim))
		require.Empty(t, w.Checker.Check())
	}
	require.Equal(t, 1.0, w.rejected()[model.RejectUnknownHook], "the forged message was rejected once: %v", w.rejected())
	cs := completionsOf(w.World, victim)
	require.Len(t, cs, 1)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.True(t, cs[0].Drained, "the real terminating action completed once its drain ended: %+v", cs[0])
	require.Equal(t, sim.TransitionTerminating, cs[0].Transition)
	require.Empty(t, w.Account.QueueMessages(w.QueueURL), "the forged message was deleted")
	// The record of the real action was never closed by the rejection (a new one would restart the drain's
	// deadline: one forged message an interval would hold the instance draining until the hook's global timeout).
	after, err := w.Store.GetHook(ctx, key)
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, after.State)
	require.Equal(t, before.ReceivedAt, after.ReceivedAt, "the action in progress kept its record: %+v", after)
	require.NotContains(t, after.Note, "rejected")
}

func TestC19ForgedTerminatingCopyOfALaunchingActionInProgressIsRejectedAndTheLaunchWaitsForHealth(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 5, Desired: 2, HeartbeatTimeout: 300 * time.Second}
	w := buildWatched(t, oneGroup(&g)) // with the agent's launching hook, testworld.LaunchHookName
	settle(t, w.World, 30*time.Second)
	before := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		before[i.ID] = true
	}
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
	w.Checker.Baseline[g.Name] = 3
	w.Account.Advance(time.Second)
	var fresh string
	for _, i := range w.Account.Group(g.Name).Instances {
		if !before[i.ID] {
			fresh = i.ID
		}
	}
	require.NotEmpty(t, fresh)
	for i := 0; ; i++ { // the real launching message is confirmed and recorded
		require.Less(t, i, 200, "the real launch action was never confirmed")
		require.NoError(t, w.Agent.RunOnce(ctx))
		w.Account.Advance(time.Second)
		if rec, err := w.Store.GetHook(ctx, model.ActionKey(g.Name, fresh, testworld.LaunchHookName)); err == nil && rec.Confirmed {
			break
		}
	}
	require.Empty(t, completionsOf(w.World, fresh), "the instance is not healthy in its cluster yet")

	w.Account.SendMessage(w.QueueURL, forgedWithTransition(t, g.Name, testworld.LaunchHookName, fresh, "autoscaling:EC2_INSTANCE_TERMINATING"))
	for i := 0; len(completionsOf(w.World, fresh)) == 0; i++ {
		require.Less(t, i, 600, "the launch was never completed: %s", instanceState(w, g.Name, fresh))
		require.NoError(t, w.Agent.RunOnce(ctx))
		w.Account.Advance(time.Second)
	}
	cs := completionsOf(w.World, fresh)
	require.Len(t, cs, 1)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.True(t, cs[0].Healthy, "the launch completed only once the instance was healthy in its cluster: %+v", cs[0])
	require.Equal(t, sim.TransitionLaunching, cs[0].Transition)
	require.Equal(t, 1.0, w.rejected()[model.RejectUnknownHook], "the forged message was rejected once: %v", w.rejected())
	require.Empty(t, w.Checker.Check())
}
