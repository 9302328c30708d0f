package agent_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/checker"
)

// SoakReportEnv names the environment variable that, when set, is the path of the file the soak under other
// writers writes its table to (`make soak` sets it to bin/soak-writers.md). A relative path is relative to the
// test's package directory.
const SoakReportEnv = "PATCH_AGENT_SOAK_REPORT"

// soakWorld is one kind of group rolled by instance refresh beside other writers of desired capacity.
type soakWorld struct {
	name string
	spec func() (testworld.Spec, string)
}

var soakWorlds = []soakWorld{
	{
		name: "ECS",
		spec: func() (testworld.Spec, string) {
			g := testworld.GroupSetup{Name: "ecs", Min: 2, Max: 6, Desired: 4}
			return oneGroup(&g), g.Name
		},
	},
	{
		name: "EKS self-managed",
		spec: func() (testworld.Spec, string) {
			s := testworld.DemoSpec()
			s.Groups, s.Services = s.Groups[1:], nil
			return s, testworld.EKSGroupName
		},
	},
}

// soakRun is what one seed's run measured.
type soakRun struct {
	world       string
	seed        uint64
	ended       bool          // the rollout ended (Completed, Halted, RolledBack)
	phase       string        // the rollout's phase at the end of the run
	took        time.Duration // from the AMI's publication until the rollout ended and the operator had acted
	writes      int           // the random writer's writes during the rollout
	operator    bool
	agentWrites int // the agent's SetDesiredCapacity calls and decrementing terminations
	err         string
	violations  []checker.Violation
}

// perInvariant counts the run's violations by invariant.
func (r soakRun) perInvariant() map[int]int {
	out := map[int]int{}
	for _, v := range r.violations {
		out[v.Invariant]++
	}
	return out
}

var (
	instanceIDs = regexp.MustCompile(`i-[0-9a-f]{6,}`)
	tokens      = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	numbers     = regexp.MustCompile(`\d+`)
)

// kind names a violation without its instances, tokens and numbers, so that the violations of many runs add up
// by kind.
func kind(v checker.Violation) string {
	d := tokens.ReplaceAllString(v.Detail, "T")
	d = instanceIDs.ReplaceAllString(d, "i-X")
	d = numbers.ReplaceAllString(d, "N")
	if i := strings.Index(d, ": hook"); i > 0 {
		d = d[:i]
	}
	return fmt.Sprintf("%d: %s", v.Invariant, d)
}

// playSoak rolls the world's group to ImageB with a random writer of seed moving its desired capacity and an
// operator terminating one instance without decrement at a random moment in the first 30 minutes, and measures
// the run. Only a panic or a broken world fails the test: violations, a rollout that never ends and agent
// errors are measured.
func playSoak(t *testing.T, sw soakWorld, seed uint64) soakRun {
	spec, group := sw.spec()
	w := build(t, spec)
	ctx := context.Background()
	run := soakRun{world: sw.name, seed: seed}
	settle(t, w, time.Minute)
	start := w.Account.Clock().Now()
	writer := w.Account.StartRandomWriter(sim.RandomWriterSpec{Group: group, Seed: seed})
	op := w.Account.ScheduleOperator(sim.OperatorSpec{Group: group, From: start.Add(2 * time.Minute), To: start.Add(30 * time.Minute), Seed: seed})
	if param := w.EKSParameter(group); param != "" {
		w.PublishPublicAMI(param, testworld.ImageB)
	} else {
		w.PublishAMI("/golden/"+group, testworld.ImageB)
	}
	ended, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		r := w.Rollout(ctx, group)
		return r.TargetImageID == testworld.ImageB && !r.Active() && op.Done()
	})
	run.ended, run.took = ended, w.Account.Clock().Since(start)
	writer.Stop()
	run.writes, run.operator = len(writer.Writes()), op.Done()
	if err != nil {
		run.err = err.Error()
	} else {
		// The last lifecycle actions (the writer's last scale-in included) complete, and the messages go.
		_, err = w.RunUntil(ctx, tick, time.Hour, func() bool {
			visible, inFlight := w.Account.QueueDepth(w.QueueURL)
			return visible+inFlight == 0
		})
		if err != nil {
			run.err = err.Error()
		}
	}
	run.phase = string(w.Rollout(ctx, group).Phase)
	for _, cw := range w.Account.CapacityWrites() {
		if cw.By == sim.CallerAPI && cw.Group == group && (cw.Op == sim.OpSetDesiredCapacity || cw.Op == sim.OpTerminateInstance && cw.Decrement) {
			run.agentWrites++
		}
	}
	run.violations = w.Checker.Finish()
	for _, v := range run.violations {
		t.Logf("%s seed %d: %s", sw.name, seed, v)
	}
	if len(run.violations) > 0 || !run.ended {
		t.Logf("%s seed %d: capacity writes:\n%s", sw.name, seed, writesTrace(w, group))
	}
	return run
}

