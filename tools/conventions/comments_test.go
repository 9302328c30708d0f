package conventions

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// provenanceRE matches the citations a product comment must not make (STYLE.md, habit 11): a tracker number, a
// finding of a critique, or the project's own history ("before the fix", "earlier releases", "this round"):
// TestProvenancePatternIsPrecise lists what it must catch and what it must let through. A number after another
// word's '#' (aws-asg-roller#43, owner/repo#12: another project's tracker, cited as evidence) and field-case
// codes (C23) are not matched.
var provenanceRE = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`\bissues?\s+#?\d+`,
	`(?:^|[\s(\[{,;:])#\d+\b`,
	`\breview(?:er|ers)?\b`,
	`\bsession\s+\d+\b`,
	`\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|previous|\d+th)\s+session\b`,
	`\bthis round\b`,
	`\bbefore (?:the fix|its fix|this fix|this change)\b`,
	`\bearlier releases?\b`,
	`\btoday's code\b`,
}, "|"))

// beforeRE matches a sentence that opens on "Before," or "Before:", which tells what the code did before a
// change ("Before, the sweep ran every 20 s"); "before" inside a sentence is the code's own order of events.
var beforeRE = regexp.MustCompile(`(?:^|[.;:!?] )Before[,:] `)

// reviewWordRE matches the verb and noun uses of the word provenanceRE otherwise rejects that belong to the
// product itself (a pull request or a plan examined before approval): only these forms are allowed.
var reviewWordRE = regexp.MustCompile(`(?i)\b(?:to|and|then|can|must|may|should|please|for) review\b|\breview (?:the|a|its|their|each|every) (?:diff|plan|change|output|list)`)

// usedToRE finds "used to"; it cites history unless a form of "be" or "get" comes before it ("is used to
// sign", "gets used to").
var usedToRE = regexp.MustCompile(`(?i)(\w+)\s+used to\b`)

var notHistoryBeforeUsedTo = map[string]bool{"is": true, "are": true, "be": true, "been": true, "being": true,
	"was": true, "were": true, "get": true, "gets": true, "got": true}

// provenance returns what text cites, or "" when it cites nothing.
func provenance(text string) string {
	text = strings.Join(strings.Fields(text), " ")
	for _, m := range provenanceRE.FindAllStringIndex(text, -1) {
		hit := strings.TrimLeft(text[m[0]:m[1]], " \t([{,;:")
		if strings.HasPrefix(strings.ToLower(hit), "review") && reviewWordRE.MatchString(text[max(0, m[0]-12):min(len(text), m[1]+30)]) {
			continue
		}
		return hit
	}
	if m := beforeRE.FindString(text); m != "" {
		return strings.TrimLeft(m, ".;:!? ")
	}
	for _, m := range usedToRE.FindAllStringSubmatch(text, -1) {
		if !notHistoryBeforeUsedTo[strings.ToLower(m[1])] {
			return m[0]
		}
	}
	return ""
}

func TestProvenancePatternIsPrecise(t *testing.T) {
	for _, text := range []string{
		"the per-cluster budget (issue #20, items 1 and 10)",
		"a pass whose targets only wait reads none (issue #21).",
		"Issue 20 item 7: approve --skip-soak",
		"issue\n// #21 item 3",
		"#18: ECS never moves these",
		"never someone else's scale-out (review finding A).",
		"Recycled first, as before the pick (review 11c).",
		"Review 13b, M2: the old node",
		"Found by the fresh review.",
		"Safety review, max-instance-age: after a rollback",
		"as a reviewer asked",
		"(fresh review, session 8)",
		"review findings 1 and 5 of the ninth session",
		"issue #21 item 1 of this round",
		"The drain deadline must still hold — before the fix a drain retried every tick",
		"the simulation used to clear it every minute",
		"as in earlier releases",
		"takes the action up. Before, the sweep ran every 20 s",
		"Before: at 70 s the live record was closed",
		"Today's code halts at the health deadline",
	} {
		require.NotEmpty(t, provenance(text), "%q cites an issue, a review or history", text)
	}
	for _, text := range []string{
		"a newer AMI, as in aws-asg-roller#43 and kubernetes/autoscaler#5000",
		"Field case C23 (../shared/CASES.md): surge first",
		"C19, C4 and C18's family",
		"the key that is used to sign the request; the role gets used to it",
		"fill #6b7280, colour #16a34a",
		"a table of 100 rows; 20 items",
		"the plan the second operator approves after they review the plan",
		"an issue of the certificate, a tissue 4",
		"the previous release or launch template version",
		"no longer active (completed elsewhere or timed out)",
		"precheck reads the workload before the change: proceed or skip",
		"Before the drain starts, the slot is claimed; before, during and after it the record holds",
	} {
		require.Empty(t, provenance(text), "%q cites no issue, review or history", text)
	}
}

// TestProductCommentsCiteNoIssueReviewOrHistory parses every Go file of the repository outside testdata that
// is not a test and reads its comments: each says what the code does and why, in the present tense; which
// issue asked for it, which review found it and what the code did before belong in the commit message.
func TestProductCommentsCiteNoIssueReviewOrHistory(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(here), "..", "..")
	var found []string
	files := 0
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != repo && (name == "testdata" || name == "node_modules" || name == "vendor" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		files++
		rel, _ := filepath.Rel(repo, path)
		for _, g := range f.Comments {
			if hit := provenance(g.Text()); hit != "" {
				at := g.Pos() // the comment's first line, or the line the hit starts on
				for _, c := range g.List {
					if strings.Contains(strings.ToLower(c.Text), strings.ToLower(strings.Fields(hit)[0])) {
						at = c.Pos()
						break
					}
				}
				found = append(found, fmt.Sprintf("%s:%d: %q", rel, fset.Position(at).Line, hit))
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk reads the repository's Go files")
	require.Empty(t, found, "comments cite an issue, a review or history; say what the code does and why instead:\n%s",
		strings.Join(found, "\n"))
}
