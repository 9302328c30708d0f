package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/stretchr/testify/require"
)

// zoneProbeEnv makes TestZoneDatabaseIsEmbedded's child process run the probe instead of the test.
const zoneProbeEnv = "PATCH_AGENT_ZONE_PROBE"

// TestZoneDatabaseIsEmbedded loads "Europe/Berlin" (and a maintenance window in it) in a child process of this
// test binary, which links the agent's main package and so its `import _ "time/tzdata"`, with ZONEINFO
// pointing at a directory that does not exist. Where user and mount namespaces are available (unshare -rm) the
// OS zone directory /usr/share/zoneinfo and the Go toolchain's $GOROOT/lib/time/zoneinfo.zip are also hidden
// under empty tmpfs mounts, as in the distroless image, so only the embedded database can answer
// (time.LoadLocation: ZONEINFO, then the OS directories and the GOROOT zip, then time/tzdata).
func TestZoneDatabaseIsEmbedded(t *testing.T) {
	if os.Getenv(zoneProbeEnv) == "1" {
		loc, err := time.LoadLocation("Europe/Berlin")
		require.NoError(t, err)
		// 2026-07-01 12:00 UTC is 14:00 CEST (UTC+2).
		require.Equal(t, 14, time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC).In(loc).Hour())
		w, err := model.ParseWindowTag("22:00-04:00 Europe/Berlin")
		require.NoError(t, err)
		open, _ := w.State(time.Date(2026, 7, 1, 21, 30, 0, 0, time.UTC)) // 23:30 CEST
		require.True(t, open)
		return
	}
	nowhere := t.TempDir() + "/no-such-zoneinfo"
	run := func(t *testing.T, name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), zoneProbeEnv+"=1", "ZONEINFO="+nowhere)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "zone probe failed:\n%s", out)
		require.Contains(t, string(out), "PASS")
	}
	probe := []string{"-test.run=^TestZoneDatabaseIsEmbedded$", "-test.count=1", "-test.v"}
	t.Run("ZONEINFO pointing nowhere", func(t *testing.T) {
		run(t, os.Args[0], probe...)
	})
	t.Run("no OS zone files either", func(t *testing.T) {
		unshare, err := exec.LookPath("unshare")
		if err != nil || exec.Command(unshare, "-rm", "true").Run() != nil {
			t.Skip("no user and mount namespaces here (unshare -rm): the OS zone files cannot be hidden")
		}
		if _, err := os.Stat("/usr/share/zoneinfo"); err != nil {
			// No OS zone files at all: the first subtest already proved the embedded database.
			t.Skip("no /usr/share/zoneinfo on this machine")
		}
		script := `mount -t tmpfs none /usr/share/zoneinfo && test ! -e /usr/share/zoneinfo/Europe/Berlin && ` +
			`{ test ! -d "$GOROOT_TIME" || mount -t tmpfs none "$GOROOT_TIME"; } && test ! -e "$GOROOT_TIME/zoneinfo.zip" && exec "$0" "$@"`
		cmd := append([]string{"-rm", "env", "GOROOT_TIME=" + filepath.Join(runtime.GOROOT(), "lib", "time"), "sh", "-c", script, os.Args[0]}, probe...)
		run(t, unshare, cmd...)
	})
}
