package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Where the demo's and status's goldens name a rollout's position: the demo's progress lines ("[+ 15s] group
// Replacing/InstanceRefresh serving=..."), the managed node group demo's lines ("nodegroup/c/n: Phase/Step"),
// the eks-upgrade demo's rollout notes ("rollout Completed:"), and the PHASE and STEP columns of the tables.
var (
	demoProgressRE  = regexp.MustCompile(`^\[\+\s*\S+\] \S+\s+(\S+)\s.*\bserving=\d+ desired=`)
	nodegroupLineRE = regexp.MustCompile(`^\S+\s+nodegroup/[^:\s]+: (\S+)`)
	rolloutNoteRE   = regexp.MustCompile(`\brollout (\S+): \d+/\d+ `)
)

// positionsIn returns every position (a phase, or Phase/Step) and every bare step the golden text names in
// the places above.
func positionsIn(t *testing.T, text string) (positions, steps []string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		for _, re := range []*regexp.Regexp{demoProgressRE, nodegroupLineRE, rolloutNoteRE} {
			if m := re.FindStringSubmatch(l); m != nil {
				positions = append(positions, m[1])
			}
		}
		// A table: the header names PHASE (and STEP); each row below it until a blank line has the word at
		// the header's offset.
		ph := headerColumn(l, "PHASE")
		if ph < 0 || !strings.HasPrefix(l, "GROUP ") {
			continue
		}
		st := headerColumn(l, "STEP")
		for _, row := range lines[i+1:] {
			if strings.TrimSpace(row) == "" {
				break
			}
			if strings.HasPrefix(row, "  ") { // a wrapped reason
				continue
			}
			positions = append(positions, wordAt(row, ph))
			if st >= 0 {
				if w := wordAt(row, st); w != "-" {
					steps = append(steps, w)
				}
			}
		}
	}
	return positions, steps
}

// headerColumn returns the rune offset of the column named name in a table header ("" words are separated
// by two spaces or more), -1 when there is none.
func headerColumn(header, name string) int {
	for _, m := range regexp.MustCompile(`\S+( \S+)*`).FindAllStringIndex(header, -1) {
		if header[m[0]:m[1]] == name {
			return len([]rune(header[:m[0]]))
		}
	}
	return -1
}

func wordAt(row string, col int) string {
	r := []rune(row)
	if col >= len(r) {
		return ""
	}
	return strings.Fields(string(r[col:]))[0]
}

// The goldens of the demo and of status (and history's, which names no position) use one vocabulary: every
// phase and step they print is a word of the state package's, as status prints it; no printer has words of
// its own (the demo once printed Replacing/waiting-for-replacement where status printed ReplacementHealthy).
func TestDemoAndStatusGoldensShareTheStateVocabulary(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.golden"))
	require.NoError(t, err)
	seen := map[string][]string{} // "demo" or "status" -> positions and steps
	for _, f := range files {
		base := filepath.Base(f)
		kind := ""
		switch {
		case strings.HasPrefix(base, "demo-"):
			kind = "demo"
		case strings.HasPrefix(base, "status-"), strings.HasPrefix(base, "history"):
			kind = "status"
		default:
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var positions, steps []string
		if strings.HasSuffix(base, ".json.golden") {
			positions, steps = jsonPositions(t, b)
		} else {
			positions, steps = positionsIn(t, string(b))
		}
		for _, p := range positions {
			require.True(t, state.IsPosition(p), "%s: %q is not a phase or Phase/Step of the state vocabulary (internal/state/vocabulary.go)", base, p)
		}
		for _, s := range steps {
			require.True(t, state.IsStep(s), "%s: %q is not a step of the state vocabulary", base, s)
		}
		seen[kind] = append(append(seen[kind], positions...), steps...)
	}
	require.NotEmpty(t, seen["demo"], "the demo goldens name positions")
	require.NotEmpty(t, seen["status"], "the status goldens name positions")
	require.Contains(t, seen["demo"], "Replacing/InstanceRefresh", "the demo's default rollout")
	require.Contains(t, seen["status"], string(state.StepInstanceRefresh), "status's STEP column")
}

// jsonPositions returns the "phase" and "step" values of a golden JSON document (status's groups, the
// managed node group demo's summary).
func jsonPositions(t *testing.T, b []byte) (positions, steps []string) {
	t.Helper()
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["phase"].(string); ok && p != "" {
				positions = append(positions, p)
			}
			if s, ok := v["step"].(string); ok && s != "" {
				steps = append(steps, s)
			}
			if s, ok := v["state"].(string); ok && s != "" { // the demo summary's phase
				positions = append(positions, s)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	var doc any
	require.NoError(t, json.Unmarshal(b, &doc))
	walk(doc)
	return positions, steps
}

// A printer that names a position with a word of its own fails the scan above.
func TestVocabularyScanCatchesAWordOfItsOwn(t *testing.T) {
	positions, _ := positionsIn(t, "[+     15s] demo-ecs-asg   Replacing/waiting-for-refresh serving=3 desired=3 max=6 on-target=0/3\n")
	require.Equal(t, []string{"Replacing/waiting-for-refresh"}, positions)
	require.False(t, state.IsPosition(positions[0]))
	_, steps := positionsIn(t, "GROUP  PHASE      STEP      ON TARGET\ng      Replacing  draining  1/3\n")
	require.Equal(t, []string{"draining"}, steps)
	require.False(t, state.IsStep(steps[0]))
}
