//go:build !nodemo

package main

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
)

// -update rewrites testdata/*.golden from the current output. It is registered here unless another test file
// of the package already did.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite testdata/*.golden from the current output")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func TestAuditIsRegisteredOnTheRootCommand(t *testing.T) {
	res := run(t, "audit", "--help")
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "--fail-if-behind age")
}

func TestDemoAuditScenarioPrintsTheReport(t *testing.T) {
	res := run(t, "demo", "--scenario", "audit")
	require.NoError(t, res.err, res.stderr)
	goldenFile(t, filepath.Join("testdata", "demo-audit.table.golden"), res.stdout)

	res = run(t, "demo", "--scenario", "audit", "-o", "json")
	require.NoError(t, res.err, res.stderr)
	var r audit.Report
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &r), "--json prints only the report")
	require.Equal(t, 8, r.Summary.Groups)
	sources := map[string]bool{}
	platforms := map[string]bool{}
	archs := map[string]bool{}
	for _, g := range r.Groups {
		sources[g.AMISource], platforms[g.Platform], archs[g.Architecture] = true, true, true
	}
	for _, s := range []string{audit.SourceHardCoded, audit.SourceSSMResolve, audit.SourcePatchAgent, audit.SourceLaunchConfiguration, audit.SourceEKSManaged} {
		require.True(t, sources[s], "the demo fleet has a %s group", s)
	}
	require.True(t, platforms[audit.PlatformECS] && platforms[audit.PlatformEKS])
	require.True(t, archs["x86_64"] && archs["arm64"])
}

func goldenFile(t *testing.T, path, got string) {
	t.Helper()
	if updateGolden() {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./cmd/patch-agent -run Audit -update to create it")
	require.Equal(t, string(want), got)
}
