package providers

import (
	"slices"
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

func TestParseCanary(t *testing.T) {
	for _, tc := range []struct {
		count, bake string
		n           int
		d           time.Duration
		err         string
	}{
		{"", "", 0, 0, ""},
		{"2", "", 2, model.DefaultCanaryBake, ""},
		{"1", "2h", 1, 2 * time.Hour, ""},
		{"0", "", 0, 0, "want a whole number of instances from 1"},
		{"two", "", 0, 0, "want a whole number of instances from 1"},
		{"1", "30s", 0, 0, "want a duration from 1m to 48h"},
		{"1", "49h", 0, 0, "want a duration from 1m to 48h"},
		{"", "30m", 0, 0, "needs " + model.TagCanary},
	} {
		n, d, err := model.ParseCanary(tc.count, tc.bake)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%q %q", tc.count, tc.bake)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.n, n)
		require.Equal(t, tc.d, d)
	}
}

func TestCanaryCheckpointCoversTheCanaryAndNeverTheWholeGroup(t *testing.T) {
	require.Equal(t, int32(10), model.CanaryCheckpoint(1, 10))
	require.Equal(t, int32(34), model.CanaryCheckpoint(1, 3), "rounded up: the canary's instance is replaced before the bake")
	require.Equal(t, int32(99), model.CanaryCheckpoint(99, 100))
	require.Zero(t, model.CanaryCheckpoint(3, 3), "a canary as large as the group is none")
	require.Zero(t, model.CanaryCheckpoint(0, 10))
}

func TestRefreshRequestOfACanaryStopsAtItsCheckpointAndARollbackHasNoAlarms(t *testing.T) {
	p := &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", MinHealthyPercentage: 100,
		MaxHealthyPercentage: 110, Alarms: []string{"p99"}, CanaryPercentage: 20, CanaryBake: 1800}
	in := refreshRequest("g", p)
	require.Equal(t, []int32{20}, in.Preferences.CheckpointPercentages)
	require.Equal(t, int32(1800), *in.Preferences.CheckpointDelay)
	require.Equal(t, []string{"p99"}, in.Preferences.AlarmSpecification.Alarms)

	p.Rollback = true
	in = refreshRequest("g", p)
	require.Equal(t, "2", *in.DesiredConfiguration.LaunchTemplate.Version, "back to the previous version")
	require.Nil(t, in.Preferences.AlarmSpecification, "the alarm that fired would fail the rollback at once")
	require.Empty(t, in.Preferences.CheckpointPercentages)
}

// A refresh's request says what the record decided: protected instances replaced where ECS manages the
// protection (else waited for), every instance replaced for the maximum instance age (else the matching ones
// skipped), and a checkpoint after each instance for a group ECS managed scaling sizes — not beside a canary,
// whose bake is the one CheckpointDelay, and not on a rollback.
func TestRefreshRequestCarriesProtectionSkipMatchingAndSpacing(t *testing.T) {
	p := &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", PreviousVersion: "2", MinHealthyPercentage: 100,
		MaxHealthyPercentage: 134, BatchSize: 1, Desired: 3}
	in := refreshRequest("g", p)
	require.Equal(t, astypes.ScaleInProtectedInstancesWait, in.Preferences.ScaleInProtectedInstances)
	require.True(t, *in.Preferences.SkipMatching)
	require.Empty(t, in.Preferences.CheckpointPercentages)

	p.ReplaceProtected, p.ReplaceAll, p.SpacingDelay = true, true, 300
	in = refreshRequest("g", p)
	require.Equal(t, astypes.ScaleInProtectedInstancesRefresh, in.Preferences.ScaleInProtectedInstances)
	require.False(t, *in.Preferences.SkipMatching)
	require.Equal(t, []int32{33, 66, 100}, in.Preferences.CheckpointPercentages)
	require.Equal(t, int32(300), *in.Preferences.CheckpointDelay)

	p.Desired, p.BatchSize = 10, 3
	require.Equal(t, []int32{30, 60, 90, 100}, p.SpacingCheckpoints())
	p.Desired, p.BatchSize = 250, 1
	cps := p.SpacingCheckpoints()
	require.Len(t, cps, 100, "unique percentages only")
	require.True(t, slices.IsSorted(cps))

	p.CanaryPercentage, p.CanaryBake = 20, 1800
	in = refreshRequest("g", p)
	require.Equal(t, []int32{20}, in.Preferences.CheckpointPercentages, "the canary's checkpoint alone")
	p.CanaryPercentage, p.Rollback = 0, true
	in = refreshRequest("g", p)
	require.Empty(t, in.Preferences.CheckpointPercentages, "a rollback is not spaced")
	require.Equal(t, astypes.ScaleInProtectedInstancesRefresh, in.Preferences.ScaleInProtectedInstances)
}
