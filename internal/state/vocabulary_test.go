package state_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// The vocabulary lists exactly the phases and steps the transition table names, each with a meaning: a new
// row with a new step cannot reach a printer unexplained.
func TestVocabularyIsTheTransitionTablesWords(t *testing.T) {
	var phases []state.Phase
	var steps []state.Step
	for _, tr := range state.Transitions {
		for _, p := range []state.Position{tr.From, tr.To} {
			if p.Phase != "" && !slices.Contains(phases, p.Phase) {
				phases = append(phases, p.Phase)
			}
			if p.Step != "" && !slices.Contains(steps, p.Step) {
				steps = append(steps, p.Step)
			}
		}
	}
	require.ElementsMatch(t, phases, state.Phases())
	require.ElementsMatch(t, steps, state.Steps())
	for _, p := range state.Phases() {
		require.NotEmpty(t, state.PhaseMeaning(p), "phase %s has no meaning", p)
		require.True(t, state.IsPhase(string(p)))
	}
	for _, s := range state.Steps() {
		require.NotEmpty(t, state.StepMeaning(s), "step %s has no meaning", s)
		require.True(t, state.IsStep(string(s)))
	}
}

func TestVocabularyKnowsPositionsAsPrinted(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"Replacing/ReplacementHealthy", true},
		{"Halted/InstanceRefresh", true},
		{"Completed", true},
		{"Replacing/waiting-for-replacement", false},
		{"Replacing/draining", false},
		{"Idle/Draining", false},
		{"Draining", false},
	} {
		require.Equal(t, c.want, state.IsPosition(c.s), c.s)
	}
	require.Equal(t, "Replacing/Draining", state.Position{Phase: state.PhaseReplacing, Step: state.StepDraining}.String())
}

// TestVocabularyTableMatchesOperationsDoc keeps the vocabulary of docs/operations.md equal to the table;
// -update rewrites it.
func TestVocabularyTableMatchesOperationsDoc(t *testing.T) {
	const begin, end = "<!-- vocabulary:begin -->\n", "<!-- vocabulary:end -->"
	path := filepath.Join("..", "..", "docs", "operations.md")
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(doc)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	require.True(t, i >= 0 && j > i, "docs/operations.md has no %q ... %q section", begin, end)
	want := state.VocabularyTable()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(s[:i+len(begin)]+want+s[j:]), 0o644))
		return
	}
	require.Equal(t, want, s[i+len(begin):j], "docs/operations.md's vocabulary differs from the state package: run go test ./internal/state -run TestVocabularyTable -update")
}

// positionInDocsRE matches a phase followed by "/" and a word in the docs: a position ("Replacing/Draining")
// or phases given as alternatives ("Idle/Completed/RolledBack").
var positionInDocsRE = regexp.MustCompile(`\b(Idle|Detected|Waiting|Preparing|Replacing|Verifying|Completed|Halted|RollingBack|RolledBack)(/[A-Za-z_-]+)+`)

// The docs name positions in the words of the vocabulary: every "Phase/Word" is a position the table knows,
// or a list of phases.
func TestDocsNamePositionsInTheVocabulary(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	require.NoError(t, err)
	files = append(files, filepath.Join("..", "..", "README.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range positionInDocsRE.FindAllString(string(b), -1) {
			phases := true
			for _, w := range strings.Split(m, "/") {
				phases = phases && state.IsPhase(w)
			}
			require.True(t, phases || state.IsPosition(m), "%s: %q is not a position of the state vocabulary (docs/operations.md, \"Phases and steps\")", filepath.Base(f), m)
		}
	}
}
