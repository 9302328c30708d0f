package providers_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// optInCases are values of the opt-in tag patch-agent/enabled and what model.OptedIn decides for them:
// "true" in any letter case opts in, "false" in any case (or no tag) opts out, anything else is reported.
var optInCases = []struct {
	name, value string
	optedIn     bool
	invalid     bool // reported with model.ErrEnabledTagValue
}{
	{"lower case", "true", true, false},
	{"capitalised", "True", true, false},
	{"upper case", "TRUE", true, false},
	{"mixed case (missed by the old tag filter of three spellings)", "tRuE", true, false},
	{"surrounding spaces (IAM's StringEqualsIgnoreCase refuses it)", " true ", false, true},
	{"yes", "yes", false, true},
	{"one", "1", false, true},
	{"empty value", "", false, true},
	{"false", "false", false, false},
	{"False", "False", false, false},
}

func TestOptedInDecidesTheOptInTagValue(t *testing.T) {
	for _, c := range optInCases {
		t.Run(c.name, func(t *testing.T) {
			on, err := model.OptedIn(map[string]string{model.TagEnabled: c.value})
			require.Equal(t, c.optedIn, on)
			if c.invalid {
				require.ErrorIs(t, err, model.ErrEnabledTagValue)
				require.ErrorContains(t, err, "patch-agent/enabled=\""+c.value+"\"", "the error quotes the value")
			} else {
				require.NoError(t, err)
			}
		})
	}
	on, err := model.OptedIn(map[string]string{"team": "web"})
	require.NoError(t, err, "no opt-in tag: not opted in, nothing to report")
	require.False(t, on)
}

// TestOptInTagIsReadTheSameByDiscoveryAndTagParsing puts one group per tag value into the simulated account
// and asks both paths: Discover (DescribeAutoScalingGroups, whose tag filters compare values case-sensitively)
// and TargetFromTags on the same tags. Both must decide as OptedIn does, group by group.
func TestOptInTagIsReadTheSameByDiscoveryAndTagParsing(t *testing.T) {
	spec := testworld.Spec{Groups: []testworld.GroupSetup{{Name: "untagged", Cluster: "prod", Parameter: "/golden/untagged", Min: 1, Max: 2, Desired: 1, Unmanaged: true}}}
	tags := map[string]map[string]string{}
	for i, c := range optInCases {
		name := "g" + string(rune('a'+i))
		g := testworld.GroupSetup{Name: name, Cluster: "prod", Parameter: "/golden/" + name, Min: 1, Max: 2, Desired: 1,
			Tags: map[string]string{model.TagEnabled: c.value}}
		spec.Groups = append(spec.Groups, g)
		tags[name] = map[string]string{model.TagEnabled: c.value, model.TagPlatform: model.PlatformECS,
			model.TagCluster: "prod", model.TagParameter: "/golden/" + name}
	}
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	d, err := providers.Discover(context.Background(), w.Account.AutoScaling())
	require.NoError(t, err)

	for i, c := range optInCases {
		name := "g" + string(rune('a'+i))
		t.Run(c.name, func(t *testing.T) {
			parsed, perr := model.TargetFromTags(name, tags[name])
			_, discovered := d.Targets[name]
			derr := d.Misconfigured[name]
			_, drainable := d.DrainTarget(name)

			require.Equal(t, c.optedIn, parsed != nil, "tag parsing of %q", c.value)
			require.Equal(t, c.optedIn, discovered, "discovery of %q", c.value)
			require.Equal(t, c.optedIn, drainable, "lifecycle actions are drained only for opted-in groups (%q)", c.value)
			if c.invalid {
				require.ErrorIs(t, perr, model.ErrEnabledTagValue)
				require.ErrorIs(t, derr, model.ErrEnabledTagValue, "discovery reports the group instead of dropping it silently")
				require.ErrorContains(t, derr, "group "+name+" is not managed")
			} else {
				require.NoError(t, perr)
				require.NoError(t, derr)
			}
		})
	}
	require.NotContains(t, d.Targets, "untagged")
	require.NotContains(t, d.Misconfigured, "untagged", "a group without the tag is not reported")
	require.Len(t, d.Targets, 4, "true, True, TRUE, tRuE")
}
