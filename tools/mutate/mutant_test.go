package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const drainGo = `package rollout

// Drained reports whether the old instance may be terminated.
func (o *Orchestrator) drainOld(done bool) bool {
	if done {
		return true
	}
	return false
}

type Orchestrator struct{}

func helper() int { return 1 }
`

const terminateBeforeDrain = `# why: terminates before the drain
# invariant: 2
# set: curated
# kill: ./rollout/ -run '^TestDrain$'

@@ rollout (*Orchestrator).drainOld
-	if done {
+	if done || true { // mutant
`

// tree writes files (path -> text) under a new directory and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, text := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(text), 0o644))
	}
	return root
}

func mutant(t *testing.T, text string) *Mutant {
	t.Helper()
	p := filepath.Join(t.TempDir(), "01-x.mutant")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	m, err := ReadMutant(p)
	require.NoError(t, err)
	return m
}

func TestMutantAppliesByDeclarationName(t *testing.T) {
	root := tree(t, map[string]string{"rollout/drain.go": drainGo})
	m := mutant(t, terminateBeforeDrain)
	require.Equal(t, []string{"2"}, m.Headers["invariant"])
	require.True(t, m.Curated())

	require.NoError(t, Apply(root, m))
	b, err := os.ReadFile(filepath.Join(root, "rollout/drain.go"))
	require.NoError(t, err)
	require.Contains(t, string(b), "\tif done || true { // mutant\n")
	require.NotContains(t, string(b), "\tif done {\n")
}

func TestMutantFollowsItsFunctionAcrossLinesFilesAndIndentation(t *testing.T) {
	// The function moved to another file of the package, below new code, and re-indented inside a block.
	moved := "package rollout\n\nfunc other() {}\n\nfunc (o *Orchestrator) drainOld(done bool) bool {\n\t{\n\t\tif done {\n\t\t\treturn true\n\t\t}\n\t}\n\treturn false\n}\n"
	root := tree(t, map[string]string{
		"rollout/types.go":  "package rollout\n\ntype Orchestrator struct{}\n",
		"rollout/retire.go": moved,
	})
	require.NoError(t, Apply(root, mutant(t, terminateBeforeDrain)))
	b, err := os.ReadFile(filepath.Join(root, "rollout/retire.go"))
	require.NoError(t, err)
	require.Contains(t, string(b), "if done || true { // mutant")
}

func TestMutantOfARenamedFunctionDoesNotApply(t *testing.T) {
	renamed := strings.Replace(drainGo, "drainOld", "retireOld", 1)
	root := tree(t, map[string]string{"rollout/drain.go": renamed})
	err := Apply(root, mutant(t, terminateBeforeDrain))
	require.True(t, IsNoApply(err), "got %v", err)
	require.Contains(t, err.Error(), "no declaration (*Orchestrator).drainOld")
	b, _ := os.ReadFile(filepath.Join(root, "rollout/drain.go"))
	require.Equal(t, renamed, string(b), "nothing is written")
}

func TestMutantWhoseLinesAreGoneOrAmbiguousDoesNotApply(t *testing.T) {
	gone := strings.Replace(drainGo, "if done {", "if done && ok {", 1)
	err := Apply(tree(t, map[string]string{"rollout/drain.go": gone}), mutant(t, terminateBeforeDrain))
	require.True(t, IsNoApply(err), "got %v", err)
	require.Contains(t, err.Error(), "not in the declaration")

	twice := strings.Replace(drainGo, "\treturn false\n", "\tif done {\n\t\treturn false\n\t}\n\treturn false\n", 1)
	err = Apply(tree(t, map[string]string{"rollout/drain.go": twice}), mutant(t, terminateBeforeDrain))
	require.True(t, IsNoApply(err), "got %v", err)
	require.Contains(t, err.Error(), "occur 2 times")
}

func TestMutantLinesOutsideTheirDeclarationDoNotCount(t *testing.T) {
	// The same lines in another function are not the named function's.
	other := strings.Replace(drainGo, "func helper() int { return 1 }", "func helper(done bool) int {\n\tif done {\n\t\treturn 1\n\t}\n\treturn 0\n}", 1)
	other = strings.Replace(other, "\tif done {\n\t\treturn true\n\t}\n", "", 1)
	err := Apply(tree(t, map[string]string{"rollout/drain.go": other}), mutant(t, terminateBeforeDrain))
	require.True(t, IsNoApply(err), "got %v", err)
}

