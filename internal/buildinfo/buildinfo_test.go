package buildinfo

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestResolvePrefersTheLinkerThenTheToolchain(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-30T02:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	cases := []struct {
		name          string
		v, c, d       string
		bi            *debug.BuildInfo
		want          Info
		notDevVersion bool
	}{
		{"linker values win", "v1.2.3", "abc", "2026-12-01T00:00:00Z", vcs,
			Info{Version: "v1.2.3", Commit: "abc", Date: "2026-12-01T00:00:00Z"}, true},
		{"a working tree build names its commit, dirty", "", "", "", vcs,
			Info{Version: "0123456789ab-dirty", Commit: "0123456789abcdef0123456789abcdef01234567-dirty", Date: "2026-11-30T02:00:00Z"}, true},
		{"go install of a tagged module", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}},
			Info{Version: "v1.4.0", Commit: "unknown", Date: "unknown"}, true},
		{"nothing recorded", "", "", "", nil, Info{Version: "dev", Commit: "unknown", Date: "unknown"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := resolve(c.v, c.c, c.d, c.bi)
			require.Equal(t, c.want, got)
			require.Equal(t, c.notDevVersion, got.Version != "dev")
		})
	}
}
