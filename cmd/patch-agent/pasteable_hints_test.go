//go:build !nodemo

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// A command a refusal names is a line the user can paste: it carries the store flags the refused command was
// given, so that it acts on the same store.

func TestRollbackRefusedMidRolloutNamesAPasteablePause(t *testing.T) {
	file := demoState(t)
	editRollout(t, file, testworld.GroupName, func(r *state.Rollout) {
		r.Phase, r.Strategy, r.Current = state.PhaseVerifying, model.StrategyRefresh, nil // the refresh ended, not yet verified
	})
	res := run(t, "rollback", testworld.GroupName, "--yes", "--state-file", file)
	require.EqualError(t, res.err, "rollout in progress at Verifying/-: let it finish (or halt) first; to hold it where it is: "+
		"patch-agent pause --group "+testworld.GroupName+" --reason '...' --state-file "+file)
}

func TestApproveOfAGroupWaitingForItsSoakNamesAPasteableSkip(t *testing.T) {
	file := demoState(t)
	editRollout(t, file, testworld.GroupName, func(r *state.Rollout) {
		r.Phase, r.Reason = state.PhaseWaiting, "soak: AMI "+r.TargetImageID+" is 2h0m0s old, minimum 168h0m0s; may start at 2026-12-07T02:00:00Z"
	})
	res := run(t, "approve", testworld.GroupName, "--who", "carol", "--state-file", file)
	require.ErrorContains(t, res.err, "before the soak ends: patch-agent approve "+testworld.GroupName+" --skip-soak --reason '...' --state-file "+file)
}