func TestMalformedMutantsAreRefused(t *testing.T) {
	for name, text := range map[string]string{
		"no edit":             "# why: x\n",
		"edit changes none":   "# why: x\n\n@@ rollout drainOld\n \tif done {\n",
		"bad edit line":       "# why: x\n\n@@ rollout drainOld\n*\tif done {\n",
		"bad target":          "# why: x\n\n@@ rollout\n-\tif done {\n",
		"text before an edit": "why x\n@@ rollout drainOld\n-a\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.mutant")
			require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
			_, err := ReadMutant(p)
			require.Error(t, err)
		})
	}
	m := mutant(t, "# why: x\n# kill: internal/agent -run X\n\n@@ rollout drainOld\n-\tif done {\n")
	_, err := m.Kills()
	require.ErrorContains(t, err, "is not of the form")
}

func TestFromDiffWritesTheSameChangeByName(t *testing.T) {
	root := tree(t, map[string]string{"rollout/drain.go": drainGo})
	diff := "# why: terminates before the drain\n# kill-first: ./rollout/ -run '^TestDrain$'\n\n" +
		"diff --git a/rollout/drain.go b/rollout/drain.go\n--- a/rollout/drain.go\n+++ b/rollout/drain.go\n" +
		"@@ -90,7 +90,7 @@ func (o *Orchestrator) drainOld(done bool) bool {\n" + // a stale line number, as git apply allows
		" // Drained reports whether the old instance may be terminated.\n func (o *Orchestrator) drainOld(done bool) bool {\n" +
		"-\tif done {\n+\tif done || true { // mutant\n \t\treturn true\n \t}\n \treturn false\n"
	out, err := FromDiff(root, diff)
	require.NoError(t, err)
	require.Contains(t, out, "# kill: ./rollout/ -run '^TestDrain$'\n")
	require.Contains(t, out, "@@ rollout (*Orchestrator).drainOld\n-\tif done {\n+\tif done || true { // mutant\n")
}

// TestMutantsScript runs scripts/mutants.sh on a small module: a mutant its kill test catches is killed, one
// whose function was renamed fails the run as NO-APPLY, one no test catches fails it as SURVIVED, and the null
// mutant survives.
func TestMutantsScript(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test on a scratch module")
	}
	for _, tool := range []string{"git", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found", tool)
		}
	}
	_, here, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(here), "..", "..")
	bin := filepath.Join(t.TempDir(), "mutate")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Dir(here)
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	testGo := "package rollout\n\nimport \"testing\"\n\nfunc TestDrain(t *testing.T) {\n\tif (&Orchestrator{}).drainOld(false) {\n\t\tt.Fatal(\"terminated undrained\")\n\t}\n}\n"
	root := tree(t, map[string]string{
		"go.mod":                    "module example.com/m\n\ngo 1.22\n",
		"rollout/drain.go":          drainGo,
		"rollout/drain_test.go":     testGo,
		"mutants/00-null.mutant":    "# why: nothing\n\n@@ rollout helper\n+\t// mutant: null\n-func helper() int { return 1 }\n+func helper() int { return 1 }\n",
		"mutants/01-killed.mutant":  terminateBeforeDrain,
		"mutants/02-renamed.mutant": strings.Replace(terminateBeforeDrain, "drainOld", "drainOldInstance", 1),
		"mutants/03-survives.mutant": "# why: nothing a test checks\n# set: curated\n# kill: ./rollout/ -run '^TestDrain$'\n\n" +
			"@@ rollout helper\n-func helper() int { return 1 }\n+func helper() int { return 2 }\n",
	})
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "base"}} {
		c := exec.Command("git", args...)
		c.Dir = root
		out, err := c.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	script := exec.Command("bash", filepath.Join(repo, "scripts", "mutants.sh"))
	script.Env = append(os.Environ(), "MUTANTS_ROOT="+root, "MUTANTS_DIR=mutants", "MUTATE="+bin, "MUTANTS_JOBS=1")
	out, err = script.CombinedOutput()
	require.Error(t, err, "a NO-APPLY or a survivor fails the run:\n%s", out)
	lines := string(out)
	require.Regexp(t, `00-null\s+survived`, lines)
	require.Regexp(t, `01-killed\s+killed\s+\d+\s+\./rollout/ TestDrain`, lines)
	require.Regexp(t, `02-renamed\s+NO-APPLY\s+\d+\s+.*no declaration \(\*Orchestrator\)\.drainOldInstance`, lines)
	require.Regexp(t, `03-survives\s+SURVIVED`, lines)
}