// writesTrace lists the group's capacity writes and terminations in time order, for the log of a run that
// broke an invariant.
func writesTrace(w *testworld.World, group string) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, cw := range w.Account.CapacityWrites() {
		if cw.Group == group {
			lines = append(lines, line{cw.At, cw.String()})
		}
	}
	for _, term := range w.Account.Terminations() {
		if term.Group == group {
			lines = append(lines, line{term.RequestedAt, fmt.Sprintf("%s terminate %s cause %s", term.RequestedAt.Format(time.TimeOnly), term.InstanceID, term.Cause)})
		}
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].at.Before(lines[j].at) })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("  " + l.text + "\n")
	}
	return b.String()
}

// soakTable renders the runs as a Markdown table per world and the violations by kind.
func soakTable(runs []soakRun) string {
	var b strings.Builder
	byWorld := map[string][]soakRun{}
	var worlds []string
	for _, r := range runs {
		if _, ok := byWorld[r.world]; !ok {
			worlds = append(worlds, r.world)
		}
		byWorld[r.world] = append(byWorld[r.world], r)
	}
	for _, name := range worlds {
		rs := byWorld[name]
		fmt.Fprintf(&b, "### %s (%d seeds)\n\n", name, len(rs))
		b.WriteString("| seed | rollout | took | writer's writes | operator | agent's capacity writes | violations | inv 1 | inv 2 | inv 3 | inv 4 |\n")
		b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
		withViolations, notEnded, total := 0, 0, 0
		kinds := map[string]int{}
		for _, r := range rs {
			p := r.perInvariant()
			phase := r.phase
			if !r.ended {
				phase += " (did not end in 4 h)"
				notEnded++
			}
			if r.err != "" {
				phase += " (error: " + r.err + ")"
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %d | %v | %d | %d | %d | %d | %d | %d |\n", r.seed, phase, r.took.Round(time.Minute), r.writes, r.operator,
				r.agentWrites, len(r.violations), p[1], p[2], p[3], p[4])
			if len(r.violations) > 0 {
				withViolations++
			}
			total += len(r.violations)
			for _, v := range r.violations {
				kinds[kind(v)]++
			}
		}
		fmt.Fprintf(&b, "\n%d of %d seeds with violations (%d in all), %d rollouts that did not end.\n\n", withViolations, len(rs), total, notEnded)
		if len(kinds) > 0 {
			b.WriteString("| violations | invariant: kind |\n| --- | --- |\n")
			names := sortedKeys(kinds)
			sort.SliceStable(names, func(i, j int) bool { return kinds[names[i]] > kinds[names[j]] })
			for _, k := range names {
				fmt.Fprintf(&b, "| %d | %s |\n", kinds[k], strings.ReplaceAll(k, "|", "/"))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRolloutsBesideARandomAutoscalerAndAnOperatorHoldEveryInvariant rolls, for each seed (testenv.Seeds: 3 in
// `make test`, $PATCH_AGENT_SEEDS in `make soak`), an ECS group and an EKS self-managed group by instance refresh
// while a random autoscaler moves desired capacity and an operator terminates one instance without decrement:
// every rollout completes, the checker reports no violation (serving capacity never below the desired capacity
// the others set, no instance terminated undrained, every lifecycle action completed once) and the agent makes
// no capacity write. The table is logged, and written to $PATCH_AGENT_SOAK_REPORT when set (docs/testing.md,
// "Rollouts under other writers").
func TestRolloutsBesideARandomAutoscalerAndAnOperatorHoldEveryInvariant(t *testing.T) {
	seeds := testenv.Seeds(t, []uint64{1, 2, 3})
	var runs []soakRun
	for _, sw := range soakWorlds {
		for _, seed := range seeds {
			runs = append(runs, playSoak(t, sw, seed))
		}
	}
	table := soakTable(runs)
	t.Logf("rollouts under a random autoscaler and an operator:\n%s", table)
	if path := os.Getenv(SoakReportEnv); path != "" {
		doc := "# Rollouts under other writers\n\nTestRolloutsBesideARandomAutoscalerAndAnOperatorHoldEveryInvariant, seeds " + fmt.Sprint(seeds) + "\n\n" + table
		require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
	}
	for _, r := range runs {
		require.Empty(t, r.err, "%s seed %d", r.world, r.seed)
		require.True(t, r.ended, "%s seed %d: the rollout ended", r.world, r.seed)
		require.Equal(t, string(state.PhaseCompleted), r.phase, "%s seed %d", r.world, r.seed)
		require.Empty(t, r.violations, "%s seed %d", r.world, r.seed)
		require.Zero(t, r.agentWrites, "%s seed %d: the agent wrote desired capacity", r.world, r.seed)
	}
}
