package operator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/sim"
)

func TestConfirmGroupAgainstTheAutoScalingTags(t *testing.T) {
	a := sim.New(testingclock.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), sim.Options{})
	lt := a.CreateLaunchTemplate("lt", "ami-old", "m6i.large")
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "opted-in", Max: 1, LaunchTemplateID: lt,
		Tags: map[string]string{tagEnabled: "True"}}))
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "opted-out", Max: 1, LaunchTemplateID: lt,
		Tags: map[string]string{tagEnabled: "false"}}))
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: "untagged", Max: 1, LaunchTemplateID: lt}))

	for _, c := range []struct {
		group string
		want  error // nil: confirmed
	}{
		{"opted-in", nil}, // no rollout record needed: the agent may not have ticked on it yet
		{"opted-out", ErrNotOptedIn},
		{"untagged", ErrNotOptedIn},
		{"nosuch", ErrUnknownGroup},
		{"opted-i", ErrUnknownGroup}, // a prefix is no match
	} {
		t.Run(c.group, func(t *testing.T) {
			err := ConfirmGroup(context.Background(), a.AutoScaling(), c.group)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, c.group, "the error names the group")
		})
	}
}
