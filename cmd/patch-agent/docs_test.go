//go:build !nodemo

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/config"
)

// docFiles are the documents whose tables the tests below hold to the command tree.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	paths, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	paths = append(paths, "../../README.md")
	docs := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		docs[strings.TrimPrefix(p, "../../")] = string(b)
	}
	return docs
}

// tableCells splits a Markdown table row into its trimmed cells; nil for a line that is not a row.
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
		return nil
	}
	cells := strings.Split(strings.Trim(line, "|"), " | ")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// withoutEnvDefaults clears the environment variables that flags take their defaults from, so that the
// defaults seen are the built-in ones the docs write.
func withoutEnvDefaults(t *testing.T) {
	for _, env := range []string{config.EnvQueueURL, config.EnvWakeUpQueueURL, config.EnvTable, config.EnvRegion, config.EnvLogLevel,
		config.EnvAllowedAMIOwners, config.EnvWakeUpEvents, config.EnvLeaseTTL, config.EnvHealthTimeout, config.EnvDrainTimeout,
		config.EnvClusterBudget} {
		t.Setenv(env, "")
	}
}

// envInUsage matches the environment variable a flag's usage names.
var envInUsage = regexp.MustCompile(` \(env ([A-Z_]+)\)`)

// hostDependent are the flags whose default is read from the machine: the docs name where it comes from.
var hostDependent = map[string]string{"owner-id": "the host name"}

// runFlagRow is the row of docs/operations.md's table of `run`'s flags that f is held to.
func runFlagRow(f *pflag.Flag) string {
	env, usage := "—", f.Usage
	if m := envInUsage.FindStringSubmatch(usage); m != nil {
		env, usage = "`"+m[1]+"`", strings.Replace(usage, m[0], "", 1)
	}
	def := "`" + f.DefValue + "`"
	switch {
	case hostDependent[f.Name] != "":
		def = hostDependent[f.Name]
	case f.DefValue == "" || f.DefValue == "[]":
		def = "none"
	}
	name := "`--" + f.Name + "`"
	if f.Shorthand != "" {
		name += ", `-" + f.Shorthand + "`"
	}
	return fmt.Sprintf("| %s | %s | %s | %s |", name, env, def, strings.ReplaceAll(usage, "|", `\|`))
}

// Every flag of `patch-agent run` has its row in docs/operations.md's table, with its environment variable and
// its default as --help prints them, and the table has no other row.
func TestOperationsDocTableOfRunFlagsIsTheCommands(t *testing.T) {
	withoutEnvDefaults(t)
	runCmd, _, err := newRootCommand().Find([]string{"run"})
	require.NoError(t, err)
	var want []string
	runCmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			want = append(want, runFlagRow(f))
		}
	})
	doc := docFiles(t)["docs/operations.md"]
	const header = "| flag | env | default | what it sets |"
	_, table, ok := strings.Cut(doc, header+"\n| --- | --- | --- | --- |\n")
	require.True(t, ok, "docs/operations.md has the table of run's flags, headed %q", header)
	var got []string
	for _, line := range strings.Split(table, "\n") {
		if tableCells(line) == nil {
			break
		}
		got = append(got, line)
	}
	require.Equal(t, strings.Join(want, "\n"), strings.Join(got, "\n"), "docs/operations.md's table of run's flags (paste the expected rows)")
}

// flagsOfTree returns every command's flags by name: name -> the commands that take it, with its default.
func flagsOfTree() map[string]map[string]*pflag.Flag {
	out := map[string]map[string]*pflag.Flag{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if out[f.Name] == nil {
				out[f.Name] = map[string]*pflag.Flag{}
			}
			out[f.Name][c.CommandPath()] = f
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCommand())
	return out
}

// flagInCell matches a flag written at the start of a code span: `--name`, `--name VALUE`, `--name=x`.
var flagInCell = regexp.MustCompile("`--([a-z][a-z0-9-]*)")

