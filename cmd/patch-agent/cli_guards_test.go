//go:build !nodemo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/buildinfo"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// runIn executes the root command with args, standard input in and ctx (see runCtx).
func runIn(t *testing.T, ctx context.Context, in io.Reader, args ...string) result {
	t.Helper()
	t.Setenv(config.EnvTable, "")
	t.Setenv(config.EnvRegion, "")
	t.Setenv("USER", "tester")
	root := newRootCommand()
	var stdout, stderr bytes.Buffer
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(ctx)
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

// onTerminal makes rollback believe its standard input is a terminal for the test.
func onTerminal(t *testing.T) {
	t.Helper()
	old := operate.StdinIsTerminal
	operate.StdinIsTerminal = func(any) bool { return true }
	t.Cleanup(func() { operate.StdinIsTerminal = old })
}

// editRollout changes the rollout of group in a state file.
func editRollout(t *testing.T, file, group string, edit func(*state.Rollout)) {
	t.Helper()
	ctx := context.Background()
	mem, err := cli.LoadSnapshot(file)
	require.NoError(t, err)
	r, err := mem.GetRollout(ctx, group)
	require.NoError(t, err)
	edit(&r)
	_, err = mem.PutRollout(ctx, r)
	require.NoError(t, err)
	require.NoError(t, cli.SaveSnapshot(file, mem))
}

// waitForApproval puts the group's rollout of its target AMI in Waiting for `patch-agent approve`.
func waitForApproval(t *testing.T, file, group string) {
	t.Helper()
	editRollout(t, file, group, func(r *state.Rollout) {
		r.Phase, r.Reason = state.PhaseWaiting, "approval: waiting for `patch-agent approve "+group+"` (AMI "+r.TargetImageID+")"
	})
}

func readFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	return string(b)
}

func requireExitCode(t *testing.T, err error, code int) {
	t.Helper()
	var ee cli.ExitError
	if code == 1 {
		require.Error(t, err)
		require.False(t, errors.As(err, &ee) && ee.Code != 1, "exit status 1, got %v", err)
		return
	}
	require.True(t, errors.As(err, &ee), "an exitError, got %v", err)
	require.Equal(t, code, ee.Code)
}

// 1. Ctrl-C aborts the confirmation prompt and message inspect's read of standard input.

func TestRollbackPromptAbortsOnCtrlCAndWritesNothing(t *testing.T) {
	onTerminal(t)
	file := demoState(t)
	before := readFile(t, file)
	stdin, w := io.Pipe() // a terminal nobody types on
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	began := time.Now()
	res := runIn(t, ctx, stdin, "rollback", testworld.GroupName, "--state-file", file)
	require.Less(t, time.Since(began), 2*time.Second)
	requireExitCode(t, res.err, 130)
	require.ErrorContains(t, res.err, "aborted: nothing was written")
	require.Contains(t, res.stdout, "Type yes to confirm: \naborted\n")
	require.Equal(t, before, readFile(t, file))
}

func TestMessageInspectReturnsOnCtrlC(t *testing.T) {
	stdin, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	began := time.Now()
	res := runIn(t, ctx, stdin, "message", "inspect")
	require.Less(t, time.Since(began), 2*time.Second)
	requireExitCode(t, res.err, 130)
	require.ErrorContains(t, res.err, "aborted")
}

// 12. Only "yes" confirms.

func TestRollbackPromptAcceptsOnlyYes(t *testing.T) {
	onTerminal(t)
	for _, answer := range []string{"y\n", "yes please\n", "\n", ""} {
		file := demoState(t)
		before := readFile(t, file)
		res := runIn(t, context.Background(), strings.NewReader(answer), "rollback", testworld.GroupName, "--state-file", file)
		require.ErrorContains(t, res.err, "rollback not confirmed (only yes confirms): nothing was written", "%q", answer)
		require.Equal(t, before, readFile(t, file))
	}
	for _, answer := range []string{"yes\n", "  YES \n", "Yes"} {
		file := demoState(t)
		res := runIn(t, context.Background(), strings.NewReader(answer), "rollback", testworld.GroupName, "--state-file", file)
		require.NoError(t, res.err, "%q", answer)
		require.Contains(t, res.stdout, "rollback recorded")
		require.Equal(t, testworld.ImageA, status(t, file).TargetImageID)
	}
}

// 2. message inspect reads at most 1 MiB.

