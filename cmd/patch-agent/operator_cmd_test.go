//go:build !nodemo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// result is what one run of the CLI printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// runCtx executes the root command with args, standard input in (not a terminal) and ctx.
func runCtx(t *testing.T, ctx context.Context, in string, args ...string) result {
	t.Helper()
	// The store flags default from the environment; a developer's PATCH_AGENT_TABLE must not leak in.
	t.Setenv(config.EnvTable, "")
	t.Setenv(config.EnvRegion, "")
	t.Setenv(config.EnvQueueURL, "") // nor a queue to wake: the wake-up tests name theirs
	t.Setenv(config.EnvWakeUpQueueURL, "")
	t.Setenv("USER", "tester")
	root := newRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(strings.NewReader(in))
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(ctx)
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	return runCtx(t, context.Background(), "", args...)
}

// demoState runs `patch-agent demo --json --state-file` and returns the state file it wrote.
func demoState(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "demo.json")
	res := run(t, "demo", "-o", "json", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	var s testworld.Summary
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &s), "--json prints only the summary")
	require.FileExists(t, file)
	return file
}

func status(t *testing.T, file string) operator.StatusRow {
	t.Helper()
	res := run(t, "status", "--state-file", file, "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc operator.StatusDocument
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, operator.SchemaVersion, doc.SchemaVersion)
	rows := doc.Groups
	require.NotEmpty(t, rows)
	if len(rows) == 1 {
		return rows[0]
	}
	for _, r := range rows { // the demo's state: its ECS group and its EKS group
		if r.Group == testworld.GroupName {
			return r
		}
	}
	t.Fatalf("no status row for %s: %+v", testworld.GroupName, rows)
	return operator.StatusRow{}
}

func TestStatusOfTheDemoStateShowsTheGroupCompleted(t *testing.T) {
	row := status(t, demoState(t))
	require.Equal(t, testworld.GroupName, row.Group)
	require.Equal(t, state.PhaseCompleted, row.Phase)
	require.Equal(t, testworld.ImageB, row.TargetImageID)
	require.Equal(t, testworld.ImageA, row.PreviousImageID)
	require.Equal(t, 3, row.Instances)
	require.Equal(t, 3, row.OnTarget)
	require.Zero(t, row.Other)
	require.Nil(t, row.Paused)
}

func TestStatusTable(t *testing.T) {
	file := demoState(t)
	for _, args := range [][]string{{"status"}, {"status", testworld.GroupName}} {
		res := run(t, append(args, "--state-file", file)...)
		require.NoError(t, res.err)
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		want := 3 // header, the demo's ECS group and its EKS group
		if len(args) > 1 {
			want = 2 // header and the named group
		}
		require.Len(t, lines, want, res.stdout)
		require.True(t, strings.HasPrefix(lines[0], "GROUP "), lines[0])
		require.Contains(t, lines[1], "Completed")
		require.Contains(t, lines[1], "3/3")
	}
}

