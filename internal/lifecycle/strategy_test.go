package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

func TestChooseStrategyAutomaticChoice(t *testing.T) {
	plain := GroupTraits{}
	managed := GroupTraits{ECSManagedScaling: true}
	managedDraining := GroupTraits{ECSManagedScaling: true, ECSManagedDraining: true}
	for _, tc := range []struct {
		name, tag string
		traits    GroupTraits
		want      string
	}{
		{"plain group, no tag: instance refresh", "", plain, StrategyRefresh},
		{"plain group, auto: instance refresh", "auto", plain, StrategyRefresh},
		{"plain group, AUTO in capitals", "AUTO", plain, StrategyRefresh},
		{"managed scaling without managed draining: instance refresh", "", managed, StrategyRefresh},
		{"managed scaling with managed draining: instance refresh", "auto", managedDraining, StrategyRefresh},
		{"refresh by tag on a managed group", "refresh", managed, StrategyRefresh},
		{"surge stays an explicit opt-out", "surge", plain, StrategySurge},
		{"surge on a managed group by tag", "Surge", managed, StrategySurge},
		{"refresh by tag", "refresh", plain, StrategyRefresh},
		{"drain-first by tag", "drain-first", plain, StrategyDrainFirst},
		{"capacity-provider by tag", "capacity-provider", managedDraining, StrategyCapacityProvider},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ChooseStrategy(tc.tag, tc.traits)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestChooseStrategyRefusesWhatItCannotDo(t *testing.T) {
	_, err := ChooseStrategy("rolling", GroupTraits{})
	require.EqualError(t, err, `tag patch-agent/strategy="rolling": want refresh or auto; capacity-provider, drain-first and surge are deprecated`)
}

func TestDeprecatedStrategyNote(t *testing.T) {
	for _, tag := range []string{"surge", "SURGE", "drain-first", "capacity-provider"} {
		note := DeprecatedStrategyNote(tag)
		require.Contains(t, note, "tag patch-agent/strategy="+strings.ToLower(tag)+" is deprecated and will be removed")
		require.Contains(t, note, "launching and terminating lifecycle hooks")
		require.NotContains(t, note, "; ", "warnings are joined with \"; \"")
	}
	for _, tag := range []string{"", "auto", "refresh"} {
		require.Empty(t, DeprecatedStrategyNote(tag), tag)
	}
}

func TestBatchNoteKeepsTheRefreshsBatch(t *testing.T) {
	three := Target{Policy: TargetPolicy{BatchSize: BatchSize{Count: 3}}}
	require.Empty(t, batchNote(three, StrategyRefresh), "an instance refresh replaces a batch through MaxHealthyPercentage")
}

// A group tagged with a strategy that writes desired capacity is still rolled by it, and its record carries the
// warning that the tag is deprecated.
func TestDeprecatedStrategyTagIsRolledWithAWarning(t *testing.T) {
	for _, tc := range []struct {
		tag, warning string
	}{
		{StrategySurge, "tag patch-agent/strategy=surge is deprecated and will be removed"},
		{StrategyDrainFirst, "tag patch-agent/strategy=drain-first is deprecated and will be removed"},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			rg := newRig()
			rg.target.Policy.Strategy = tc.tag
			rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld,
				SourceModified: now0.Add(-48 * time.Hour)})
			in := Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			_, err := rg.o.Reconcile(context.Background(), rg.target, in)
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
			require.NoError(t, err)
			require.Equal(t, tc.tag, stored.Strategy)
			if tc.warning == "" {
				require.Empty(t, stored.Warning)
				return
			}
			require.Contains(t, stored.Warning, tc.warning)
		})
	}
}