func TestMessageInspectRefusesMoreThanOneMiB(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.json")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("a"), operate.MaxMessageBytes+1), 0o600))
	res := run(t, "message", "inspect", big)
	require.ErrorContains(t, res.err, "message larger than 1 MiB")
	requireExitCode(t, res.err, 1)

	res = runIn(t, context.Background(), bytes.NewReader(bytes.Repeat([]byte("a"), 3*operate.MaxMessageBytes)), "message", "inspect", "-")
	require.ErrorContains(t, res.err, "message larger than 1 MiB")

	exact := filepath.Join(t.TempDir(), "exact.json")
	require.NoError(t, os.WriteFile(exact, bytes.Repeat([]byte(" "), operate.MaxMessageBytes), 0o600))
	res = run(t, "message", "inspect", exact)
	require.Error(t, res.err)
	require.NotContains(t, res.err.Error(), "larger than", "1 MiB itself is read and parsed")

	if runtime.GOOS != "windows" {
		began := time.Now()
		res = run(t, "message", "inspect", "/dev/zero")
		require.ErrorContains(t, res.err, "message larger than 1 MiB")
		require.Less(t, time.Since(began), 2*time.Second)
	}
}

// 3. rollback --to: an AMI id, from the group's history unless --force.

func TestRollbackToValidatesTheAMI(t *testing.T) {
	file := demoState(t)
	const stranger = "ami-0e1e2e3e4e5e6e7e8"
	for _, tc := range []struct {
		name string
		to   string
		want string
	}{
		{"spaces", " " + testworld.ImageA, `--to: " ` + testworld.ImageA + `" is not an AMI id: remove the spaces around it`},
		{"upper case", strings.ToUpper(testworld.ImageA), "is not an AMI id (ami- followed by 8 or 17 lowercase hexadecimal digits"},
		{"empty", "", `--to: "" is not an AMI id`},
		{"not in the history", stranger, stranger + " is not in the history of group " + testworld.GroupName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := readFile(t, file)
			res := run(t, "rollback", testworld.GroupName, "--to", tc.to, "--yes", "--state-file", file)
			require.ErrorContains(t, res.err, tc.want)
			require.Equal(t, before, readFile(t, file))
		})
	}

	res := run(t, "rollback", testworld.GroupName, "--to", stranger, "--force", "--yes", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "--force: "+stranger+" is not in the group's history nor its previous AMI")
	require.Equal(t, stranger, status(t, file).TargetImageID)
}

func TestRollbackToAnAMIOfTheHistoryNeedsNoForce(t *testing.T) {
	file := demoState(t)
	res := run(t, "rollback", testworld.GroupName, "--to", testworld.ImageA, "--yes", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.NotContains(t, res.stdout, "--force")
}

// 4. Rollback refuses phases it does not know.

func TestRollbackRefusesAnUnknownPhase(t *testing.T) {
	file := demoState(t)
	editRollout(t, file, testworld.GroupName, func(r *state.Rollout) { r.Phase = "Defragmenting" })
	res := run(t, "rollback", testworld.GroupName, "--yes", "--state-file", file)
	require.ErrorContains(t, res.err, `phase "Defragmenting", which this patch-agent does not know: refusing to roll back`)
}

// 5. An empty --group is an error, not the global scope.

func TestEmptyGroupIsNotTheGlobalScope(t *testing.T) {
	file := demoState(t)
	before := readFile(t, file)
	res := run(t, "pause", "--group", "", "--reason", "x", "--state-file", file)
	require.EqualError(t, res.err, "--group is empty; omit it to pause every group")
	res = run(t, "pause", "-g", " ", "--reason", "x", "--state-file", file)
	require.EqualError(t, res.err, "--group is empty; omit it to pause every group")
	require.Equal(t, before, readFile(t, file))

	require.NoError(t, run(t, "pause", "--reason", "x", "--state-file", file).err)
	res = run(t, "resume", "--group=", "--state-file", file)
	require.EqualError(t, res.err, "--group is empty; omit it to resume the global pause")
	require.NotNil(t, status(t, file).Paused, "the global pause is still there")
}

// 6. demo --state-file and --scenario are checked before the demo runs.

func TestDemoStateFileIsCheckedBeforeTheDemoRuns(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("my notes\n"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a file that is not a snapshot", []string{"--state-file", notes},
			"--state-file " + notes + " exists and is not a patch-agent state snapshot: refusing to overwrite it; name another file, or pass --force to replace it"},
		{"a directory", []string{"--state-file", dir}, "--state-file " + dir + " is a directory: name a file, e.g. --state-file " + filepath.Join(dir, "demo.json")},
		{"a missing directory", []string{"--state-file", filepath.Join(dir, "nope", "demo.json")}, "directory " + filepath.Join(dir, "nope") + " does not exist"},
		{"audit keeps no state", []string{"--scenario", "audit", "--state-file", filepath.Join(dir, "audit.json")}, "the audit scenario keeps no state"},
		{"unknown scenario", []string{"--scenario", "nope"}, `unknown scenario "nope": want one of `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, append([]string{"demo"}, tc.args...)...)
			require.ErrorContains(t, res.err, tc.want)
			require.Empty(t, res.stdout, "the demo did not run")
		})
	}
	require.Equal(t, "my notes\n", readFile(t, notes))
	require.NoFileExists(t, filepath.Join(dir, "audit.json"))

	res := run(t, "demo", "--scenario", "nope")
	for _, name := range append(demo.Scenarios(), "audit") {
		require.Contains(t, res.err.Error(), name)
	}

	res = run(t, "demo", "-o", "json", "--state-file", notes, "--force")
	require.NoError(t, res.err, res.stderr)
	require.True(t, isSnapshotFile(notes), "--force replaces it")

	res = run(t, "demo", "-o", "json", "--state-file", notes)
	require.NoError(t, res.err, "a snapshot is replaced without --force")

	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	res = run(t, "demo", "-o", "json", "--state-file", empty)
	require.NoError(t, res.err, "an empty file holds nothing to lose")
}

func TestDemoStateFileInAReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes in read-only directories")
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	res := run(t, "demo", "--state-file", filepath.Join(dir, "demo.json"))
	require.ErrorContains(t, res.err, "cannot write in directory "+dir)
	require.Empty(t, res.stdout)
}

// 7. The plan of a Waiting rollout does not pretend every instance runs the AMI left; a RolledBack one is
// already back on the AMI it would roll to.

func TestRollbackPlanCountsHonestly(t *testing.T) {
	file := demoState(t)
	// B waits, no instance refresh under way; the group still runs A: 0 of 3 on the target B.
	editRollout(t, file, testworld.GroupName, func(r *state.Rollout) {
		r.Phase, r.OnTarget, r.Refresh = state.PhaseWaiting, 0, nil
	})
	res := run(t, "rollback", testworld.GroupName, "--to", testworld.ImageA, "--yes", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.NotContains(t, res.stdout, "3 of the group's 3 instance(s) run "+testworld.ImageB)
	require.Contains(t, res.stdout, "0 of the group's 3 instance(s) run "+testworld.ImageB+" (as last observed); an instance refresh to a "+
		"launch template version with "+testworld.ImageA)
}

func TestRollbackAfterAnAutomaticRollbackAgreesWithStatus(t *testing.T) {
	file := demoState(t)
	// B failed and was rolled back: the record keeps B as its target, status shows the group 3/3 on A.
	editRollout(t, file, testworld.GroupName, func(r *state.Rollout) {
		r.Phase, r.OnTarget, r.RollbackFrom = state.PhaseRolledBack, 0, testworld.ImageB
	})
	row := status(t, file)
	require.Equal(t, testworld.ImageA, row.TargetImageID)
	require.Equal(t, 3, row.OnTarget)

	res := run(t, "rollback", testworld.GroupName, "--to", testworld.ImageA, "--yes", "--state-file", file)
	require.EqualError(t, res.err, "group "+testworld.GroupName+" already targets "+testworld.ImageA+" (rolled back from "+testworld.ImageB+
		"): nothing to roll back; name another AMI with --to")
	res = run(t, "rollback", testworld.GroupName, "--to", testworld.ImageB, "--yes", "--state-file", file)
	require.ErrorContains(t, res.err, testworld.ImageB+" is the AMI the rollout of "+testworld.GroupName+" rolled back from")
	require.ErrorContains(t, res.err, "patch-agent retry "+testworld.GroupName)
}

// 8. status shows a group pause behind the global one; resume -g says the global pause still holds.

func TestStatusShowsBothPausesAndResumeOfTheGroupSaysTheGlobalOneHolds(t *testing.T) {
	file := demoState(t)
	require.NoError(t, run(t, "pause", "--reason", "incident", "--who", "alice", "--state-file", file).err)
	require.NoError(t, run(t, "pause", "-g", testworld.GroupName, "--reason", "game day", "--who", "bob", "--state-file", file).err)

	row := status(t, file)
	require.Equal(t, "global", row.Paused.Scope)
	require.NotNil(t, row.GroupPause)
	require.Equal(t, "group "+testworld.GroupName, row.GroupPause.Scope)
	res := run(t, "status", testworld.GroupName, "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "global+group", "the default table names both scopes")
	res = run(t, "status", testworld.GroupName, "-o", "wide", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "global by alice: incident; also group "+testworld.GroupName+" by bob: game day")

	res = run(t, "resume", "-g", testworld.GroupName, "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "resumed group "+testworld.GroupName+", but "+testworld.GroupName+" remains paused by the global lock (by alice: incident)")
	require.NotContains(t, res.stdout, "rollouts continue")
	row = status(t, file)
	require.Equal(t, "global", row.Paused.Scope)
	require.Nil(t, row.GroupPause)

	res = run(t, "resume", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "resumed global (paused by alice since ", "it names the pause it lifted")
	require.Contains(t, res.stdout, ": incident): rollouts continue when the agent next looks at them\n"+
		"Not woken: no agent reads a state file; the change is in state file "+file)
}

// 9. approve only what waits for approval, unless --force; approvals are in the history.

func TestApproveRefusesWhatDoesNotWaitForApproval(t *testing.T) {
	file := demoState(t)
	before := readFile(t, file)
	res := run(t, "approve", testworld.GroupName, "--who", "carol", "--state-file", file)
	require.ErrorContains(t, res.err, "group "+testworld.GroupName+" is not waiting for approval (phase Completed): nothing to approve; pass --force")
	requireExitCode(t, res.err, 1)
	require.Equal(t, before, readFile(t, file))

	res = run(t, "approve", testworld.GroupName, "--who", "carol", "--force", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "approved "+testworld.ImageB+" for "+testworld.GroupName+" by carol (phase Completed)")
	require.NotContains(t, res.stdout, "The rollout starts")
	require.Contains(t, res.stdout, "was not waiting for approval")
}

func TestApproveOfAWaitingGroupIsInTheHistory(t *testing.T) {
	file := demoState(t)
	waitForApproval(t, file, testworld.GroupName)
	res := run(t, "approve", testworld.GroupName, "--who", "carol", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "The rollout starts when the agent next looks at the group unless another gate holds it")

	res = run(t, "history", testworld.GroupName, "--state-file", file, "-o", "json")
	require.NoError(t, res.err)
	var doc operator.HistoryDocument
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	last := doc.Entries[len(doc.Entries)-1]
	require.Equal(t, operator.HistoryApproved, last.Event)
	require.Equal(t, "carol", last.Detail)
	require.Equal(t, testworld.ImageB, last.NewImageID)
}

// 10. message needs a subcommand.

func TestMessageWithoutAKnownSubcommandIsAUsageError(t *testing.T) {
	res := run(t, "message")
	require.ErrorContains(t, res.err, "patch-agent message needs a subcommand:\n  inspect")
	var stderr strings.Builder
	require.Equal(t, cli.ExitUsage, cli.Report(&stderr, res.err))
	require.True(t, strings.HasSuffix(stderr.String(), "\nRun 'patch-agent message --help' for usage.\n"), stderr.String())
	require.Equal(t, 1, strings.Count(stderr.String(), "--help"), "one hint")
	res = run(t, "message", "nope")
	require.ErrorContains(t, res.err, `unknown subcommand "nope" for patch-agent message; available subcommands:`)
	require.ErrorContains(t, res.err, "inspect  Print how the agent reads one SQS message body")
	stderr.Reset()
	require.Equal(t, cli.ExitUsage, cli.Report(&stderr, res.err))
	require.Equal(t, 1, strings.Count(stderr.String(), "--help"), "one hint")
}

func TestEKSWithoutAKnownSubcommandIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"eks"}, {"eks", "nope"}} {
		res := run(t, args...)
		require.Error(t, res.err, "%v", args)
		require.ErrorContains(t, res.err, "upgrade  Upgrade an EKS cluster")
		require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err), "%v", args)
	}
}

