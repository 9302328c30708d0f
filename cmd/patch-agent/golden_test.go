//go:build !nodemo

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/schema"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Golden tests of the CLI's outputs: `go test ./cmd/patch-agent -run Golden -update` rewrites
// testdata/*.golden from the current output; review the diff like code.

var goldenAt = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// fullFleet writes a state file whose records exercise every column and every JSON field: a rollout whose
// instance refresh is cancelled under the global pause and its own, a completed one, an older agent's halted
// one with a reason longer than any terminal, a group with no target yet, a managed node group rolled back, and history.
func fullFleet(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	m := state.NewMemory()
	for _, r := range []state.Rollout{
		{Group: "prod-ecs-asg", Platform: "ecs", Cluster: "prod", Phase: state.PhaseReplacing, TargetImageID: testworld.ImageB,
			PreviousImageID: testworld.ImageA, DetectedAt: goldenAt, UpdatedAt: goldenAt.Add(7 * time.Minute), Instances: 4, OnTarget: 1,
			Reason: "cancelling instance refresh 1f0dc61a-bdd6-456f-b9d8-c207382c5cf2: paused (global) by alice since 2026-11-30T02:05:00Z: " +
				"incident 4711; next step: a new instance refresh that skips the instances already on the target",
			Strategy: model.StrategyRefresh, Current: &state.Replacement{Step: state.StepInstanceRefresh},
			Refresh: &state.RefreshProgress{LaunchTemplateID: "lt-0a1b2c3d4e5f60718", Version: "2", PreviousVersion: "1",
				MinHealthyPercentage: 100, MaxHealthyPercentage: 125, BatchSize: 1, Desired: 4, InstanceWarmup: 300,
				StartedAt: goldenAt.Add(time.Minute), ID: "1f0dc61a-bdd6-456f-b9d8-c207382c5cf2", Status: "Cancelling",
				StatusReason: "Waiting for 1 launches and 0 terminations in progress before cancelling.", PercentageComplete: 25,
				InstancesToUpdate: 3, Cancel: "paused (global) by alice since 2026-11-30T02:05:00Z: incident 4711"}},
		{Group: "prod-eks-nodes", Platform: "eks", Cluster: "prod-eks", Phase: state.PhaseCompleted, TargetImageID: testworld.ImageB,
			PreviousImageID: testworld.ImageA, DetectedAt: goldenAt, UpdatedAt: goldenAt.Add(9 * time.Minute), Instances: 3, OnTarget: 3},
		// A rollout an older patch-agent left mid-replacement by its surge strategy, halted by this one.
		{Group: "batch-ecs-with-a-rather-long-auto-scaling-group-name", Platform: "ecs", Cluster: "batch", Phase: state.PhaseHalted,
			TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA, DetectedAt: goldenAt, UpdatedAt: goldenAt.Add(40 * time.Minute),
			Instances: 5, OnTarget: 2, Strategy: "surge", Warning: model.DeprecatedStrategyNote("surge"),
			Current: &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-0ccccccccccccccc3"},
			Reason: "failed: " + engine.OlderEngineReason("batch-ecs-with-a-rather-long-auto-scaling-group-name", "surge",
				&state.Replacement{Step: state.StepDraining, OldInstanceID: "i-0ccccccccccccccc3"})},
		{Group: "new-group", Platform: "ecs", Phase: state.PhaseIdle},
		// A managed node group an operator rolled back (`patch-agent rollback nodegroup/prod-eks/workers`): TARGET
		// AMI is the AMI the rollback went back to, not the one rolled back from.
		{Group: "nodegroup/prod-eks/workers", Platform: "eks-managed", Cluster: "prod-eks", Phase: state.PhaseRolledBack,
			TargetImageID: testworld.ImageB, PreviousImageID: testworld.ImageA, RollbackFrom: testworld.ImageB, DetectedAt: goldenAt,
			UpdatedAt: goldenAt.Add(50 * time.Minute), Instances: 2, OnTarget: 2, Reason: "rolled back after: manual rollback by alice",
			Nodegroup: &state.NodegroupProgress{Cluster: "prod-eks", Name: "workers", AMIType: "CUSTOM", Rollback: true,
				UpdateStatus: "Successful", RequestedBy: "alice"}},
		// As the agent records the Auto Scaling group of a managed node group tagged for patch-agent.
		{Group: "eks-workers-0c1d2e3f", Platform: "eks", Phase: state.PhaseHalted, UpdatedAt: goldenAt.Add(time.Minute),
			Reason: "not rolled: group eks-workers-0c1d2e3f is opted in but not rolled: the Auto Scaling group of an EKS managed node group is never " +
				"rolled as a group (it carries eks:nodegroup-name=workers: EKS drains and replaces its nodes; tag the managed node group workers instead)"},
	} {
		_, err := m.PutRollout(ctx, r)
		require.NoError(t, err)
	}
	far := time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC) // still active when the test runs
	require.NoError(t, m.PutLock(ctx, state.Lock{Reason: "incident 4711", Who: "alice", Since: goldenAt.Add(5 * time.Minute)}))
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "prod-ecs-asg", Reason: "game day", Who: "bob", Since: goldenAt, Until: far}))
	for _, e := range []state.HistoryEntry{
		{Group: "prod-ecs-asg", At: goldenAt, Event: "detected", PreviousImage: testworld.ImageA, NewImage: testworld.ImageB, Source: "/golden-ami/ecs/al2023", SourceVersion: 2},
		{Group: "prod-ecs-asg", At: goldenAt.Add(time.Minute), Event: "approved", NewImage: testworld.ImageB, Detail: "carol"},
		{Group: "prod-ecs-asg", At: goldenAt.Add(2 * time.Minute), Event: "rolling-back", PreviousImage: testworld.ImageA, NewImage: testworld.ImageB,
			Detail: "launch of i-0bbbbbbbbbbbbbbb2 ABANDONed by lifecycle hook patch-agent-launch (not healthy in cluster after 10m0s)"},
		{Group: "prod-ecs-asg", At: goldenAt.Add(3 * time.Minute), Event: "rolled-back", PreviousImage: testworld.ImageB, NewImage: testworld.ImageA,
			Detail: "launch of i-0bbbbbbbbbbbbbbb2 ABANDONed by lifecycle hook patch-agent-launch (not healthy in cluster after 10m0s)"},
	} {
		require.NoError(t, m.AppendHistory(ctx, e))
	}
	file := filepath.Join(t.TempDir(), "full.json")
	require.NoError(t, cli.SaveSnapshot(file, m))
	return file
}