// TestEveryMutantOfTheRepositoryIsWellFormedAndTheCuratedSetApplies keeps testdata/mutants honest in `make
// test`: each mutant parses and names the tests expected to kill it, and each curated mutant (what CI runs)
// still applies to the code by its declaration's name.
func TestEveryMutantOfTheRepositoryIsWellFormedAndTheCuratedSetApplies(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(here), "..", "..")
	files, err := filepath.Glob(filepath.Join(repo, "testdata", "mutants", "*.mutant"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	curated := 0
	for _, f := range files {
		m, err := ReadMutant(f)
		require.NoError(t, err)
		require.NotEmpty(t, m.Headers["why"], "%s: # why: says what the bug breaks", m.Name)
		ks, err := m.Kills()
		require.NoError(t, err)
		if m.Name == "00-null" {
			require.Empty(t, ks, "the null mutant runs every kill test of its run")
		} else {
			require.NotEmpty(t, ks, "%s: # kill: names the test expected to kill it", m.Name)
		}
		if m.Curated() || m.Name == "00-null" {
			curated++
			require.NotEmpty(t, m.Headers["invariant"], "%s: a curated mutant names the invariant it breaks", m.Name)
			_, err := Plan(repo, m)
			require.NoError(t, err, "%s no longer applies: write it again against the code, or drop it from the curated set", m.Name)
		}
	}
	t.Logf("%d mutants, %d curated (with the null mutant)", len(files), curated)
}

func TestMutantInsideACommentOnlyDoesNotApply(t *testing.T) {
	// The real line changed; a comment in the function still holds the old text.
	src := strings.Replace(drainGo, "\tif done {\n\t\treturn true\n\t}\n", "\t/*\n\tif done {\n\t*/\n\tif done && true {\n\t\treturn true\n\t}\n", 1)
	err := Apply(tree(t, map[string]string{"rollout/drain.go": src}), mutant(t, terminateBeforeDrain))
	require.True(t, IsNoApply(err), "got %v", err)
	require.Contains(t, err.Error(), "changes only comments")
}

func TestMutantNamesGenericMethodsAndIgnoresFilesOtherPlatformsBuild(t *testing.T) {
	root := tree(t, map[string]string{
		"set/set.go":         "package set\n\ntype Set[K comparable] map[K]bool\n\nfunc (s Set[K]) Has(k K) bool {\n\treturn s[k]\n}\n",
		"set/limit_linux.go": "package set\n\nfunc limit() int {\n\treturn 1\n}\n",
		"set/limit_other.go": "//go:build !linux\n\npackage set\n\nfunc limit() int {\n\treturn 1\n}\n",
		"set/gen.go":         "//go:build ignore\n\npackage main\n\nfunc limit() int {\n\treturn 1\n}\n",
	})
	require.NoError(t, Apply(root, mutant(t, "# why: x\n\n@@ set (Set[K]).Has\n-\treturn s[k]\n+\treturn !s[k]\n")))
	if runtime.GOOS == "linux" {
		require.NoError(t, Apply(root, mutant(t, "# why: x\n\n@@ set limit\n-\treturn 1\n+\treturn 2\n")))
	}
}

// TestEveryKillHeaderNamesATestThatExists keeps kill headers from rotting: each -run pattern matches at least
// one top-level test of its package (a pattern that matches none would make go test run nothing and pass).
func TestEveryKillHeaderNamesATestThatExists(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(here), "..", "..")
	files, err := filepath.Glob(filepath.Join(repo, "testdata", "mutants", "*.mutant"))
	require.NoError(t, err)
	testsOf := map[string][]string{}
	funcRE := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	for _, f := range files {
		m, err := ReadMutant(f)
		require.NoError(t, err)
		ks, err := m.Kills()
		require.NoError(t, err)
		for _, k := range ks {
			names, ok := testsOf[k.Pkg]
			if !ok {
				srcs, err := filepath.Glob(filepath.Join(repo, k.Pkg, "*_test.go"))
				require.NoError(t, err)
				for _, src := range srcs {
					b, err := os.ReadFile(src)
					require.NoError(t, err)
					for _, g := range funcRE.FindAllSubmatch(b, -1) {
						names = append(names, string(g[1]))
					}
				}
				testsOf[k.Pkg] = names
			}
			re, err := regexp.Compile(k.Run)
			require.NoError(t, err, "%s: kill pattern %q", m.Name, k.Run)
			for _, alt := range strings.Split(strings.Trim(k.Run, "^$()"), "|") {
				found := false
				for _, n := range names {
					if re.MatchString(n) && strings.Contains(n, strings.Trim(alt, "^$()")) {
						found = true
					}
				}
				require.True(t, found, "%s: kill pattern %q names %s, not a test of %s", m.Name, k.Run, alt, k.Pkg)
			}
		}
	}
}
