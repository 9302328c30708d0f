//go:build !nodemo

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// notPrinting are the commands that print no result of their own: the agent (its output is its JSON log).
var notPrinting = map[string]bool{"patch-agent run": true}

// everyCommand walks the tree of newRootCommand and calls f with every runnable command that is not hidden.
func everyCommand(t *testing.T, f func(t *testing.T, c *cobra.Command)) {
	t.Helper()
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden {
			t.Run(c.CommandPath(), func(t *testing.T) { f(t, c) })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
}

func TestEveryPrintingCommandTakesOutputTableWideAndJSON(t *testing.T) {
	n := 0
	everyCommand(t, func(t *testing.T, c *cobra.Command) {
		if notPrinting[c.CommandPath()] || c.Name() == "message" || c.Name() == "eks" {
			return // the agent, and the groups of subcommands
		}
		n++
		f := c.Flags().Lookup("output")
		require.NotNil(t, f, "every command that prints takes -o")
		require.Equal(t, "o", f.Shorthand)
		o, ok := f.Value.(*cli.OutputValue)
		require.True(t, ok, "-o is the shared outputValue, so every command validates and deprecates alike")
		for _, format := range cli.StandardFormats {
			require.NoError(t, c.Flags().Set("output", format), "-o %s", format)
			require.Equal(t, format, o.Value)
		}
		require.ErrorContains(t, c.Flags().Set("output", "yaml"), "want table, wide")
	})
	require.GreaterOrEqual(t, n, 13, "status, history, pause, resume, approve, rollback, audit, demo, version, healthcheck, message inspect, eks upgrade, eks upgrade status")
}

func TestStatusHistoryAndAuditAlsoTakeCSV(t *testing.T) {
	root := newRootCommand()
	for _, path := range [][]string{{"status"}, {"history"}, {"audit"}} {
		c, _, err := root.Find(path)
		require.NoError(t, err)
		require.NoError(t, c.Flags().Set("output", cli.FormatCSV), c.CommandPath())
	}
}

func TestEveryConfirmationIsYes(t *testing.T) {
	confirming := map[string]bool{}
	everyCommand(t, func(t *testing.T, c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			switch f.Name {
			case "yes":
				confirming[c.CommandPath()] = true
				require.Equal(t, "y", f.Shorthand)
				require.Equal(t, "bool", f.Value.Type())
			case "approve", "confirm", "assume-yes", "force-yes":
				require.NotEmpty(t, f.Deprecated, "--%s is only a deprecated alias of --yes", f.Name)
				require.True(t, f.Hidden)
			}
		})
	})
	require.True(t, confirming["patch-agent rollback"])
	require.True(t, confirming["patch-agent eks upgrade"])
}

func TestEKSUpgradeVerbsAreSubcommandsAndTheOldFlagsStillWork(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", "demo-eks", "--to", "1.31", "--state-file", file)
	require.Equal(t, operate.ExitWaiting, exitCode(t, res.err), "waits for its approval")

	res = run(t, "eks", "upgrade", "--cluster", "demo-eks", "--to", "1.31", "--approve", "--state-file", file)
	require.Contains(t, res.stderr, "Flag --approve has been deprecated, use --yes instead")
	require.Equal(t, state.WorkflowCompleted, upgradeStatus(t, file).Phase, "the deprecated --approve still approves")

	res = run(t, "eks", "upgrade", "--cluster", "demo-eks", "--status", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stderr, "Flag --status has been deprecated")
	require.Contains(t, res.stdout, "Completed")

	res = run(t, "eks", "upgrade", "stauts", "--cluster", "demo-eks", "--state-file", file)
	require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err), "a misspelt verb is a usage error")
}

