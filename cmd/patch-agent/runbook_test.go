//go:build !nodemo

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// runbookPath is the runbook the tests below follow.
const runbookPath = "../../docs/runbook.md"

// runbookLine returns the one line of docs/runbook.md that contains phrase (a table row, or a line of a code
// block), failing the test when none or several do.
func runbookLine(t *testing.T, phrase string) string {
	t.Helper()
	doc, err := os.ReadFile(runbookPath)
	require.NoError(t, err)
	var found []string
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.Contains(line, phrase) {
			found = append(found, line)
		}
	}
	require.Len(t, found, 1, "docs/runbook.md: the lines containing %q", phrase)
	return found[0]
}

// codeSpan matches a Markdown code span: one in double back quotes (which may hold a back quote) or in single ones.
var codeSpan = regexp.MustCompile("``\\s?(.+?)\\s?``|`([^`]+)`")

// commandsOf returns the commands written on one line of the runbook that start with prefix ("patch-agent ",
// "aws "): its code spans, or, for a line of a code block, the line itself without its # comment.
func commandsOf(line, prefix string) []string {
	var cmds []string
	if strings.HasPrefix(strings.TrimSpace(line), prefix) {
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), " #")
		return []string{strings.TrimSpace(cmd)}
	}
	for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
		span := m[1] + m[2]
		if strings.HasPrefix(span, prefix) {
			cmds = append(cmds, span)
		}
	}
	return cmds
}

// runbookCommand returns the command of the runbook's line holding phrase that starts with prefix
// ("patch-agent retry "), failing the test unless there is exactly one.
func runbookCommand(t *testing.T, phrase, prefix string) string {
	t.Helper()
	line := runbookLine(t, phrase)
	var cmds []string
	for _, c := range commandsOf(line, "patch-agent ") {
		if strings.HasPrefix(c+" ", prefix) {
			cmds = append(cmds, c)
		}
	}
	for _, c := range commandsOf(line, "aws ") {
		if strings.HasPrefix(c+" ", prefix) {
			cmds = append(cmds, c)
		}
	}
	require.Len(t, cmds, 1, "docs/runbook.md: the commands starting %q on the line %q", prefix, line)
	return cmds[0]
}

// commandWords splits a command line as a POSIX shell does for the words the runbook writes: plain words,
// and words in single or double quotes.
func commandWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
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
	require.Zero(t, quote, "unbalanced quotes in %q", line)
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// fillIn replaces in words the runbook's placeholders (GROUP, CLUSTER: names of the reader's fleet) by values.
func fillIn(words []string, values map[string]string) []string {
	out := make([]string, len(words))
	for i, w := range words {
		for k, v := range values {
			w = strings.ReplaceAll(w, k, v)
		}
		out[i] = w
	}
	return out
}

// runbookWorld is a simulated account with one group rolled by instance refresh, whose agent's store an
// operator command reaches through a state file, as `patch-agent ... --state-file` does.
type runbookWorld struct {
	w    *testworld.World
	mem  *state.Memory
	file string
	g    testworld.GroupSetup
}

// newRunbookWorld builds a group of 4 instances that Auto Scaling rolls by instance refresh one at a time,
// with the agent's launching and terminating hooks, settled on ImageA.
func newRunbookWorld(t *testing.T) *runbookWorld {
	t.Helper()
	g := testworld.GroupSetup{Name: "prod-ecs-asg", Cluster: "prod", Parameter: "/golden/prod", Min: 2, Max: 5, Desired: 4,
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh, model.TagBatchSize: "1"}}
	mem := state.NewMemory()
	w, err := testworld.Build(testworld.Spec{Groups: []testworld.GroupSetup{g}, Services: map[string]int{"web": 8}, Store: mem,
		Policy: model.DefaultPolicy()})
	require.NoError(t, err)
	rw := &runbookWorld{w: w, mem: mem, file: filepath.Join(t.TempDir(), "state.json"), g: g}
	rw.runFor(t, time.Minute)
	return rw
}

const runbookTick = 5 * time.Second

func (rw *runbookWorld) rollout() state.Rollout { return rw.w.Rollout(context.Background(), rw.g.Name) }

// runFor lets the world (the agent, Auto Scaling, ECS) run on for d of simulated time.
func (rw *runbookWorld) runFor(t *testing.T, d time.Duration) {
	t.Helper()
	_, err := rw.w.RunUntil(context.Background(), runbookTick, d, func() bool { return false })
	require.NoError(t, err)
}

// runTo lets the world run until done holds for the group's rollout, failing the test after limit.
func (rw *runbookWorld) runTo(t *testing.T, limit time.Duration, what string, done func(state.Rollout) bool) state.Rollout {
	t.Helper()
	ok, err := rw.w.RunUntil(context.Background(), runbookTick, limit, func() bool { return done(rw.rollout()) })
	require.NoError(t, err)
	require.True(t, ok, "%s: %+v", what, rw.rollout())
	return rw.rollout()
}

