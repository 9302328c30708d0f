package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSeedsComeFromTheEnvironmentOrTheShortForm(t *testing.T) {
	t.Setenv(SeedsEnv, "")
	require.Equal(t, []uint64{1, 2}, Seeds(t, []uint64{1, 2}))
	t.Setenv(SeedsEnv, "20")
	require.Len(t, Seeds(t, []uint64{1}), 20)
	require.True(t, Soak(Seeds(t, nil)))
	for v, want := range map[string][]uint64{"3-5": {3, 4, 5}, "1,5,9": {1, 5, 9}, "2": {1, 2}} {
		got, err := ParseSeeds(v)
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	for _, bad := range []string{"0", "x", "5-3", "1,x", "-2", "0,5", "1,1"} {
		_, err := ParseSeeds(bad)
		require.Error(t, err, bad)
	}
	require.False(t, Soak([]uint64{1, 2, 3}))
}