// oneGroupFleet is a state file holding one rollout, of demo-ecs-asg (phase Waiting for its approval).
func oneGroupFleet(t *testing.T) string {
	t.Helper()
	m := state.NewMemory()
	_, err := m.PutRollout(context.Background(), state.Rollout{Group: "demo-ecs-asg", Platform: "ecs", Phase: state.PhaseCompleted,
		TargetImageID: "ami-0b1b2b3b4b5b6b7b8", PreviousImageID: "ami-0a1a2a3a4a5a6a7a8", Instances: 2, OnTarget: 2})
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "one group.json") // a space: hints must quote it
	require.NoError(t, cli.SaveSnapshot(file, m))
	return file
}

func TestExitStatuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		// setup runs first, in the same state file.
		setup []string
		want  int
	}{
		{"success", []string{"status"}, nil, 0},
		{"unknown command", []string{"statsu"}, nil, cli.ExitUsage},
		{"unknown flag", []string{"status", "--colour"}, nil, cli.ExitUsage},
		{"a format no command takes", []string{"status", "-o", "yaml"}, nil, cli.ExitUsage},
		{"a missing argument", []string{"history"}, nil, cli.ExitUsage},
		{"flags that do not go together", []string{"pause", "--reason", "r", "--who", "a", "the", "reason"}, nil, cli.ExitUsage},
		{"a pause already in place is an error, not a usage error", []string{"pause", "--reason", "again", "--who", "a"},
			[]string{"pause", "--reason", "first", "--who", "a"}, 1},
		{"a misspelt group", []string{"history", "demo-ecs-asx"}, nil, 1},
		{"a rollback not confirmed", []string{"rollback", "demo-ecs-asg", "--who", "a"}, nil, 1},
		{"a timeline of a scenario that draws nothing", []string{"demo", "--scenario", "audit", "--timeline", "x.svg"}, nil, cli.ExitUsage},
		{"a malformed Kubernetes version", []string{"eks", "upgrade", "--cluster", "c", "--to", "banana"}, nil, cli.ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := oneGroupFleet(t)
			if tc.setup != nil {
				require.NoError(t, run(t, append(tc.setup, "--state-file", file)...).err)
			}
			args := tc.args
			if args[0] != "demo" && args[0] != "statsu" {
				args = append(args, "--state-file", file)
			}
			res := run(t, args...)
			require.Equal(t, tc.want, cli.Report(io.Discard, res.err), "%v: %v", tc.args, res.err)
		})
	}
}

func TestExitStatusesAreWrittenInTheRootHelpAndTheOperationsDoc(t *testing.T) {
	res := run(t, "--help")
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, exitStatusHelp)
	doc, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	require.Contains(t, string(doc), "```\n"+exitStatusHelp+"\n```", "docs/operations.md quotes the root command's list")
}

func TestEveryCommandThatTakesAGroupAnswersAMisspeltOneWithTheRealOnes(t *testing.T) {
	for _, args := range [][]string{
		{"status", "demo-ecs-asx"},
		{"history", "demo-ecs-asx"},
		{"approve", "demo-ecs-asx", "--who", "a"},
		{"rollback", "demo-ecs-asx", "--yes", "--who", "a"},
		{"pause", "--group", "demo-ecs-asx", "--reason", "r", "--who", "a"},
		{"resume", "--group", "demo-ecs-asx"},
	} {
		t.Run(args[0], func(t *testing.T) {
			file := oneGroupFleet(t)
			res := run(t, append(args, "--state-file", file)...)
			require.ErrorIs(t, res.err, operator.ErrUnknownGroup)
			require.ErrorContains(t, res.err, "holds rollout records of: demo-ecs-asg")
			require.Equal(t, 1, cli.Report(io.Discard, res.err))
		})
	}
}