func emptyFleet(t *testing.T) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "empty.json")
	require.NoError(t, cli.SaveSnapshot(file, state.NewMemory()))
	return file
}

func TestGoldenCLIOutputs(t *testing.T) {
	full, empty := fullFleet(t), emptyFleet(t)
	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"status-empty.table", []string{"status", "--state-file", empty}},
		{"status-empty.json", []string{"status", "-o", "json", "--state-file", empty}},
		{"status-full.table", []string{"status", "--state-file", full}},
		{"status-full.wide", []string{"status", "-o", "wide", "--state-file", full}},
		{"status-full.json", []string{"status", "-o", "json", "--state-file", full}},
		{"history.table", []string{"history", "prod-ecs-asg", "--state-file", full}},
		{"history.wide", []string{"history", "prod-ecs-asg", "-o", "wide", "--state-file", full}},
		{"history.json", []string{"history", "prod-ecs-asg", "-o", "json", "--state-file", full}},
		{"history-empty.json", []string{"history", "new-group", "-o", "json", "--state-file", full}},
		{"demo-rollout.text", []string{"demo"}},
		{"demo-rollout.json", []string{"demo", "-o", "json"}},
		{"demo-pause.text", []string{"demo", "--scenario", "pause"}},
		{"demo-crash.text", []string{"demo", "--scenario", "crash"}},
		{"demo-bad-ami.text", []string{"demo", "--scenario", "bad-ami"}},
		{"demo-approval.text", []string{"demo", "--scenario", "approval"}},
		{"demo-alarm-gate.text", []string{"demo", "--scenario", "alarm-gate"}},
		{"demo-managed-node-group.text", []string{"demo", "--scenario", "managed-node-group"}},
		{"demo-managed-node-group.json", []string{"demo", "--scenario", "managed-node-group", "-o", "json"}},
		{"demo-eks-upgrade.text", []string{"demo", "--scenario", "eks-upgrade"}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			res := run(t, c.args...)
			require.NoError(t, res.err, res.stderr)
			goldenFile(t, filepath.Join("testdata", c.golden+".golden"), res.stdout)
		})
	}
}