// runbookPlaceholders are the runbook's placeholders and the names of this world.
func (rw *runbookWorld) placeholders() map[string]string {
	return map[string]string{"GROUP": rw.g.Name, "CLUSTER": rw.g.Cluster}
}

// patchAgent runs a runbook command line through the command tree against a snapshot of the agent's store,
// then puts what the command wrote back into the agent's store, as the agent would find it in its table.
func (rw *runbookWorld) patchAgent(t *testing.T, line string) result {
	t.Helper()
	words := fillIn(commandWords(t, line), rw.placeholders())
	require.Equal(t, "patch-agent", words[0], line)
	require.NoError(t, cli.SaveSnapshot(rw.file, rw.mem))
	res := run(t, append(words[1:], "--state-file", rw.file)...)
	require.NoError(t, res.err, "%s: %s", line, res.stderr)
	after, err := cli.LoadSnapshot(rw.file)
	require.NoError(t, err)
	rw.mem.ReplaceSnapshotRecords(after)
	return res
}

// aws plays a runbook's `aws autoscaling cancel-instance-refresh` command line on the simulated account.
func (rw *runbookWorld) aws(t *testing.T, line string) {
	t.Helper()
	words := fillIn(commandWords(t, line), rw.placeholders())
	require.Equal(t, []string{"aws", "autoscaling", "cancel-instance-refresh", "--auto-scaling-group-name", rw.g.Name}, words,
		"the only aws command these cases play")
	_, err := rw.w.Account.AutoScaling().CancelInstanceRefresh(context.Background(),
		&autoscaling.CancelInstanceRefreshInput{AutoScalingGroupName: &words[4]})
	require.NoError(t, err)
}

// finish lets the world settle and asserts that every instance runs image and that no invariant was broken.
func (rw *runbookWorld) finish(t *testing.T, image string) {
	t.Helper()
	rw.runFor(t, 10*time.Minute)
	serving := 0
	for _, i := range rw.w.Account.Group(rw.g.Name).Instances {
		if strings.HasPrefix(i.LifecycleState, "Terminating") {
			continue
		}
		serving++
		require.Equal(t, "InService", i.LifecycleState, i.ID)
		require.Equal(t, image, i.ImageID, i.ID)
	}
	require.Equal(t, int(rw.g.Desired), serving)
	require.Empty(t, rw.w.Checker.Finish())
}

// midRefreshOf reports whether the agent's refresh is under way with at least one instance updated.
func midRefreshOf(r state.Rollout) bool {
	return r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID != "" && r.Refresh.PercentageComplete >= 25
}

func endedOn(image string) func(state.Rollout) bool {
	return func(r state.Rollout) bool { return r.TargetImageID == image && !r.Active() }
}

