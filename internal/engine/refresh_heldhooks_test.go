package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A refresh intent held (a pause) while a stack update deletes the agent's terminating hook is not started
// once the hold ends: a read of the group's hooks since the intent was recorded lacks the hook, and a refresh
// started then lets Auto Scaling terminate old instances undrained until the next look cancels it. The intent
// waits, naming the missing hook, and starts once a later read finds the hook back.
func TestHeldRefreshIntentIsNotStartedOnceTheGroupLostTheAgentsHook(t *testing.T) {
	rg, f := heldIntent(t)
	launchOnly := []model.GroupHook{{Name: "patch-agent-launch", Transition: model.TransitionLaunching}}
	both := append([]model.GroupHook{{Name: "patch-agent-drain", Transition: model.TransitionTerminating}}, launchOnly...)
	hooks, readAt := launchOnly, rg.clock.Now() // read during the hold, after the intent
	rg.o.KnownHooks = func(string) ([]model.GroupHook, time.Time, bool) { return hooks, readAt, true }

	stored := reconcileFor(t, rg, 5*time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
	require.Empty(t, f.starts, "no instance refresh while the group lacks the agent's terminating hook")
	require.Zero(t, f.cancels)
	require.Contains(t, stored.Reason, "lifecycle hook", stored.Reason)
	require.NotEqual(t, state.PhaseHalted, stored.Phase, stored.Reason)

	hooks, readAt = both, rg.clock.Now()
	reconcileFor(t, rg, 2*time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
	require.Len(t, f.starts, 1, "the intent starts once the hook is back")
}

// The start reads the group's hooks a call before it records the intent: a read in between that lacks the
// agent's terminating hook (a stack update deleted it after the start's read) holds the intent as well. The
// bound is the start's own read (HooksReadAt), not the intent's time.
func TestRefreshIntentIsNotStartedWhenTheHookWentBetweenTheStartsReadAndTheIntent(t *testing.T) {
	rg, f := refreshRig()
	rec := refreshing("") // intent written a minute ago
	rec.Refresh.HooksReadAt = now0.Add(-2 * time.Minute)
	rg.seed0(rec)
	launchOnly := []model.GroupHook{{Name: "patch-agent-launch", Transition: model.TransitionLaunching}}
	rg.o.KnownHooks = func(string) ([]model.GroupHook, time.Time, bool) {
		return launchOnly, now0.Add(-90 * time.Second), true
	}

	stored := reconcileFor(t, rg, time.Minute, func() model.Inputs { return model.Inputs{View: oldFleet(), AMI: newAMI()} })
	require.Empty(t, f.starts, "no instance refresh while the group lacks the agent's terminating hook")
	require.Contains(t, stored.Reason, "no terminating lifecycle hook", stored.Reason)
}
