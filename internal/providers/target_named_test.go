package providers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// TestDiscoverNamedDescribesOnlyTheNamedGroupsAndDecidesEachAsDiscoverDoes, so that a look at a few targets of
// 1,000 groups does not read every page of DescribeAutoScalingGroups. 250 opted-in groups (three pages of 100)
// and, among the names asked for, one opted out, two misconfigured (no cluster tag; no parameter tag, still
// drainable), one with an opt-in value Auto Scaling's tag filter would list but OptedIn refuses, and one Auto
// Scaling does not know. DiscoverNamed makes one DescribeAutoScalingGroups call for the seven names and decides
// each group exactly as Discover (three calls) does: same targets with the same descriptions (instances
// included), same misconfigured and drainable groups; the opted-out and unknown groups are in none of the maps.
// Merge replaces just the named groups of a full discovery.
func TestDiscoverNamedDescribesOnlyTheNamedGroupsAndDecidesEachAsDiscoverDoes(t *testing.T) {
	ctx := context.Background()
	a := sim.New(clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)), sim.Options{})
	lt := a.CreateLaunchTemplate("web", "ami-0aaaaaaaaaaaaaaa1", "m5.large")
	tags := func(edit func(map[string]string)) map[string]string {
		m := map[string]string{model.TagEnabled: "true", model.TagPlatform: "ecs", model.TagCluster: "c1", model.TagParameter: "/golden/ecs"}
		if edit != nil {
			edit(m)
		}
		return m
	}
	for i := range 250 {
		require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: fmt.Sprintf("g%03d", i), Min: 1, Max: 2, Desired: 1, LaunchTemplateID: lt, Tags: tags(nil), ECSCluster: "c1"}))
	}
	odd := map[string]func(map[string]string){
		"opted-out":     func(m map[string]string) { m[model.TagEnabled] = "false" },
		"misconfigured": func(m map[string]string) { delete(m, model.TagCluster) },
		"bad-opt-in":    func(m map[string]string) { m[model.TagEnabled] = "yes" },
		"no-parameter":  func(m map[string]string) { delete(m, model.TagParameter) },
	}
	for name, edit := range odd {
		require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: name, Min: 1, Max: 2, Desired: 1, LaunchTemplateID: lt, Tags: tags(edit), ECSCluster: "c1"}))
	}
	names := []string{"g007", "g242", "opted-out", "misconfigured", "bad-opt-in", "no-parameter", "never-created"}

	before := a.Calls()
	full, err := Discover(ctx, a.AutoScaling())
	require.NoError(t, err)
	mid := a.Calls()
	part, err := DiscoverNamed(ctx, a.AutoScaling(), names)
	require.NoError(t, err)
	after := a.Calls()
	const op = "autoscaling:DescribeAutoScalingGroups"
	require.Equal(t, 3, mid[op]-before[op], "a full discovery reads every page")
	require.Equal(t, 1, after[op]-mid[op], "the named groups are described in one call")

	require.ElementsMatch(t, []string{"g007", "g242"}, part.Names())
	for _, n := range names {
		require.Equal(t, full.Targets[n], part.Targets[n], n)
		require.Equal(t, full.Groups[n], part.Groups[n], "%s: the same description, instances included", n)
		require.Equal(t, full.Drainable[n], part.Drainable[n], n)
		require.Equal(t, full.Misconfigured[n] != nil, part.Misconfigured[n] != nil, n)
	}
	require.Len(t, part.Groups["g007"].Instances, 1)
	require.Contains(t, part.Misconfigured, "misconfigured")
	require.Contains(t, part.Misconfigured, "no-parameter")
	require.Contains(t, part.Drainable, "no-parameter", "opted in with platform and cluster: its lifecycle actions are still drained")
	require.NotContains(t, part.Drainable, "bad-opt-in")
	require.NotContains(t, part.Targets, "opted-out")
	require.NotContains(t, part.Misconfigured, "opted-out")
	require.NotContains(t, part.Targets, "never-created")

	// Merge: g007 dropped (say it was opted out since), g242 replaced, the other 248 kept.
	only242, err := DiscoverNamed(ctx, a.AutoScaling(), []string{"g242"})
	require.NoError(t, err)
	merged := full.Merge([]string{"g007", "g242"}, only242)
	require.Len(t, merged.Targets, 249)
	require.NotContains(t, merged.Targets, "g007")
	require.Contains(t, merged.Targets, "g242")
	require.Len(t, full.Targets, 250, "the full discovery itself is not changed (passes in progress read it)")
}