// The runbook's way forward from each waiting, halted or aborted state, run as written in docs/runbook.md
// through the command tree, on a group rolled by instance refresh: every case ends Completed or RolledBack
// with every invariant kept.
func TestRunbookCasesEndCompletedOrRolledBack(t *testing.T) {
	t.Run("abort mid-refresh", func(t *testing.T) {
		rw := newRunbookWorld(t)
		rw.w.PublishAMI(rw.g.Parameter, testworld.ImageB)
		rw.runTo(t, 2*time.Hour, "refresh under way", midRefreshOf)
		rw.patchAgent(t, runbookCommand(t, "also in the middle of an instance refresh", "patch-agent rollback "))
		r := rw.runTo(t, 2*time.Hour, "rolled back", func(r state.Rollout) bool { return !r.Active() })
		require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
		rw.finish(t, testworld.ImageA)
	})

	t.Run("pause mid-refresh, then resume", func(t *testing.T) {
		rw := newRunbookWorld(t)
		rw.w.PublishAMI(rw.g.Parameter, testworld.ImageB)
		rw.runTo(t, 2*time.Hour, "refresh under way", midRefreshOf)
		rw.patchAgent(t, runbookCommand(t, "patch-agent pause --group GROUP", "patch-agent pause "))
		r := rw.runTo(t, time.Hour, "waiting on the pause", func(r state.Rollout) bool { return r.Phase == state.PhaseWaiting })
		require.Contains(t, r.Reason, "paused (group "+rw.g.Name+")", "the reason the runbook's row quotes")
		rw.runFor(t, 20*time.Minute)
		require.Equal(t, state.PhaseWaiting, rw.rollout().Phase, "nothing moves while paused")
		rw.patchAgent(t, runbookCommand(t, "| a pause lock |", "patch-agent resume --group "))
		r = rw.runTo(t, 3*time.Hour, "completed", endedOn(testworld.ImageB))
		require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
		rw.finish(t, testworld.ImageB)
	})

	t.Run("bad AMI rolled back, fixed, retried", func(t *testing.T) {
		rw := newRunbookWorld(t)
		rw.w.Account.MarkImageUnhealthy(testworld.ImageB)
		rw.w.PublishAMI(rw.g.Parameter, testworld.ImageB)
		r := rw.runTo(t, 3*time.Hour, "rolled back", endedOn(testworld.ImageB))
		require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
		require.True(t, strings.HasPrefix(r.Reason, "rolled back after: "), "the reason the runbook's row quotes: %s", r.Reason)
		rw.runFor(t, 10*time.Minute)
		require.Equal(t, state.PhaseRolledBack, rw.rollout().Phase, "the failed AMI is not rolled again by itself")

		rw.w.Account.MarkImageHealthy(testworld.ImageB)
		rw.patchAgent(t, runbookCommand(t, "| RolledBack, `rolled back after: ...` |", "patch-agent retry "))
		r = rw.runTo(t, 3*time.Hour, "completed", func(r state.Rollout) bool { return r.Phase == state.PhaseCompleted })
		require.Equal(t, testworld.ImageB, r.TargetImageID)
		rw.finish(t, testworld.ImageB)
	})

	t.Run("agent died mid-refresh, its refresh cancelled, retried", func(t *testing.T) {
		rw := newRunbookWorld(t)
		rw.w.PublishAMI(rw.g.Parameter, testworld.ImageB)
		rw.runTo(t, 2*time.Hour, "refresh under way", midRefreshOf)
		// The agent dies: Auto Scaling goes on for a minute with no agent, then the operator stops the refresh
		// as the runbook says, and a new agent starts.
		for range int(time.Minute / runbookTick) {
			rw.w.Account.Advance(runbookTick)
			rw.w.Checker.Check()
		}
		rw.aws(t, runbookCommand(t, "| Replacing, instance refresh |", "aws autoscaling cancel-instance-refresh "))
		rw.w.Restart(nil)
		r := rw.runTo(t, time.Hour, "halted", func(r state.Rollout) bool { return r.Phase == state.PhaseHalted })
		require.True(t, strings.HasPrefix(r.Reason, "failed: "), "the reason the runbook's Halted row quotes: %s", r.Reason)
		require.Contains(t, runbookLine(t, "| Halted, `failed: ...` (instance refresh) |"), "`patch-agent retry GROUP`",
			"the Halted row and the agent's death agree")

		rw.patchAgent(t, runbookCommand(t, "| Replacing, instance refresh |", "patch-agent retry "))
		r = rw.runTo(t, 3*time.Hour, "completed", endedOn(testworld.ImageB))
		require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
		rw.finish(t, testworld.ImageB)
	})
}

// The PodEvictionFailure retry of `eks upgrade` needs the agent's managed node group rollout beside the
// workflow, which the command's simulated EKS does not play (internal/eksupgrade's tests run both): the
// runbook's command is held to the command tree, with every flag it gives.
func TestRunbookEKSRetryCommandParsesWithItsFlags(t *testing.T) {
	line := runbookCommand(t, "(a `PodEvictionFailure`)", "patch-agent eks upgrade ")
	words := fillIn(commandWords(t, line), map[string]string{"CLUSTER": testworld.EKSCluster, "1.N": "1.31"})
	c, rest, err := newRootCommand().Find(words[1:])
	require.NoError(t, err)
	require.Equal(t, "patch-agent eks upgrade", c.CommandPath())
	require.NoError(t, c.ParseFlags(rest))
	for _, name := range []string{"cluster", "to", "retry"} {
		require.True(t, c.Flags().Changed(name), "--%s given", name)
	}
	require.Equal(t, testworld.EKSCluster, c.Flags().Lookup("cluster").Value.String())
}

// Every `patch-agent ...` command written in docs/runbook.md names a command of the tree, with flags it takes
// and the arguments it accepts (placeholders filled in).
func TestEveryRunbookCommandParses(t *testing.T) {
	doc, err := os.ReadFile(runbookPath)
	require.NoError(t, err)
	n := 0
	for i, line := range strings.Split(string(doc), "\n") {
		for _, cmd := range commandsOf(line, "patch-agent ") {
			n++
			t.Run(fmt.Sprintf("line %d: %s", i+1, cmd), func(t *testing.T) {
				var words []string
				cmd := strings.ReplaceAll(cmd, `"..."`, `"a reason"`) // a value elided
				for _, w := range fillIn(commandWords(t, cmd), map[string]string{"GROUP": "prod-ecs-asg", "CLUSTER": "prod", "1.N": "1.31"}) {
					if w != "..." { // an elision: the rest of a command written above
						words = append(words, w)
					}
				}
				c, rest, err := newRootCommand().Find(words[1:])
				require.NoError(t, err)
				require.NotEqual(t, "patch-agent", c.CommandPath(), "a subcommand")
				require.NoError(t, c.ParseFlags(rest), "the flags exist")
				if c.Args != nil {
					require.NoError(t, c.ValidateArgs(c.Flags().Args()), "the arguments")
				}
			})
		}
	}
	require.GreaterOrEqual(t, n, 15, "the runbook's commands were found")
}
