package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMaxInstanceAgeTagParsesDaysAndDurationsOfAtLeastADay: patch-agent/max-instance-age is whole days or a Go
// duration, at least 1 day; anything else is an error naming the tag.
func TestMaxInstanceAgeTagParsesDaysAndDurationsOfAtLeastADay(t *testing.T) {
	for _, tc := range []struct {
		tag  string
		want time.Duration
		bad  bool
	}{
		{tag: "", want: 0},
		{tag: "21d", want: 21 * 24 * time.Hour},
		{tag: "504h", want: 504 * time.Hour},
		{tag: "1d", want: 24 * time.Hour},
		{tag: "24h", want: 24 * time.Hour},
		{tag: "12h", bad: true},
		{tag: "0d", bad: true},
		{tag: "-3d", bad: true},
		{tag: "1.5d", bad: true},
		{tag: "three weeks", bad: true},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			d, err := ParseMaxInstanceAge(tc.tag)
			if tc.bad {
				require.ErrorContains(t, err, TagMaxInstanceAge+"=")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, d)
		})
	}
}

// TestMaxInstanceAgeCountsFromLaunchTime: an instance is past the age once now - LaunchTime reaches it; one
// without a known launch time, or a group without the tag, never is.
func TestMaxInstanceAgeCountsFromLaunchTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	day := Target{Policy: TargetPolicy{MaxInstanceAge: 24 * time.Hour}}
	require.True(t, agedOut(day, InstanceView{LaunchTime: now.Add(-24 * time.Hour)}, now))
	require.False(t, agedOut(day, InstanceView{LaunchTime: now.Add(-23 * time.Hour)}, now))
	require.False(t, agedOut(day, InstanceView{}, now), "launch time unknown")
	require.False(t, agedOut(Target{}, InstanceView{LaunchTime: now.Add(-1000 * time.Hour)}, now), "no tag")
}