// 11. version and --version.

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		res := run(t, args...)
		require.NoError(t, res.err)
		b := buildinfo.Get()
		require.Equal(t, "patch-agent "+b.Version+" (commit "+b.Commit+", built "+b.Date+", "+runtime.Version()+", "+runtime.GOOS+"/"+runtime.GOARCH+")\n",
			res.stdout, "%v", args)
	}
}

// 13 and 14. Clear errors for an empty --who and a missing GROUP.

func TestEmptyWhoAndMissingGroup(t *testing.T) {
	file := demoState(t)
	for _, args := range [][]string{{"approve", testworld.GroupName}, {"rollback", testworld.GroupName, "--yes"}} {
		res := run(t, append(args, "--who", "", "--state-file", file)...)
		require.ErrorContains(t, res.err, "--who is empty", args[0])
	}
	require.ErrorContains(t, run(t, "pause", "--reason", "x", "--who", " ", "--state-file", file).err, "--who is empty")
	for _, c := range []string{"history", "approve", "rollback"} {
		res := run(t, c, "--state-file", file)
		require.EqualError(t, res.err, "GROUP is required: the Auto Scaling group name (see patch-agent status)", c)
		res = run(t, c, "", "--state-file", file)
		require.EqualError(t, res.err, "GROUP is required: the Auto Scaling group name (see patch-agent status)", c)
		res = run(t, c, "a", "b", "--state-file", file)
		require.ErrorContains(t, res.err, "takes one GROUP, got 2 arguments", c)
	}
}

