//go:build !nodemo

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func TestRetryOfARolledBackGroupRearmsItAndAHaltedOneIsToldToRollBackFirst(t *testing.T) {
	ctx := context.Background()
	mem := state.NewMemory()
	_, err := mem.PutRollout(ctx, state.Rollout{Group: "web", Platform: "ecs", Phase: state.PhaseRolledBack,
		Reason: "rolled back after: replacement i-1 not healthy after 10m0s", TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA})
	require.NoError(t, err)
	_, err = mem.PutRollout(ctx, state.Rollout{Group: "api", Platform: "ecs", Phase: state.PhaseHalted, Reason: "failed: drain timed out",
		TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, cli.SaveSnapshot(file, mem))

	res := run(t, "retry", "web", "--state-file", file, "--who", "alice")
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "retry of "+testworld.ImageB+" for web recorded by alice")
	before := readFile(t, file)
	res = run(t, "retry", "web", "--state-file", file, "--who", "bob")
	require.NoError(t, res.err, "a second retry succeeds: the first one stands")
	require.Contains(t, res.stdout, "a retry of web is already requested (retry of "+testworld.ImageB+" requested by alice: ")
	require.Contains(t, res.stdout, "nothing written")
	require.Equal(t, before, readFile(t, file), "a second retry changes nothing")
	res = run(t, "retry", "web", "--state-file", file, "--who", "bob", "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc struct {
		Retried          string
		AlreadyRequested bool
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, testworld.ImageB, doc.Retried)
	require.True(t, doc.AlreadyRequested)
	res = run(t, "history", "web", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Equal(t, 1, strings.Count(res.stdout, "retried"))

	res = run(t, "retry", "api", "--state-file", file, "--who", "alice")
	require.ErrorContains(t, res.err, "roll it back first (`patch-agent rollback api`)")
	require.Equal(t, 1, exitCode(t, res.err), "a refusal is an error, not a usage error")
}

// A rollback in the middle of an instance refresh says where the group goes (the previous AMI), not the AMI
// the record still targets while the rollback runs; so does its JSON document.
func TestRollbackMidRefreshNamesThePreviousAMI(t *testing.T) {
	ctx := context.Background()
	mem := state.NewMemory()
	_, err := mem.PutRollout(ctx, state.Rollout{Group: "web", Platform: "ecs", Phase: state.PhaseReplacing, Strategy: "refresh",
		TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA, Instances: 4, OnTarget: 1,
		Current: &state.Replacement{Step: state.StepInstanceRefresh},
		Refresh: &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", ID: "ir-1", Status: "InProgress"}})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "state.json")
	require.NoError(t, cli.SaveSnapshot(file, mem))
	res := run(t, "rollback", "web", "--yes", "--state-file", file, "--who", "alice", "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc struct{ From, To, Phase string }
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, testworld.ImageB, doc.From)
	require.Equal(t, testworld.ImageA, doc.To)
	require.Equal(t, "RollingBack", doc.Phase)
	require.Contains(t, res.stderr, "now targets "+testworld.ImageA)
}
