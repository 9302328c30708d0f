package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The production binary (make build, make image: -tags nodemo) links no simulated account, no demo, no fake
// client, and carries the time zone database that maintenance windows need in an image without zone files.
func TestProductionBuildLinksNoSimulationAndEmbedsZoneData(t *testing.T) {
	deps := func(tags string) map[string]bool {
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		require.NoError(t, err, string(out))
		m := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			m[p] = true
		}
		return m
	}
	lean, full := deps("nodemo"), deps("")
	forbidden := func(p string) bool {
		return p == "github.com/patch-agent/patch-agent/internal/sim" || p == "github.com/patch-agent/patch-agent/internal/demo" ||
			strings.HasSuffix(p, "/fake") || strings.Contains(p, "/fake/")
	}
	for p := range lean {
		require.Falsef(t, forbidden(p), "the production build links %s", p)
	}
	require.True(t, lean["time/tzdata"], "the production build embeds the time zone database")
	require.True(t, full["github.com/patch-agent/patch-agent/internal/demo"], "the default build keeps the demo (make demo, go run)")
	require.True(t, full["time/tzdata"])
}
