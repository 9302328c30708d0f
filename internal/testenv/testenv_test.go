package testenv_test

import (
	"net/http"
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
