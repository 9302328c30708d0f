package testenv_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var nameChars = regexp.MustCompile(`^[A-Za-z0-9-]+$`)

func TestUniqueNameIsValidAndDistinct(t *testing.T) {
	a := testenv.UniqueName(t, "state")
	b := testenv.UniqueName(t, "state")
	require.NotEqual(t, a, b)
	require.Regexp(t, nameChars, a)
	require.Regexp(t, `^state-TestUniqueNameIsValidAndDistinct-[0-9a-f]{8}$`, a)
}

func TestUniqueNameOfALongSubtestFitsTheLimit(t *testing.T) {
	t.Run("a subtest with spaces/slashes and a name far longer than any AWS resource name allows", func(t *testing.T) {
		n := testenv.UniqueName(t, "queue_with.odd*chars")
		require.LessOrEqual(t, len(n), testenv.MaxNameLen)
		require.Regexp(t, nameChars, n)
		require.Regexp(t, `^queue-with-odd-chars-TestUniqueName`, n)
	})
}

func TestKumoBinaryFollowsEnvironment(t *testing.T) {
	t.Setenv("PATCH_AGENT_KUMO", "")
	t.Setenv("XDG_CACHE_HOME", "/cache")
	require.Equal(t, "/cache/patch-agent/testbin/kumo-v0.33.1/kumo", testenv.KumoBinary())

	t.Setenv("PATCH_AGENT_KUMO", "/opt/kumo")
	require.Equal(t, "/opt/kumo", testenv.KumoBinary())
}

func TestKumoServesHealthAndIsShared(t *testing.T) {
	endpoint := testenv.Kumo(t)
	require.Equal(t, "http://127.0.0.1:4566", endpoint)
	require.Equal(t, endpoint, testenv.Kumo(t))

	resp, err := http.Get(endpoint + "/health")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestMotoBinaryLooksOnPathThenInPyenvVersions(t *testing.T) {
	root := t.TempDir()
	exe := func(path string) string {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755))
		return path
	}
	t.Setenv("PATCH_AGENT_MOTO", "")
	t.Setenv("PATH", filepath.Join(root, "empty"))
	t.Setenv("PYENV_ROOT", filepath.Join(root, "pyenv"))

	_, err := testenv.MotoBinary()
	require.ErrorContains(t, err, "pip install 'moto[server]==5.2.1'", "missing: says how to get it")

	exe(filepath.Join(root, "pyenv", "versions", "3.10.1", "bin", "moto_server"))
	newest := exe(filepath.Join(root, "pyenv", "versions", "3.11.7", "bin", "moto_server"))
	got, err := testenv.MotoBinary()
	require.NoError(t, err)
	require.Equal(t, newest, got, "a shell without pyenv shims still finds pyenv's moto")

	onPath := exe(filepath.Join(root, "bin", "moto_server"))
	t.Setenv("PATH", filepath.Join(root, "bin"))
	got, err = testenv.MotoBinary()
	require.NoError(t, err)
	require.Equal(t, onPath, got, "PATH first")

	t.Setenv("PATCH_AGENT_MOTO", newest)
	got, err = testenv.MotoBinary()
	require.NoError(t, err)
	require.Equal(t, newest, got, "PATCH_AGENT_MOTO overrides")
}
