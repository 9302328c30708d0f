package logging_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/logging"
)

// logFields returns the keys a log line of the agent may carry: the field names of fields.go and the keys the
// logger itself writes (level, time, msg), taken from a line it writes.
func logFields(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "fields.go", nil, 0)
	require.NoError(t, err)
	keys := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil {
				keys[s] = true
			}
		}
		return true
	})
	var buf bytes.Buffer
	log, err := logging.New(&buf, "info")
	require.NoError(t, err)
	log.Info("a line")
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	for k := range line {
		keys[k] = true
	}
	return keys
}

// insightsWords are the Logs Insights words of the runbook's queries that are not field names.
var insightsWords = map[string]bool{"fields": true, "filter": true, "sort": true, "desc": true, "asc": true, "limit": true,
	"stats": true, "count": true, "as": true, "by": true, "and": true, "or": true, "like": true, "not": true, "in": true}

// Every field docs/runbook.md's Logs Insights section names, in its list of fields and in its queries, is a
// key the agent's log lines carry.
func TestRunbookLogsInsightsQueriesUseTheAgentsFieldNames(t *testing.T) {
	keys := logFields(t)
	doc, err := os.ReadFile("../../docs/runbook.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "## Logs Insights queries\n")
	require.True(t, ok)
	section, _, _ = strings.Cut(section, "\n## ")

	_, list, ok := strings.Cut(section, "the field names\nare fixed (")
	require.True(t, ok, "the section lists the field names")
	list, _, _ = strings.Cut(list, ")")
	named := regexp.MustCompile("`([a-z_@]+)`").FindAllStringSubmatch(list, -1)
	require.GreaterOrEqual(t, len(named), 8)
	for _, m := range named {
		require.True(t, keys[m[1]], "the runbook lists field %q, which the agent never writes", m[1])
	}

	queries := 0
	for i, block := range strings.Split(section, "```") {
		if i%2 == 0 {
			continue // prose between the code blocks
		}
		queries++
		block = regexp.MustCompile(`"[^"]*"`).ReplaceAllString(block, "") // string literals
		block = regexp.MustCompile(`\(\*\)|@[a-z]+|\b[0-9]+\b`).ReplaceAllString(block, "")
		for _, w := range regexp.MustCompile(`[a-z_]+`).FindAllString(block, -1) {
			if insightsWords[w] {
				continue
			}
			if strings.Contains(block, " as "+w) {
				continue // a name the query gives to a result
			}
			require.True(t, keys[w], "query %d uses field %q, which the agent never writes", queries, w)
		}
	}
	require.Equal(t, 3, queries)
}
