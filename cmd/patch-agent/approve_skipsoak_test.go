//go:build !nodemo

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// `patch-agent approve GROUP --skip-soak --reason "..."`. The reason is required, the flags
// are checked before the store is touched, and the skip is recorded for the AMI the group waits for, with a
// soak-skipped history entry.
func TestApproveSkipSoakNeedsAReasonAndRecordsTheSkip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no reason", []string{"--skip-soak"}, "--skip-soak needs --reason"},
		{"blank reason", []string{"--skip-soak", "--reason", "  "}, "--skip-soak needs --reason"},
		{"reason without skip-soak", []string{"--reason", "x"}, "--reason goes with --skip-soak"},
		{"with force", []string{"--skip-soak", "--reason", "x", "--force"}, "exclusive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := demoState(t)
			before := readFile(t, file)
			res := run(t, append([]string{"approve", testworld.GroupName, "--state-file", file}, tc.args...)...)
			require.ErrorContains(t, res.err, tc.wantErr)
			require.Equal(t, before, readFile(t, file), "nothing written")
		})
	}
	t.Run("waiting for its soak", func(t *testing.T) {
		file := demoState(t)
		editRollout(t, file, testworld.GroupName, func(r *state.Rollout) {
			r.Phase, r.Reason = state.PhaseWaiting, "soak: AMI "+r.TargetImageID+" is 2h0m0s old, minimum 168h0m0s; may start at 2026-12-07T02:00:00Z"
		})
		res := run(t, "approve", testworld.GroupName, "--skip-soak", "--reason", "CVE-2026-1234 fix", "--who", "carol", "--state-file", file)
		require.NoError(t, res.err, res.stderr)
		require.Contains(t, res.stdout, "Soak skipped (CVE-2026-1234 fix)")
		mem, err := cli.LoadSnapshot(file)
		require.NoError(t, err)
		r, err := mem.GetRollout(context.Background(), testworld.GroupName)
		require.NoError(t, err)
		require.Equal(t, r.TargetImageID, r.SkipSoakImage)
		require.Equal(t, "CVE-2026-1234 fix", r.SkipSoakReason)
		h, err := mem.History(context.Background(), testworld.GroupName)
		require.NoError(t, err)
		require.Equal(t, operator.HistorySoakSkipped, h[len(h)-1].Event)
		require.Equal(t, "by carol: CVE-2026-1234 fix", h[len(h)-1].Detail)
	})
	t.Run("not waiting for its soak", func(t *testing.T) {
		file := demoState(t) // the demo's rollout completed
		res := run(t, "approve", testworld.GroupName, "--skip-soak", "--reason", "x", "--who", "carol", "--state-file", file)
		require.ErrorContains(t, res.err, "is not waiting for its soak or approval")
	})
}
