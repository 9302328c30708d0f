package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

func TestChooseStrategyAutomaticChoice(t *testing.T) {
	plain := model.GroupTraits{}
	managed := model.GroupTraits{ECSManagedScaling: true}
	managedDraining := model.GroupTraits{ECSManagedScaling: true, ECSManagedDraining: true}
	for _, tc := range []struct {
		name, tag string
		traits    model.GroupTraits
		want      string
	}{
		{"plain group, no tag: instance refresh", "", plain, model.StrategyRefresh},
		{"plain group, auto: instance refresh", "auto", plain, model.StrategyRefresh},
		{"plain group, AUTO in capitals", "AUTO", plain, model.StrategyRefresh},
		{"managed scaling without managed draining: instance refresh", "", managed, model.StrategyRefresh},
		{"managed scaling with managed draining: instance refresh", "auto", managedDraining, model.StrategyRefresh},
		{"refresh by tag on a managed group", "refresh", managed, model.StrategyRefresh},
		{"refresh by tag", "refresh", plain, model.StrategyRefresh},
		{"an older agent's surge tag: instance refresh", "surge", plain, model.StrategyRefresh},
		{"an older agent's surge tag on a managed group: instance refresh", "Surge", managed, model.StrategyRefresh},
		{"an older agent's drain-first tag: instance refresh", "drain-first", plain, model.StrategyRefresh},
		{"an older agent's capacity-provider tag: instance refresh", "capacity-provider", managedDraining, model.StrategyRefresh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := model.ChooseStrategy(tc.tag, tc.traits)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestChooseStrategyRefusesWhatItCannotDo(t *testing.T) {
	_, err := model.ChooseStrategy("rolling", model.GroupTraits{})
	require.EqualError(t, err, `tag patch-agent/strategy="rolling": want refresh or auto`)
}

func TestDeprecatedStrategyNote(t *testing.T) {
	for _, tag := range []string{"surge", "SURGE", "drain-first", "capacity-provider"} {
		note := model.DeprecatedStrategyNote(tag)
		require.Contains(t, note, "tag patch-agent/strategy="+strings.ToLower(tag)+" has no effect any more")
		require.Contains(t, note, "rolls by instance refresh")
		require.Contains(t, note, "launching and terminating lifecycle hooks")
		require.NotContains(t, note, "; ", "warnings are joined with \"; \"")
	}
	for _, tag := range []string{"", "auto", "refresh"} {
		require.Empty(t, model.DeprecatedStrategyNote(tag), tag)
	}
}

// A group tagged with the strategy of an older agent is rolled by instance refresh, and its record carries the
// warning that the tag has no effect.
func TestDeprecatedStrategyTagIsRolledByRefreshWithAWarning(t *testing.T) {
	for _, tag := range []string{"surge", "drain-first", "capacity-provider"} {
		t.Run(tag, func(t *testing.T) {
			rg := newRig()
			rg.target.Policy.Strategy = tag
			rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld,
				SourceModified: now0.Add(-48 * time.Hour)})
			in := model.Inputs{View: oldFleet(), AMI: newAMI()}
			_, err := rg.o.Reconcile(context.Background(), rg.target, in)
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
			require.NoError(t, err)
			require.Equal(t, model.StrategyRefresh, stored.Strategy)
			require.Equal(t, state.StepInstanceRefresh, stored.Current.Step, stored.Reason)
			require.Len(t, rg.o.AutoScaling.(*fakeRefreshes).starts, 1, "one instance refresh")
			require.Empty(t, groupWrites(rg), "no desired capacity written")
			require.Contains(t, stored.Warning, "tag patch-agent/strategy="+tag+" has no effect any more")
		})
	}
}