// 15. --log-level in any case; the environment variable is named when it set the value.

func TestRunLogLevel(t *testing.T) {
	t.Setenv(config.EnvQueueURL, "")
	t.Setenv(config.EnvLogLevel, "")
	res := run(t, "run", "--log-level", "DEBUG")
	require.ErrorContains(t, res.err, "invalid configuration", "the queue URL is missing")
	require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err), "a missing flag is a usage error")
	require.NotContains(t, res.err.Error(), "log-level")

	res = run(t, "run", "--log-level", "verbose")
	require.ErrorContains(t, res.err, `--log-level "verbose": want debug, info, warn or error`)

	t.Setenv(config.EnvLogLevel, "verbose")
	res = run(t, "run")
	require.ErrorContains(t, res.err, `PATCH_AGENT_LOG_LEVEL (the default of --log-level) "verbose": want debug, info, warn or error`)
	t.Setenv(config.EnvLogLevel, "Warn")
	res = run(t, "run")
	require.NotContains(t, res.err.Error(), "log-level")
	require.NotContains(t, res.err.Error(), config.EnvLogLevel)
}

// 16. history's FROM → TO column reads in the direction of each event.

func TestHistoryOfARollbackReadsFromTheFailedAMI(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad-ami.json")
	res := run(t, "demo", "-o", "json", "--scenario", "bad-ami", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	res = run(t, "history", testworld.GroupName, "--state-file", file)
	require.NoError(t, res.err)
	lines := strings.Split(res.stdout, "\n")
	require.Regexp(t, `EVENT +FROM → TO +DETAIL`, lines[0])
	require.NotContains(t, lines[0], "PREVIOUS AMI", "each AMI once")
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) < 5 {
			continue
		}
		event, direction := f[1], strings.Join(f[2:5], " ")
		seen[event] = true
		switch event {
		case "detected":
			require.Equal(t, testworld.ImageA+" → "+testworld.ImageB, direction, l)
		case "rolling-back", "rolled-back":
			require.Equal(t, testworld.ImageB+" → "+testworld.ImageA, direction, l)
		}
	}
	require.True(t, seen["rolling-back"] && seen["rolled-back"], res.stdout)
}

// resume of a pause that had already ended removes its lock and says that nothing was paused, instead of
// "resumed ...: rollouts continue".
func TestResumeOfAnExpiredPauseSaysNothingWasPaused(t *testing.T) {
	file := demoState(t)
	mem, err := cli.LoadSnapshot(file) // pause refuses an --until in the past: the lock is one whose end has come
	require.NoError(t, err)
	require.NoError(t, mem.PutLock(context.Background(), state.Lock{Reason: "short", Who: "alice",
		Since: time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC), Until: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}))
	require.NoError(t, cli.SaveSnapshot(file, mem))
	res := run(t, "resume", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "removed the global pause lock (by alice: short), which had already ended at 2000-01-01T00:00:00Z: nothing was paused")
	require.NotContains(t, res.stdout, "rollouts continue")
}