// shellWords splits a line as a POSIX shell does for the words pasteable writes: plain words and single-quoted
// ones ('\” for a quote inside).
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range line {
		switch {
		case quoted && r == '\'':
			quoted = false
		case quoted:
			cur.WriteRune(r)
		case r == '\'':
			quoted, inWord = true, true
		case r == '\\':
			// only in '\'': the next rune is the quote itself
		case r == ' ':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted, "unbalanced quotes in %q", line)
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func TestUndoHintRunsAsPastedWithTheStoreFlagsGiven(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "pause", "--group", "demo-ecs-asg", "--reason", "game day", "--who", "alice", "--state-file", file)
	require.NoError(t, res.err)
	_, line, ok := strings.Cut(res.stdout, "Undo with: ")
	require.True(t, ok, res.stdout)
	line, _, _ = strings.Cut(line, "\n")
	require.Equal(t, "patch-agent resume --group demo-ecs-asg --state-file '"+file+"'", line)

	words := shellWords(t, line)
	require.Equal(t, "patch-agent", words[0])
	res = run(t, words[1:]...)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "resumed group demo-ecs-asg")
}

func TestPasteableRepeatsEveryRegionAndSkipsFlagsTheNextCommandLacks(t *testing.T) {
	root := newRootCommand()
	pause, _, err := root.Find([]string{"pause"})
	require.NoError(t, err)
	require.NoError(t, pause.ParseFlags([]string{"--accounts", "accts", "--region", "eu-west-1", "--region", "us-east-1",
		"--external-id", "x y", "--reason", "r", "--who", "a"}))
	require.Equal(t, "patch-agent resume --region eu-west-1 --region us-east-1 --accounts accts --external-id 'x y'",
		cli.Pasteable(pause, cli.Sibling(pause, "resume"), "patch-agent resume"))
	status, _, err := root.Find([]string{"status"})
	require.NoError(t, err)
	require.Equal(t, "patch-agent status --region eu-west-1 --region us-east-1 --accounts accts --external-id 'x y'",
		cli.Pasteable(pause, status, "patch-agent status"), "status takes the same flags")
	version, _, err := root.Find([]string{"version"})
	require.NoError(t, err)
	require.Equal(t, "patch-agent version", cli.Pasteable(pause, version, "patch-agent version"), "version takes none of them")
}

func TestPauseTakesAnUnquotedReason(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "pause", "incident", "4711:", "bad", "AMI", "--who", "alice", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "paused global by alice: incident 4711: bad AMI")
	mem, err := cli.LoadSnapshot(file)
	require.NoError(t, err)
	locks, err := mem.ListLocks(context.Background())
	require.NoError(t, err)
	require.Len(t, locks, 1)
	require.Equal(t, "incident 4711: bad AMI", locks[0].Reason)

	res = run(t, "pause", "twice", "--reason", "once", "--who", "alice", "--state-file", oneGroupFleet(t))
	require.ErrorContains(t, res.err, "the reason is given twice")
	require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err))
}

func TestPauseAndResumePrintOneJSONDocument(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "pause", "--reason", "r", "--until", "2h", "--who", "alice", "-o", "json", "--state-file", file)
	require.NoError(t, res.err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), "stdout holds only the document: %s", res.stdout)
	require.Equal(t, 1.0, doc["schemaVersion"])
	require.Equal(t, "paused", doc["outcome"])
	require.Equal(t, "global", doc["scope"])
	require.NotNil(t, doc["until"])
	require.Equal(t, "patch-agent resume --state-file '"+file+"'", doc["undo"])
	require.Contains(t, res.stderr, "paused global by alice", "the sentences go to stderr")

	res = run(t, "resume", "-o", "json", "--state-file", file)
	require.NoError(t, res.err)
	doc = nil
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, "resumed", doc["outcome"])
	require.Equal(t, "alice", doc["who"])
}

func TestApprovePrintsOneJSONDocumentWithEveryField(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "approve", "demo-ecs-asg", "--force", "--who", "alice", "-o", "json", "--state-file", file)
	require.NoError(t, res.err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), "stdout holds only the document: %s", res.stdout)
	require.Equal(t, 1.0, doc["schemaVersion"])
	require.Equal(t, "ami-0b1b2b3b4b5b6b7b8", doc["imageId"])
	require.Equal(t, "alice", doc["approvedBy"])
	require.Equal(t, false, doc["waitingForApproval"])
	require.Contains(t, doc, "cluster", "every field present")
	require.Contains(t, res.stderr, "approved ami-0b1b2b3b4b5b6b7b8 for demo-ecs-asg by alice")
}