func TestHistoryOfTheDemoState(t *testing.T) {
	file := demoState(t)
	res := run(t, "history", testworld.GroupName, "--state-file", file, "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc operator.HistoryDocument
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	hist := doc.Entries
	var events []string
	for _, e := range hist {
		events = append(events, e.Event)
	}
	require.Equal(t, []string{"detected", "completed"}, events)
	require.Equal(t, testworld.ImageB, hist[1].NewImageID)

	res = run(t, "history", testworld.GroupName, "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "completed")
	require.Contains(t, res.stdout, "3 instance(s) on the target AMI")
	res = run(t, "history", testworld.GroupName, "-o", "wide", "--state-file", file)
	require.NoError(t, res.err)
	require.Regexp(t, `/golden-ami/ecs/al2023 \(version 2\)  3 instance\(s\) on the target AMI, replaced by instance refresh [0-9a-f-]{36}\n`, res.stdout)
}

func TestPauseThenStatusShowsPausedAndResumeClearsIt(t *testing.T) {
	file := demoState(t)
	res := run(t, "pause", "--reason", "x", "--until", "2h", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "paused global by tester@")

	row := status(t, file)
	require.NotNil(t, row.Paused)
	require.Equal(t, "global", row.Paused.Scope)
	require.Equal(t, "x", row.Paused.Reason)
	require.WithinDuration(t, time.Now().Add(2*time.Hour), row.Paused.Until, time.Minute)

	res = run(t, "resume", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "resumed global")
	require.Nil(t, status(t, file).Paused)

	res = run(t, "resume", "--state-file", file)
	require.NoError(t, res.err, "resuming what is not paused is no failure")
	require.Contains(t, res.stdout, "nothing to resume: the agent is not paused globally")
}

func TestPauseOfOneGroup(t *testing.T) {
	file := demoState(t)
	res := run(t, "pause", "--group", testworld.GroupName, "--reason", "game day", "--who", "bob", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Equal(t, &operator.PauseInfo{Scope: "group " + testworld.GroupName, Who: "bob", Reason: "game day",
		Since: status(t, file).Paused.Since}, status(t, file).Paused)

	res = run(t, "resume", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "nothing to resume: the agent is not paused globally", "a group pause is not the global one")
	res = run(t, "resume", "--group", testworld.GroupName, "--state-file", file)
	require.NoError(t, res.err)
	require.Nil(t, status(t, file).Paused)
}

func TestRollbackWithYesTargetsThePreviousAMI(t *testing.T) {
	file := demoState(t)
	res := run(t, "rollback", testworld.GroupName, "--yes", "--who", "alice", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, testworld.ImageB+" -> "+testworld.ImageA)
	require.Contains(t, res.stdout, "3 of the group's 3 instance(s)")

	row := status(t, file)
	require.Equal(t, state.PhaseDetected, row.Phase)
	require.Equal(t, testworld.ImageA, row.TargetImageID)
	require.Equal(t, testworld.ImageB, row.PreviousImageID)

	res = run(t, "history", testworld.GroupName, "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "manual-rollback")
	require.Contains(t, res.stdout, "alice")

	res = run(t, "rollback", testworld.GroupName, "--yes", "--state-file", file)
	require.ErrorContains(t, res.err, "rollout in progress at Detected/-", "a second rollback while the first runs")
}

func TestRollbackWithoutYesOffATerminalIsRefusedAndWritesNothing(t *testing.T) {
	file := demoState(t)
	before, err := os.ReadFile(file)
	require.NoError(t, err)
	res := runCtx(t, context.Background(), "yes\n", "rollback", testworld.GroupName, "--state-file", file)
	require.ErrorContains(t, res.err, "standard input is not a terminal; pass --yes")
	require.Contains(t, res.stdout, testworld.ImageB+" -> "+testworld.ImageA, "the plan is shown")
	after, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after))
}

func TestApprove(t *testing.T) {
	file := demoState(t)
	waitForApproval(t, file, testworld.GroupName)
	res := run(t, "approve", testworld.GroupName, "--who", "carol", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "approved "+testworld.ImageB+" for "+testworld.GroupName+" by carol")
	mem, err := cli.LoadSnapshot(file)
	require.NoError(t, err)
	r, err := mem.GetRollout(context.Background(), testworld.GroupName)
	require.NoError(t, err)
	require.Equal(t, testworld.ImageB, r.ApprovedImage)
	require.Equal(t, "carol", r.ApprovedBy)
}

func TestStatusWatchStopsCleanlyOnCancel(t *testing.T) {
	file := demoState(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	res := runCtx(t, ctx, "", "status", "--watch", "--interval", "1s", "--state-file", file)
	require.NoError(t, res.err)
	require.Less(t, time.Since(began), 2*time.Second)
	require.Equal(t, 1, strings.Count(res.stdout, "GROUP "), res.stdout)
	require.NotContains(t, res.stdout, "\x1b[", "no escape codes when stdout is not a terminal")
	require.Contains(t, res.stdout, "Ctrl-C to stop")
}

func TestCommandErrors(t *testing.T) {
	file := demoState(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"pause without a reason", []string{"pause", "--state-file", file}, "--reason is required"},
		{"pause until the past", []string{"pause", "--reason", "x", "--until", "2020-01-01T00:00:00Z", "--state-file", file}, "is not in the future"},
		{"pause until nonsense", []string{"pause", "--reason", "x", "--until", "tomorrow", "--state-file", file}, `--until "tomorrow": want an RFC 3339 time`},
		{"no store", []string{"status"}, "no store given: pass --table NAME"},
		{"both stores", []string{"status", "--table", "t", "--state-file", file}, "--table and --state-file are exclusive"},
		{"missing state file", []string{"status", "--state-file", filepath.Join(t.TempDir(), "nope.json")}, "does not exist: write one with `patch-agent demo --state-file"},
		{"unknown group", []string{"status", "nope", "--state-file", file}, "no such Auto Scaling group named nope in state file " + file + "; state file " + file + " holds rollout records of: demo-ecs-asg, demo-eks-nodes"},
		{"bad output", []string{"status", "--output", "yaml", "--state-file", file}, `invalid argument "yaml" for "-o, --output" flag: want table, wide, json or csv`},
		{"history needs a group", []string{"history", "--state-file", file}, "GROUP is required: the Auto Scaling group name (see patch-agent status)"},
		{"rollback to the current AMI", []string{"rollback", testworld.GroupName, "--to", testworld.ImageB, "--yes", "--state-file", file}, "already targets"},
		{"approve an unknown group", []string{"approve", "nope", "--state-file", file}, "no such Auto Scaling group named nope in state file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, tc.args...)
			require.ErrorContains(t, res.err, tc.want)
		})
	}
}

func TestPauseUntilThePastIsAUsageErrorInEitherForm(t *testing.T) {
	file := demoState(t)
	for _, until := range []string{"2025-01-01T00:00:00Z", "-2h"} {
		res := run(t, "pause", "--reason", "x", "--until", until, "--state-file", file)
		require.Error(t, res.err, until)
		require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err), "--until %s: %v", until, res.err)
	}
	require.Empty(t, run(t, "status", "--state-file", file, "-o", "json").stderr)
	require.NotContains(t, run(t, "status", "--state-file", file).stdout, "global", "nothing was paused")
}

