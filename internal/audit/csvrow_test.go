package audit_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/demo"
)

// The organization-wide audit writes each group with CSVRow: it must stay the row `audit -o csv` writes.
func TestCSVRowIsTheRowOfTheCSVReport(t *testing.T) {
	r, err := demo.RunAudit(context.Background())
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, audit.Write(&buf, audit.FormatCSV, r))
	records, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	require.Equal(t, audit.CSVHeader(), records[0])
	require.Len(t, records, len(r.Groups)+1)
	for i, g := range r.Groups {
		require.Equal(t, records[i+1], audit.CSVRow(g), g.Name)
	}
}