func TestOrganizationStatusRefusesCSVBeforeItRuns(t *testing.T) {
	useOrganizationDemo(t)
	res := execRoot(t, "status", "--organization", "--region", "us-east-1", "-o", "csv")
	require.ErrorContains(t, res.err, "-o csv is one account's")
	require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err))
	require.Empty(t, res.stdout)
}

func TestRollbackOutputTextIsADeprecatedAliasOfTable(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "rollback", "demo-ecs-asg", "--yes", "--who", "alice", "-o", "text", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stderr, "-o text is deprecated and will be removed: use -o table")
	require.Contains(t, res.stdout, "rollback recorded: demo-ecs-asg now targets ami-0a1a2a3a4a5a6a7a8")
	require.Contains(t, res.stdout, "Follow it with: patch-agent status demo-ecs-asg --watch --state-file '"+file+"'")
}

func TestDemoJSONFlagIsADeprecatedAliasOfOutputJSON(t *testing.T) {
	root := newRootCommand()
	demo, _, err := root.Find([]string{"demo"})
	require.NoError(t, err)
	f := demo.Flags().Lookup("json")
	require.NotNil(t, f)
	require.True(t, f.Hidden)
	require.Equal(t, "use -o json instead", f.Deprecated)
}

func TestTimelineThatCannotBeDrawnIsRefusedBeforeTheDemoRuns(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "audit", "--timeline", filepath.Join(dir, "a.svg")}, "the audit scenario runs no rollout and draws no timeline"},
		{[]string{"--scenario", "eks-upgrade", "--timeline", filepath.Join(dir, "a.svg")}, "the eks-upgrade scenario runs no rollout"},
		{[]string{"--timeline", filepath.Join(dir, "a.png")}, "the timeline is an SVG picture, name the file with .svg"},
		{[]string{"--timeline", filepath.Join(dir, "a")}, "name the file with .svg"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res := run(t, append([]string{"demo"}, tc.args...)...)
			require.ErrorContains(t, res.err, tc.want)
			require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "no file is written")
		})
	}
}

func TestVersionAndHealthcheckJSONCarryTheSchemaVersion(t *testing.T) {
	res := run(t, "version", "-o", "json")
	require.NoError(t, res.err)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &v))
	require.Equal(t, 1.0, v["schemaVersion"])
	require.NotEmpty(t, v["version"])
	require.NotEmpty(t, v["platform"])

	res = run(t, "healthcheck", "--addr", "127.0.0.1:1", "--timeout", "1s", "-o", "json")
	require.Equal(t, 1, cli.Report(io.Discard, res.err), "nothing answers on port 1")
	var h map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &h), "the document is printed before the exit: %s", res.stdout)
	require.Equal(t, 1.0, h["schemaVersion"])
	require.Equal(t, false, h["ready"])

	res = run(t, "healthcheck", "--addr", "nope")
	require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err), "a malformed --addr is a usage error")
}

func TestOrganizationStatusWideIsNotTheTable(t *testing.T) {
	useOrganizationDemo(t)
	res := execRoot(t, "status", "--organization", "--region", "us-east-1", "-o", "wide")
	require.Contains(t, res.stdout, "PREVIOUS AMI", "wide has the columns of the one-account wide table")
	require.Contains(t, res.stdout, "ACCOUNT")
	var exit cli.ExitError
	require.False(t, errors.As(res.err, &exit))
}