func TestAStateFileThatIsEmptyOrNotASnapshotIsNamedWithWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"empty", "", "state file %s is empty: it holds no state snapshot; `patch-agent demo --state-file %[1]s` writes one"},
		{"blank", "\n  \n", "state file %s is empty: it holds no state snapshot; `patch-agent demo --state-file %[1]s` writes one"},
		{"not JSON", "hello\n", "state file %s is not JSON: line 1, column 1: invalid character 'h' looking for beginning of value"},
		{"truncated", "{\n  \"format\": \"patch-agent", "state file %s ends inside its JSON (line 2): the file is cut short"},
		{"a JSON array", "[1, 2]\n", "state file %s is not a state snapshot: line 1, column 1: a JSON array where an object belongs"},
		{"a field of the wrong type", "{\n  \"format\": 1\n}\n", "state file %s is not a state snapshot: line 2, column 13: field format holds a JSON number where a string belongs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			require.NoError(t, os.WriteFile(file, []byte(tc.content), 0o600))
			for _, args := range [][]string{{"status"}, {"history", "g"}, {"pause", "--reason", "r"}} {
				res := run(t, append(args, "--state-file", file)...)
				require.Equal(t, 1, cli.Report(io.Discard, res.err), "%v: %v", args, res.err)
				require.EqualError(t, res.err, fmt.Sprintf(tc.want, file), args)
			}
		})
	}
}

func TestHelpTeachesWithExamples(t *testing.T) {
	for _, c := range []string{"status", "history", "pause", "resume", "approve", "rollback"} {
		t.Run(c, func(t *testing.T) {
			res := run(t, c, "--help")
			require.NoError(t, res.err)
			require.Contains(t, res.stdout, "Examples:")
			require.Contains(t, res.stdout, "--state-file")
			require.Contains(t, res.stdout, "--table")
		})
	}
}