// Every flag a table of the docs or README names in its first column is a flag of a command, and a table with
// a default column gives the default the command has: "none" for an empty one, else the default in a code
// span.
func TestDocsTablesNameFlagsTheCommandsHaveWithTheirDefaults(t *testing.T) {
	withoutEnvDefaults(t)
	flags := flagsOfTree()
	rows := 0
	for file, doc := range docFiles(t) {
		defaultCol := -1
		for i, line := range strings.Split(doc, "\n") {
			cells := tableCells(line)
			if cells == nil {
				defaultCol = -1
				continue
			}
			if strings.HasPrefix(cells[0], "---") {
				continue
			}
			if defaultCol == -1 && !strings.Contains(cells[0], "`") {
				defaultCol = slices.Index(cells, "default") // the header row
				if defaultCol == -1 {
					defaultCol = -2 // a table without one
				}
				continue
			}
			names := flagInCell.FindAllStringSubmatch(cells[0], -1)
			for _, m := range names {
				rows++
				cmds := flags[m[1]]
				require.NotEmpty(t, cmds, "%s:%d names --%s, which no command takes", file, i+1, m[1])
				if defaultCol < 0 || len(names) != 1 || defaultCol >= len(cells) {
					continue
				}
				cell := cells[defaultCol]
				for path, f := range cmds {
					switch {
					case hostDependent[f.Name] != "":
					case f.DefValue == "" || f.DefValue == "[]":
						require.True(t, strings.HasPrefix(cell, "none"), "%s:%d: --%s of %s has no default; the table says %q", file, i+1, f.Name, path, cell)
					default:
						require.Contains(t, cell, "`"+f.DefValue+"`", "%s:%d: the default of --%s of %s", file, i+1, f.Name, path)
					}
				}
			}
		}
	}
	require.Greater(t, rows, 30, "the tables' flags were found")
}

// scenarioNames are the names a list of the docs gives, in the order written.
func scenarioList(t *testing.T, doc, start, end string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, start)
	require.True(t, ok, "the list starts with %q", start)
	list, _, ok := strings.Cut(rest, end)
	require.True(t, ok)
	var names []string
	for _, n := range strings.Split(strings.ReplaceAll(list, "\n", " "), ",") {
		names = append(names, strings.Trim(strings.TrimSpace(n), "`"))
	}
	return names
}

// The scenarios of `demo --scenario` are every one that `demo --help` describes, that docs/operations.md's table
// lists and that docs/faq.md names.
func TestDemoScenariosAreTheOnesTheHelpAndTheDocsList(t *testing.T) {
	want := slices.Sorted(slices.Values(demoScenarios()))
	demoCmd, _, err := newRootCommand().Find([]string{"demo"})
	require.NoError(t, err)

	_, help, ok := strings.Cut(demoCmd.Long, "\nScenarios:\n")
	require.True(t, ok)
	help, _, _ = strings.Cut(help, "\n\n")
	var described []string
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)  `).FindAllStringSubmatch(help, -1) {
		described = append(described, m[1])
	}
	require.Equal(t, want, slices.Sorted(slices.Values(described)), "demo --help's Scenarios")

	docs := docFiles(t)
	_, table, ok := strings.Cut(docs["docs/operations.md"], "| scenario | what happens | ends |\n| --- | --- | --- |\n")
	require.True(t, ok)
	var listed []string
	for _, line := range strings.Split(table, "\n") {
		cells := tableCells(line)
		if cells == nil {
			break
		}
		listed = append(listed, regexp.MustCompile("^`([a-z-]+)`").FindStringSubmatch(cells[0])[1])
	}
	require.Equal(t, want, slices.Sorted(slices.Values(listed)), "docs/operations.md's table of scenarios")

	named := scenarioList(t, docs["docs/faq.md"], "lists every scenario (", ")")
	require.Equal(t, want, slices.Sorted(slices.Values(named)), "docs/faq.md's list of scenarios")
}

// userGuides are the documents written for the users of the tool, not for its developers.
var userGuides = []string{"docs/ecs.md"}

// internalCitationRE matches what a user of a guide cannot act on: the project's field-case codes ("C23",
// "field case"), test names and files of the source tree.
var internalCitationRE = regexp.MustCompile(`\bC\d{1,2}\b|field case|\bTest[A-Z]\w*|\binternal/|_test\.go`)

// The user guides say what happens, what the user sees and what to configure in the user's words: no field
// case, test or source file of the project (docs/simulation.md and docs/testing.md name those).
func TestUserGuidesCiteNoFieldCaseTestOrSourceFile(t *testing.T) {
	docs := docFiles(t)
	for _, file := range userGuides {
		doc, ok := docs[file]
		require.True(t, ok, file)
		for i, line := range strings.Split(doc, "\n") {
			require.NotRegexp(t, internalCitationRE, line, "%s:%d cites the project's internals to users", file, i+1)
		}
	}
}