func TestApproveOfAnEKSUpgradePrintsOneJSONDocumentWithTheNextCommand(t *testing.T) {
	_, file := simUpgrade(t)
	res := run(t, "eks", "upgrade", "--cluster", "demo-eks", "--to", "1.31", "--state-file", file)
	require.Equal(t, operate.ExitWaiting, exitCode(t, res.err))
	res = run(t, "approve", "eks:demo-eks", "--who", "bob", "-o", "json", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, "demo-eks", doc["cluster"])
	require.Equal(t, "1.31", doc["to"])
	require.Equal(t, "patch-agent eks upgrade --cluster demo-eks --to 1.31 --state-file "+cli.ShellQuote(file), doc["next"],
		"the next command with the store flag, and without approve's --queue-url, which eks upgrade does not take")
}

func TestAnUnknownFlagIsAUsageErrorOfEveryCommand(t *testing.T) {
	everyCommand(t, func(t *testing.T, c *cobra.Command) {
		path := strings.Fields(c.CommandPath())[1:]
		res := run(t, append(path, "--no-such-flag")...)
		require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err), "%v", res.err)
	})
}

func TestRollbackToAnAMIOutsideTheHistoryNamesTheHistoryCommandWithTheStoreFlags(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "rollback", "demo-ecs-asg", "--to", "ami-0c1c2c3c4c5c6c7c8", "--yes", "--who", "alice", "--state-file", file)
	var ue *operator.UnrecordedImageError
	require.ErrorAs(t, res.err, &ue)
	require.ErrorContains(t, res.err, "check the id with `patch-agent history demo-ecs-asg --state-file '"+file+"'`, or pass --force")
}

// A resume that finds its own scope not paused says what still holds, as a command that can be pasted as it
// is: the group's pause after a global resume, the global pause after a group's resume.
func TestResumeOfAScopeNotPausedPrintsTheCommandThatLiftsWhatHolds(t *testing.T) {
	file := oneGroupFleet(t)
	require.NoError(t, run(t, "pause", "--group", "demo-ecs-asg", "--reason", "r", "--who", "alice", "--state-file", file).err)
	res := run(t, "resume", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "nothing to resume")
	require.Contains(t, res.stdout, "Lift a group's pause with: patch-agent resume --group demo-ecs-asg --state-file '"+file+"'\n")

	file = oneGroupFleet(t)
	require.NoError(t, run(t, "pause", "--reason", "r", "--who", "alice", "--state-file", file).err)
	res = run(t, "resume", "--group", "demo-ecs-asg", "--state-file", file)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "Lift the global pause with: patch-agent resume --state-file '"+file+"'\n")
}

// A reason of several words given unquoted after --reason is answered with the quoted flag to paste.
func TestUnquotedReasonOfACommandTakingOneGroupSaysHowToQuoteIt(t *testing.T) {
	file := oneGroupFleet(t)
	res := run(t, "approve", "demo-ecs-asg", "--skip-soak", "--reason", "CVE", "fix", "now", "--who", "alice", "--state-file", file)
	require.ErrorContains(t, res.err, "quote a reason of several words: --reason 'CVE fix now'")
	require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err))
}