func TestTableWithoutRegionIsAUsageErrorNamingTheFlagAndTheHelp(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	for _, tc := range []struct {
		args []string
		what string
	}{
		{[]string{"status", "--table", "patch-agent"}, "the region of table patch-agent"},
		{[]string{"history", "g", "--table", "patch-agent"}, "the region of table patch-agent"},
		{[]string{"audit"}, "the region whose Auto Scaling groups to audit"},
	} {
		res := run(t, tc.args...)
		var stderr strings.Builder
		require.Equal(t, cli.ExitUsage, cli.Report(&stderr, res.err), "%v: %v", tc.args, res.err)
		require.Equal(t, "patch-agent: --region (or AWS_REGION, or the region of the --profile) is required: "+tc.what+"\n"+
			"Run 'patch-agent "+tc.args[0]+" --help' for usage.\n", stderr.String())
	}
}

// The rollback of a rollout an older agent left mid-replacement (halted by this one) says what that agent may
// have left in the group, and rolls the group by instance refresh.
func TestRollbackOfAnOlderAgentsHaltedReplacementSaysWhatToCheck(t *testing.T) {
	ctx := context.Background()
	mem := state.NewMemory()
	cur := &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-old"}
	_, err := mem.PutRollout(ctx, state.Rollout{Group: "g", Platform: "ecs", Phase: state.PhaseHalted, Strategy: "surge",
		Reason:        "failed: " + engine.OlderEngineReason("g", "surge", cur),
		TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA, Instances: 4, OnTarget: 1, Current: cur})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "halted.json")
	require.NoError(t, cli.SaveSnapshot(file, mem))

	res := run(t, "rollback", "g", "--yes", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "Rollback of g (now Halted): "+testworld.ImageB+" -> "+testworld.ImageA)
	require.Contains(t, res.stdout, "an instance refresh to a launch template version with "+testworld.ImageA)
	require.Contains(t, res.stdout, "note: an older patch-agent left its replacement of i-old at step Draining: check the group's desired capacity and MaxSize")
	row := status(t, file)
	require.Equal(t, state.PhaseDetected, row.Phase)
	require.Nil(t, row.CurrentInstance)
	require.Empty(t, row.Reason)

	// A halted rollout of this agent's (an instance refresh) has no such note.
	mem = state.NewMemory()
	_, err = mem.PutRollout(ctx, state.Rollout{Group: "g", Platform: "ecs", Phase: state.PhaseHalted, Strategy: model.StrategyRefresh,
		Reason:        "failed: instance refresh ir-1 failed: Instance refresh failed: replacement instances did not become healthy within 1 hour.",
		TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA, Instances: 4, OnTarget: 1, Current: &state.Replacement{Step: state.StepInstanceRefresh},
		Refresh: &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", ID: "ir-1", Status: "Failed"}})
	require.NoError(t, err)
	require.NoError(t, cli.SaveSnapshot(file, mem))
	res = run(t, "rollback", "g", "--yes", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.NotContains(t, res.stdout, "older patch-agent")
}

// A second pause of a scope already paused never silently replaces the first (an --until pause would end
// earlier or later than planned): it is refused with exit 1 naming the pause in place, nothing written; with
// --replace it replaces it. The pause's since is stored at second precision.
func TestSecondPauseOfTheSameScopeIsRefusedUnlessReplace(t *testing.T) {
	file := demoState(t)
	res := run(t, "pause", "--group", testworld.GroupName, "--reason", "load test", "--who", "alice", "--until", "2h", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	first := status(t, file).Paused
	require.NotNil(t, first)
	require.Equal(t, first.Since.Truncate(time.Second), first.Since, "since at second precision")

	res = run(t, "pause", "--group", testworld.GroupName, "--reason", "freeze", "--who", "bob", "--state-file", file)
	require.Error(t, res.err)
	var stderr strings.Builder
	require.Equal(t, 1, cli.Report(&stderr, res.err), "an error of the work, not a usage error: exit 1")
	require.NotContains(t, stderr.String(), "--help", "the command was called right: no usage hint")
	require.ErrorIs(t, res.err, operator.ErrAlreadyPaused)
	require.ErrorContains(t, res.err, "group "+testworld.GroupName+" is already paused by alice since ")
	require.ErrorContains(t, res.err, "load test; pass --replace to replace it")
	require.Equal(t, first, status(t, file).Paused, "the first pause is untouched")

	res = run(t, "pause", "--reason", "incident", "--who", "carol", "--state-file", file)
	require.NoError(t, res.err, "another scope (global) is no replacement")

	res = run(t, "pause", "--group", testworld.GroupName, "--reason", "freeze", "--who", "bob", "--replace", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	locks := readLocks(t, file)
	require.Len(t, locks, 2)
	for _, l := range locks {
		if l.Group == testworld.GroupName {
			require.Equal(t, "freeze", l.Reason)
			require.True(t, l.Until.IsZero(), "replaced whole, --until included")
		}
	}
}

// readLocks returns the pause locks of a state file.
func readLocks(t *testing.T, file string) []state.Lock {
	t.Helper()
	mem, err := cli.LoadSnapshot(file)
	require.NoError(t, err)
	locks, err := mem.ListLocks(context.Background())
	require.NoError(t, err)
	return locks
}

// TestManagedNodegroupRollbackCommandRecordsTheUpdateBackToThePreviousRelease: `patch-agent rollback
// nodegroup/<cluster>/<name> --yes` after the managed-node-group demo prints the plan (release to release, EKS
// replaces the nodes) and leaves the record at RollingBack/NodegroupUpdate with a token for the agent to send;
// --to is refused for a node group.
func TestManagedNodegroupRollbackCommandRecordsTheUpdateBackToThePreviousRelease(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mng.json")
	res := run(t, "demo", "--scenario", demo.ManagedNodegroupScenario, "-o", "json", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	key := model.NodegroupKey(demo.MNGCluster, demo.MNGName)

	res = run(t, "rollback", key, "--to", demo.MNGImageOld, "--yes", "--who", "alice", "--state-file", file)
	require.ErrorContains(t, res.err, "not to an AMI")

	res = run(t, "rollback", key, "--yes", "--who", "alice", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "release "+demo.MNGReleaseNew+" -> release "+demo.MNGReleaseOld)
	require.Contains(t, res.stdout, "one UpdateNodegroupVersion")
	require.Contains(t, res.stdout, "the agent drains nothing")
	require.Contains(t, res.stdout, "now targets release "+demo.MNGReleaseOld)

	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	s, err := state.LoadMemory(f)
	require.NoError(t, err)
	r, err := s.GetRollout(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, state.Position{Phase: state.PhaseRollingBack, Step: state.StepNodegroupUpdate}, state.PositionOf(r))
	require.NotEmpty(t, r.Nodegroup.UpdateToken)
	require.Empty(t, r.Nodegroup.UpdateID)

	res = run(t, "rollback", key, "--yes", "--who", "alice", "--state-file", file)
	require.ErrorContains(t, res.err, "from Completed or Halted/NodegroupUpdate only", "a second rollback while the first runs")
}

// `patch-agent rollback` in the middle of an instance refresh is recorded (no "let it finish first"): the plan
// names the refresh and the launch template version the group goes back to.
func TestRollbackInTheMiddleOfAnInstanceRefreshIsRecorded(t *testing.T) {
	ctx := context.Background()
	mem := state.NewMemory()
	_, err := mem.PutRollout(ctx, state.Rollout{Group: "g", Platform: "ecs", Phase: state.PhaseReplacing, Strategy: "refresh",
		TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA, Instances: 10, OnTarget: 4,
		Current: &state.Replacement{Step: state.StepInstanceRefresh},
		Refresh: &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", ID: "ir-1", Status: "InProgress"}})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "refresh.json")
	require.NoError(t, cli.SaveSnapshot(file, mem))

	res := run(t, "rollback", "g", "--yes", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "the agent rolls instance refresh ir-1 (InProgress) back now")
	require.Contains(t, res.stdout, "else a refresh to launch template version 2")
	require.Equal(t, state.PhaseRollingBack, status(t, file).Phase)
}
