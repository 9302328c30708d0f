package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TestEnsureVersionReadsTheResolvedAndTheLatestVersionWithOneCall, so that a fleet's launch template versions
// do not wait behind EC2 reads: EnsureVersion reads the version the group's reference resolves to and the
// template's latest version with one DescribeLaunchTemplateVersions, and still reuses the version it created
// before a crash instead of creating a second one, creates from the resolved version (not the latest) when the
// latest is someone else's, and creates nothing when the resolved version already launches the AMI.
func TestEnsureVersionReadsTheResolvedAndTheLatestVersionWithOneCall(t *testing.T) {
	const old, target, other = "ami-0000000000000old1", "ami-00000000000target", "ami-0000000000000ther"
	for _, tc := range []struct {
		name    string
		setup   func(a *sim.Account, lt string) // before the call measured
		version string                          // the group's reference
		want    int64                           // the version answered
		creates int
	}{
		{"$Default on the old AMI: one version created", func(*sim.Account, string) {}, "$Default", 2, 1},
		{"$Default, the latest created by the agent before a crash: reused", func(a *sim.Account, lt string) {
			_, err := providers.Templates{EC2: a.EC2()}.EnsureVersion(context.Background(), state.LaunchTemplateRef{ID: lt, Version: "$Default"}, target, "before the crash")
			require.NoError(t, err)
		}, "$Default", 2, 0},
		{"version 1, the latest another tool's: created from 1", func(a *sim.Account, lt string) { a.CreateLaunchTemplateVersion(lt, other) }, "1", 3, 1},
		{"$Latest already on the AMI: nothing created", func(a *sim.Account, lt string) { a.CreateLaunchTemplateVersion(lt, target) }, "$Latest", 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := sim.New(clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), sim.Options{})
			lt := a.CreateLaunchTemplate("web", old, "m5.large")
			tc.setup(a, lt)
			before := a.Calls()
			v, err := providers.Templates{EC2: a.EC2()}.EnsureVersion(context.Background(), state.LaunchTemplateRef{ID: lt, Version: tc.version}, target, "test")
			require.NoError(t, err)
			after := a.Calls()
			require.Equal(t, tc.want, v.Number)
			require.Equal(t, target, v.ImageID)
			require.Equal(t, 1, after["ec2:DescribeLaunchTemplateVersions"]-before["ec2:DescribeLaunchTemplateVersions"], "one read")
			require.Equal(t, tc.creates, after["ec2:CreateLaunchTemplateVersion"]-before["ec2:CreateLaunchTemplateVersion"])
			view, ok := a.LaunchTemplate(lt)
			require.True(t, ok)
			require.Equal(t, int64(1), view.DefaultVersion, "the default version never changes")
		})
	}
}