// runMain runs args as main does (execute) and returns the exit status and what went to stdout and stderr.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv(config.EnvTable, "")
	t.Setenv(config.EnvRegion, "")
	t.Setenv(config.EnvQueueURL, "")
	t.Setenv(config.EnvWakeUpQueueURL, "")
	t.Setenv("USER", "tester")
	var out, errOut strings.Builder
	code = execute(context.Background(), newRootCommand(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// requireErrorDocument requires stdout to be one error document with exit status code and stderr's message.
func requireErrorDocument(t *testing.T, code int, stdout, stderr string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var doc struct {
		SchemaVersion *int `json:"schemaVersion"`
		Error         *struct {
			Message    string `json:"message"`
			ExitStatus int    `json:"exitStatus"`
		} `json:"error"`
	}
	require.NoError(t, dec.Decode(&doc), "stdout: %q", stdout)
	require.ErrorIs(t, dec.Decode(new(any)), io.EOF, "one document: %s", stdout)
	require.NotNil(t, doc.SchemaVersion, stdout)
	require.Equal(t, 1, *doc.SchemaVersion)
	require.NotNil(t, doc.Error, stdout)
	require.Equal(t, code, doc.Error.ExitStatus)
	require.Contains(t, "\n"+stderr, "\npatch-agent: "+doc.Error.Message+"\n", "stderr keeps the human message")
}

func TestEveryJSONCommandPrintsItsUsageErrorAsAJSONDocument(t *testing.T) {
	n := 0
	everyCommand(t, func(t *testing.T, c *cobra.Command) {
		o := cli.OutputOf(c)
		if o == nil || !slices.Contains(o.Formats, cli.FormatJSON) {
			return
		}
		n++
		path := strings.Fields(c.CommandPath())[1:]
		for _, args := range [][]string{
			append(slices.Clone(path), "-o", "json", "--no-such-flag"),
			append(slices.Clone(path), "--no-such-flag", "--output=json"), // flag parsing stops before -o
		} {
			code, stdout, stderr := runMain(t, args...)
			require.Equal(t, cli.ExitUsage, code, "%v: %s", args, stderr)
			requireErrorDocument(t, code, stdout, stderr)
		}
	})
	require.GreaterOrEqual(t, n, 13, "every command that takes -o json")

	code, stdout, stderr := runMain(t, "demo", "--json", "--scenario", "nosuch")
	require.Equal(t, cli.ExitUsage, code, stderr)
	requireErrorDocument(t, code, stdout, stderr)
}

func TestARefusedJSONCommandPrintsOneErrorDocumentAndATableCommandNothing(t *testing.T) {
	file := demoState(t)
	paused := demoState(t)
	code, _, stderr := runMain(t, "pause", "--state-file", paused, "--who", "alice", "--reason", "incident")
	require.Zero(t, code, stderr)
	for _, c := range []struct {
		name string
		args []string
		code int
	}{
		{"no state file", []string{"status", "--state-file", filepath.Join(t.TempDir(), "nonexistent")}, 1},
		{"no such group", []string{"rollback", "nosuchgroup", "--state-file", file}, 1},
		{"already paused", []string{"pause", "--state-file", paused, "--who", "bob", "--reason", "again"}, 1},
		{"no reason", []string{"pause", "--state-file", file, "--who", "bob"}, cli.ExitUsage},
		{"group not waiting", []string{"approve", testworld.GroupName, "--state-file", file, "--who", "bob"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, append(slices.Clone(c.args), "-o", "json")...)
			require.Equal(t, c.code, code, stderr)
			requireErrorDocument(t, code, stdout, stderr)

			code, stdout, _ = runMain(t, c.args...)
			require.Equal(t, c.code, code)
			require.Empty(t, stdout, "-o table prints the error on stderr only")
		})
	}
}

func TestAJSONCommandThatPrintedItsDocumentBeforeFailingPrintsNoSecond(t *testing.T) {
	code, stdout, _ := runMain(t, "healthcheck", "--addr", "127.0.0.1:1", "--timeout", "1s", "-o", "json")
	require.Equal(t, 1, code, "nothing answers on port 1")
	dec := json.NewDecoder(strings.NewReader(stdout))
	var doc map[string]any
	require.NoError(t, dec.Decode(&doc))
	require.Equal(t, false, doc["ready"])
	require.ErrorIs(t, dec.Decode(new(any)), io.EOF, "one document: %s", stdout)
}

// The note of a deprecated flag goes to stderr, also when main counts what goes to stdout: stdout is the
// document alone.
func TestADeprecatedFlagsNoteStaysOffTheJSONDocument(t *testing.T) {
	code, stdout, stderr := runMain(t, "demo", "--json")
	require.Zero(t, code, stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), stdout)
	require.Contains(t, stderr, "Flag --json has been deprecated, use -o json instead")
}
