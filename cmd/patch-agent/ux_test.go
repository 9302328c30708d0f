//go:build !nodemo

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// A usage error exits 2 and prints the mistake and one line naming the command's --help; a failure of the
// work itself stays status 1 without the hint.
func TestUsageErrorsExitTwoWithAOneLineHint(t *testing.T) {
	file := demoState(t)
	for _, c := range []struct {
		name     string
		args     []string
		wantCode int
		wantHint string // "" when no hint is due
	}{
		{"unknown flag", []string{"pause", "--nope"}, 2, "Run 'patch-agent pause --help' for usage."},
		{"unknown command", []string{"frobnicate"}, 2, "Run 'patch-agent --help' for the commands."},
		{"missing GROUP", []string{"history", "--state-file", file}, 2, "Run 'patch-agent history --help' for usage."},
		{"too many arguments", []string{"status", "a", "b", "--state-file", file}, 2, "Run 'patch-agent status --help' for usage."},
		{"bad --output", []string{"status", "-o", "yaml", "--state-file", file}, 2, "Run 'patch-agent status --help' for usage."},
		{"no store", []string{"status"}, 2, "Run 'patch-agent status --help' for usage."},
		{"pause without a reason", []string{"pause", "--state-file", file}, 2, "Run 'patch-agent pause --help' for usage."},
		{"bad --until", []string{"pause", "-r", "x", "--until", "tomorrow", "--state-file", file}, 2, "Run 'patch-agent pause --help' for usage."},
		{"unknown scenario", []string{"demo", "--scenario", "nope"}, 2, "Run 'patch-agent demo --help' for usage."},
		{"audit demo with a state file", []string{"demo", "--scenario", "audit", "--state-file", file}, 2, "Run 'patch-agent demo --help' for usage."},
		{"skip-soak without a reason", []string{"approve", "g", "--skip-soak", "--state-file", file}, 2, "Run 'patch-agent approve --help' for usage."},
		{"reason without skip-soak", []string{"approve", "g", "--reason", "x", "--state-file", file}, 2, "Run 'patch-agent approve --help' for usage."},
		{"rollback to a malformed AMI id", []string{"rollback", "g", "--to", "ami-zzz", "--state-file", file}, 2, "Run 'patch-agent rollback --help' for usage."},
		{"eks upgrade without --cluster", []string{"eks", "upgrade", "--to", "1.31", "--state-file", file}, 2, "Run 'patch-agent eks upgrade --help' for usage."},
		{"eks upgrade without --to", []string{"eks", "upgrade", "--cluster", "c", "--state-file", file}, 2, "Run 'patch-agent eks upgrade --help' for usage."},
		{"run with --hook-checks-per-pass 0", append([]string{"run", "--hook-checks-per-pass", "0"}, runArgs...), 2, "Run 'patch-agent run --help' for usage."},
		{"run with --hook-checks-per-pass -3", append([]string{"run", "--hook-checks-per-pass", "-3"}, runArgs...), 2, "Run 'patch-agent run --help' for usage."},
		{"unknown group is no usage error", []string{"pause", "-g", "nosuch", "-r", "x", "--state-file", file}, 1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, c.args...)
			require.Error(t, res.err)
			var stderr bytes.Buffer
			require.Equal(t, c.wantCode, cli.Report(&stderr, res.err))
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			require.True(t, strings.HasPrefix(lines[0], "patch-agent: "), lines[0])
			if c.wantHint == "" {
				require.Len(t, lines, 1, stderr.String())
				return
			}
			require.Equal(t, []string{"patch-agent: " + res.err.Error(), c.wantHint}, lines)
		})
	}
}

// A misspelt --group pauses nothing and fails; the fleet must not roll on because of a typo in a script.
func TestPauseOfAnUnknownGroupFailsAndPausesNothing(t *testing.T) {
	file := demoState(t)
	res := run(t, "pause", "--group", "nosuch", "--reason", "x", "--state-file", file)
	require.ErrorIs(t, res.err, operator.ErrUnknownGroup)
	require.ErrorContains(t, res.err, "nosuch")
	require.ErrorContains(t, res.err, testworld.GroupName, "the error lists the groups the state holds")
	require.Empty(t, res.stdout, "nothing claims to be paused")
	require.Nil(t, status(t, file).Paused)

	res = run(t, "pause", "--group", testworld.GroupName, "--reason", "x", "--state-file", file)
	require.NoError(t, res.err, "a known group is paused")
	require.NotNil(t, status(t, file).Paused)
}

func TestResumeSaysWhenNothingIsPausedAndFailsOnAnUnknownGroup(t *testing.T) {
	file := demoState(t)
	for _, c := range []struct {
		name    string
		args    []string
		wantOut string
		wantErr error
	}{
		{"global, nothing paused", []string{"resume"}, "nothing to resume: the agent is not paused globally\n", nil},
		{"known group, not paused", []string{"resume", "-g", testworld.GroupName}, "nothing to resume: group " + testworld.GroupName + " is not paused\n", nil},
		{"unknown group", []string{"resume", "-g", "nosuch"}, "", operator.ErrUnknownGroup},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, append(c.args, "--state-file", file)...)
			if c.wantErr != nil {
				require.ErrorIs(t, res.err, c.wantErr)
			} else {
				require.NoError(t, res.err)
			}
			require.Equal(t, c.wantOut, res.stdout)
		})
	}
}

// TestRunHookChecksPerPassFlagSaysWhatItBoundsAndItsDefault: `run --hook-checks-per-pass` is the agent's
// Settings.HookChecksPerPass; its --help names what it bounds and its default, agent.DefaultHookChecksPerPass.
func TestRunHookChecksPerPassFlagSaysWhatItBoundsAndItsDefault(t *testing.T) {
	res := run(t, "run", "--help")
	require.NoError(t, res.err)
	line := ""
	for _, l := range strings.Split(res.stdout, "\n") {
		if strings.Contains(l, "--hook-checks-per-pass") {
			line = l
		}
	}
	require.NotEmpty(t, line, res.stdout)
	require.Contains(t, line, "DescribeLifecycleHooks")
	require.Contains(t, line, fmt.Sprintf("(default %d)", agent.DefaultHookChecksPerPass))
	require.Equal(t, agent.DefaultHookChecksPerPass, config.Default().HookChecksPerPass)

	res = run(t, append([]string{"run", "--hook-checks-per-pass", "0"}, runArgs...)...)
	require.EqualError(t, res.err, "--hook-checks-per-pass must be at least 1 (groups whose lifecycle hooks one pass reads), got 0")
}