// The default tables fit a terminal of 120 columns, whatever the names and reasons; -o wide cuts nothing.
func TestDefaultTablesFit120Columns(t *testing.T) {
	full := fullFleet(t)
	for _, c := range []struct {
		args []string
		tail string // the end of a long cell, cut in the default table
	}{
		{[]string{"status"}, "rolls the group by instance refresh"},
		{[]string{"history", "prod-ecs-asg"}, "(not healthy in cluster after 10m0s)"},
	} {
		args := c.args
		res := run(t, append(args, "--state-file", full)...)
		require.NoError(t, res.err)
		for _, l := range strings.Split(strings.TrimRight(res.stdout, "\n"), "\n") {
			require.LessOrEqual(t, utf8.RuneCountInString(l), operator.TableWidth, l)
		}
		wide := run(t, append(args, "-o", "wide", "--state-file", full)...)
		require.NoError(t, wide.err)
		require.NotContains(t, res.stdout, c.tail, "the default table cuts it")
		require.Contains(t, wide.stdout, c.tail, "wide keeps the whole cell")
		require.NotContains(t, wide.stdout, "…")
	}
}

// statusRowKeys are the fields every row of `status -o json` has, set or not.
var statusRowKeys = []string{"group", "platform", "cluster", "targetImageId", "previousImageId", "changedAt", "instances",
	"onTarget", "other", "phase", "step", "currentInstance", "refresh", "reason", "warning", "setBack", "paused", "groupPause", "updatedAt"}

// historyEntryKeys are the fields every entry of `history -o json` has.
var historyEntryKeys = []string{"at", "event", "fromImageId", "toImageId", "previousImageId", "newImageId", "source", "sourceVersion", "detail"}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

// The machine-readable outputs carry schemaVersion and the same fields on an empty and on a full fleet: a
// field never appears or disappears with the state.
func TestJSONSchemaOnAnEmptyAndAFullFleet(t *testing.T) {
	full, empty := fullFleet(t), emptyFleet(t)
	for _, c := range []struct {
		name  string
		file  string
		count int
	}{{"empty fleet", empty, 0}, {"full fleet", full, 6}} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, "status", "-o", "json", "--state-file", c.file)
			require.NoError(t, res.err)
			var doc map[string]any
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
			require.Equal(t, []string{"groups", "schemaVersion"}, keysOf(doc))
			require.Equal(t, float64(schema.Version), doc["schemaVersion"])
			groups, ok := doc["groups"].([]any)
			require.True(t, ok, "groups is a list, [] when empty: %s", res.stdout)
			require.Len(t, groups, c.count)
			for _, g := range groups {
				row := g.(map[string]any)
				require.Equal(t, sorted(statusRowKeys), keysOf(row), "row %v", row["group"])
				for _, k := range []string{"changedAt", "updatedAt"} {
					if v, ok := row[k].(string); ok {
						require.NotContains(t, v, "0001-01-01", "a time not set is null")
					}
				}
				if p, ok := row["paused"].(map[string]any); ok {
					require.Equal(t, []string{"reason", "scope", "since", "until", "who"}, keysOf(p))
				}
			}
		})
	}
	for _, group := range []string{"prod-ecs-asg", "new-group"} {
		res := run(t, "history", group, "-o", "json", "--state-file", full)
		require.NoError(t, res.err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
		require.Equal(t, []string{"entries", "group", "schemaVersion"}, keysOf(doc))
		entries, ok := doc["entries"].([]any)
		require.True(t, ok, "entries is a list, [] when empty: %s", res.stdout)
		for _, e := range entries {
			require.Equal(t, sorted(historyEntryKeys), keysOf(e.(map[string]any)))
		}
	}
}

