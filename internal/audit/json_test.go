package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/schema"
)

// An unknown count has one meaning and one spelling per format: null in JSON (never -1), "unknown" in the
// table and the CSV; the JSON reads back as Unknown.
func TestUnknownCountsAreNullInJSONAndUnknownInCSV(t *testing.T) {
	r := &Report{Region: "eu-west-1", Groups: []Group{{Name: "g", Platform: PlatformECS, AMISource: SourceHardCoded,
		DaysBehind: Unknown, ReleasesBehind: 2, Status: StatusBehind}}}
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, FormatJSON, r))
	require.NotContains(t, buf.String(), ": -1")
	var doc map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	require.Equal(t, float64(schema.Version), doc["schemaVersion"])
	require.Equal(t, []any{}, doc["warnings"])
	g := doc["groups"].([]any)[0].(map[string]any)
	require.Nil(t, g["daysBehind"])
	require.Equal(t, float64(2), g["releasesBehind"])
	require.Equal(t, []any{}, g["notes"])

	var back Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	require.Equal(t, Unknown, back.Groups[0].DaysBehind)
	require.Equal(t, 2, back.Groups[0].ReleasesBehind)

	for _, format := range []string{FormatCSV, FormatTable} {
		buf.Reset()
		require.NoError(t, Write(&buf, format, r))
		require.Contains(t, buf.String(), "unknown", format)
		require.NotContains(t, strings.ReplaceAll(buf.String(), "eu-west-1", ""), "-1", format)
	}
}

// An audit of an account without groups is a document with the same fields: groups [], warnings [].
func TestAuditOfAnEmptyFleetHasEveryField(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, FormatJSON, &Report{Region: "eu-west-1", Summary: summarize(nil)}))
	var doc map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &doc))
	require.Equal(t, float64(schema.Version), doc["schemaVersion"])
	require.Equal(t, []any{}, doc["groups"])
	require.Equal(t, []any{}, doc["warnings"])
	for _, k := range []string{"region", "generatedAt", "summary"} {
		require.Contains(t, doc, k)
	}
}