// The demo's summary has schemaVersion, every field, and its metrics as {name, dimensions, value}, not as
// keys like "DrainSeconds{Group=...}".
func TestDemoJSONSchema(t *testing.T) {
	res := run(t, "demo", "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, float64(schema.Version), doc["schemaVersion"])
	require.Equal(t, []string{"expectedState", "groups", "invariantViolations", "messages", "metrics", "restarts", "scenario",
		"schemaVersion", "simulatedSeconds", "violations"}, keysOf(doc))
	require.Equal(t, []any{}, doc["violations"])
	for _, g := range doc["groups"].([]any) {
		require.Equal(t, []string{"availabilityZones", "desired", "group", "instances", "minInServiceDuringRollout", "name", "onStatusImage", "onTarget",
			"phase", "platform", "reason", "state", "statusImageId", "step", "steps", "targetImageId"}, keysOf(g.(map[string]any)))
	}
	var drain bool
	for _, m := range doc["metrics"].([]any) {
		mm := m.(map[string]any)
		require.Equal(t, []string{"dimensions", "name", "value"}, keysOf(mm))
		require.NotContains(t, mm["name"], "{")
		if mm["name"] == "DrainSeconds" && mm["dimensions"].(map[string]any)["Group"] == testworld.GroupName {
			drain = true
			require.Equal(t, "ecs", mm["dimensions"].(map[string]any)["Platform"])
		}
	}
	require.True(t, drain, "DrainSeconds of %s is a series with its dimensions", testworld.GroupName)
}

// The demo's text is the same from run to run (the golden file above holds it): the crash scenario used to
// report a different number of failed messages and instance ids each time.
func TestDemoTextIsDeterministic(t *testing.T) {
	for _, sc := range []string{"rollout", "crash"} {
		first := run(t, "demo", "--scenario", sc)
		require.NoError(t, first.err)
		for range 2 {
			again := run(t, "demo", "--scenario", sc)
			require.NoError(t, again.err)
			require.Equal(t, first.stdout, again.stdout, sc)
		}
	}
}

// The pause scenario prints the drain that began before the operator's pause first, at the time it began.
func TestDemoPausePrintsTheDrainBeforeThePause(t *testing.T) {
	res := run(t, "demo", "--scenario", "pause")
	require.NoError(t, res.err)
	lines := demoLines(res.stdout)
	pause := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "operator: patch-agent pause") })
	require.Positive(t, pause)
	drain := slices.IndexFunc(lines, func(l string) bool {
		f := strings.Fields(l[strings.Index(l, "]")+1:])
		return len(f) > 1 && f[0] == testworld.GroupName && f[1] == "Replacing/InstanceRefresh" && strings.Contains(l, "while it drains")
	})
	require.Positive(t, drain)
	require.Less(t, drain, pause, "the drain that made the operator pause is printed first")
	stamp := func(l string) string { return l[:strings.Index(l, "]")+1] }
	require.Equal(t, stamp(lines[pause]), stamp(lines[drain]), "both at the same simulated time")
}

// demoLines returns the demo's narrative as its lines read unwrapped: a line the demo wrapped at 120 columns
// goes on in lines indented by four spaces or more, joined here to it by one space.
func demoLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if len(lines) > 0 && strings.HasPrefix(l, "    ") {
			lines[len(lines)-1] += " " + strings.TrimLeft(l, " ")
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// A rollback plan names the platform's drain: an EKS node is cordoned, not set to DRAINING.
func TestRollbackPlanNamesThePlatformsDrain(t *testing.T) {
	file := demoState(t)
	for _, c := range []struct{ group, want, not string }{
		{testworld.GroupName, "drained (container instance DRAINING)", "cordon"},
		{testworld.EKSGroupName, "drained (node cordoned, pods evicted under their PodDisruptionBudgets)", "DRAINING"},
	} {
		res := run(t, "rollback", c.group, "--yes", "--who", "alice", "--state-file", file)
		require.NoError(t, res.err, res.stderr)
		require.Contains(t, res.stdout, c.want)
		require.NotContains(t, res.stdout, c.not)
	}
}

// The picture in README and docs/operations.md is the default demo's timeline as the code draws it now:
// -update redraws it.
func TestDemoTimelinePictureInTheDocsIsCurrent(t *testing.T) {
	file := filepath.Join(t.TempDir(), "timeline.svg")
	res := run(t, "demo", "--timeline", file)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "timeline drawn to "+file)
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "<svg "))
	goldenFile(t, filepath.Join("..", "..", "docs", "img", "demo-rollout-timeline.svg"), string(b))
}

// TestEKSUpgradeDemoJSONHasTheSchemaVersionAndDeterministicText: the eks-upgrade demo's --json document starts
// with schemaVersion like every other machine-readable output, and its text keeps the wall time off stdout.
func TestEKSUpgradeDemoJSONHasTheSchemaVersionAndDeterministicText(t *testing.T) {
	res := run(t, "demo", "--scenario", "eks-upgrade", "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
	require.Equal(t, float64(schema.Version), doc["schemaVersion"])
	require.Equal(t, "eks-upgrade", doc["scenario"])
	text := run(t, "demo", "--scenario", "eks-upgrade")
	require.NoError(t, text.err, text.stderr)
	require.NotContains(t, text.stdout, "wall time")
	require.Contains(t, text.stderr, "wall time")
}

// The demo's summary and status, reading the same records, say the same thing of each group: its phase, the
// AMI it is rolled to (a rollback's: the AMI it goes back to) and how many instances run it.
func TestDemoSummaryAndStatusAgreeOnEachGroup(t *testing.T) {
	for _, sc := range []string{"rollout", "bad-ami"} {
		t.Run(sc, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "demo.json")
			res := run(t, "demo", "--scenario", sc, "--state-file", file)
			require.NoError(t, res.err, res.stderr)
			summary := map[string][]string{} // group -> phase, target AMI, on target
			lines := strings.Split(res.stdout, "\n")
			head := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "GROUP ") })
			require.Positive(t, head, res.stdout)
			for _, l := range lines[head+1:] {
				f := strings.Fields(l)
				if len(f) < 8 {
					break
				}
				summary[f[0]] = []string{f[6], f[2], strings.Split(f[4], "/")[0]}
			}
			require.Len(t, summary, 2, res.stdout)
			st := run(t, "status", "-o", "json", "--state-file", file)
			require.NoError(t, st.err, st.stderr)
			var doc operator.StatusDocument
			require.NoError(t, json.Unmarshal([]byte(st.stdout), &doc))
			for _, row := range doc.Groups {
				require.Equal(t, summary[row.Group], []string{row.Phase.String(), row.TargetImageID, strconv.Itoa(row.OnTarget)}, row.Group)
			}
		})
	}
}

// A script reads the demo's summary and status's document with one vocabulary: each group of `demo -o json`
// has status's group, phase and step with status's values for the state the demo saved, and keeps its older
// keys name and state with the same values.
func TestDemoJSONGroupsSpeakStatusWords(t *testing.T) {
	for _, sc := range []string{"rollout", "bad-ami", "soak"} {
		t.Run(sc, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "demo.json")
			res := run(t, "demo", "--scenario", sc, "--state-file", file, "-o", "json")
			require.NoError(t, res.err, res.stderr)
			var summary struct {
				Groups []map[string]any `json:"groups"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &summary))
			st := run(t, "status", "-o", "json", "--state-file", file)
			require.NoError(t, st.err, st.stderr)
			var status struct {
				Groups []map[string]any `json:"groups"`
			}
			require.NoError(t, json.Unmarshal([]byte(st.stdout), &status))
			require.Len(t, summary.Groups, len(status.Groups))
			for i, row := range status.Groups {
				g := summary.Groups[i]
				for _, k := range []string{"group", "phase", "step"} {
					require.Contains(t, g, k, "demo's group %v", g["name"])
					require.Equal(t, row[k], g[k], "%s of %s", k, row["group"])
				}
				require.Equal(t, g["group"], g["name"], "name is kept")
				require.Equal(t, g["phase"], g["state"], "state is kept")
			}
		})
	}
}
