package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// olderEngineFleet is the group as an older agent's surge left it: desired capacity 3 with its extra instance
// i-9 on the target AMI beside the two old instances, i-1 DRAINING.
func olderEngineFleet() model.GroupView {
	return view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew))
}

// requireNoGroupEffect fails when the look wrote anything to the group or its cluster: a desired capacity,
// MaxSize, protection or termination (fakeGroups), an instance refresh (fakeRefreshes; any other Auto Scaling
// call panics), a launch template change, a drain or an undrain.
func requireNoGroupEffect(t *testing.T, rg *rig) {
	t.Helper()
	require.Empty(t, groupWrites(rg), "no Auto Scaling write")
	f := rg.o.AutoScaling.(*fakeRefreshes)
	require.Empty(t, f.starts, "no instance refresh started")
	require.Zero(t, f.cancels+f.rollbacks, "no instance refresh cancelled or rolled back")
	require.Empty(t, rg.templates.pointed, "the group's launch template is not changed")
	require.Empty(t, rg.platform.started, "nothing drained")
	require.Empty(t, rg.platform.undrained, "nothing put back in service: the operator checks the old instance")
}

// olderEngineTransitionCases are the rows of state.Transitions an older agent's record takes
// (TestOrchestratorTransitions): at Preparing it goes back to Detected; past Preparing it halts without
// rollback, at the step it was left at, with OlderEngineReason, and nothing of the group is touched.
func olderEngineTransitionCases() []transitionCase {
	halts := func(from state.Position, strategy string) transitionCase {
		label := strategy
		if label == "" {
			label = "no strategy recorded"
		}
		return transitionCase{from: from, to: pos(state.PhaseHalted, from.Step), why: "left by an older agent (" + label + ")",
			setup: func(rg *rig) model.Inputs {
				rec := replacing(strategy, from.Step)
				rec.Phase = from.Phase
				if from.Step == "" {
					rec.Current = nil
				}
				rg.seed0(rec)
				return model.Inputs{View: olderEngineFleet(), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				want := strategy
				if want == "" {
					want = "surge"
				}
				require.Equal(t, "failed: "+OlderEngineReason("prod", want, stored.Current), stored.Reason)
				require.Equal(t, want, stored.Strategy, "the record names the strategy that wrote it (surge when none was recorded), so that retry knows it")
				require.True(t, stored.ByOlderEngine(), "retry accepts it")
				require.True(t, stored.ByOlderEngine())
				requireNoGroupEffect(t, rg)
			}}
	}
	return []transitionCase{
		{from: pos(state.PhasePreparing, ""), to: pos(state.PhaseDetected, ""), why: "prepared by an older agent: starts again by instance refresh",
			setup: func(rg *rig) model.Inputs {
				rg.target.Policy.Approval = model.ApprovalManual // holds the rollout at Waiting next: the test looks at Detected only
				rec := replacing("drain-first", "")
				rec.Phase, rec.Current = state.PhasePreparing, nil
				rg.seed0(rec)
				return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.NotEqual(t, "drain-first", stored.Strategy, "the older strategy is not kept")
				requireNoGroupEffect(t, rg)
			}},
		halts(pos(state.PhaseReplacing, ""), "surge"),
		halts(pos(state.PhaseReplacing, state.StepSurge), ""),
		halts(pos(state.PhaseReplacing, state.StepReplacementHealthy), "capacity-provider"),
		halts(pos(state.PhaseReplacing, state.StepDraining), "surge"),
		halts(pos(state.PhaseReplacing, state.StepTerminating), "drain-first"),
		halts(pos(state.PhaseVerifying, ""), "surge"),
		halts(pos(state.PhaseRollingBack, state.StepReplacementHealthy), "surge"),
	}
}

// An active record an older agent left at Replacing/Draining (strategy surge) is halted without rollback,
// though the policy rolls back on failure and the record names the template to roll back to: the reason is
// OlderEngineReason naming the step and the instance, nothing of the group is written, and later looks leave
// the halt alone.
func TestOlderEngineReplacingRecordHaltsWithoutRollbackAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	require.True(t, rg.o.Policy.RollbackOnFailure)
	rec := replacing("surge", state.StepDraining)
	rec.Replaced = []string{"i-0"}
	rg.seed0(rec)
	for range 3 {
		_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: olderEngineFleet(), AMI: newAMI()})
		require.NoError(t, err)
		rg.clock.Step(rg.o.Policy.DrainTimeout) // past any deadline the older engine had
	}
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseHalted, stored.Phase, "halted, not rolled back")
	require.Equal(t, "failed: "+OlderEngineReason("prod", "surge", &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-1"}), stored.Reason)
	require.Contains(t, stored.Reason, "(step Draining, replacing i-1) by its surge strategy")
	require.Contains(t, stored.Reason, "patch-agent retry prod")
	require.Equal(t, &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-1", StepStartedAt: now0.Add(-time.Minute)}, stored.Current,
		"the replacement in flight stays on the record for the operator")
	require.Equal(t, "surge", stored.Strategy)
	require.Equal(t, []string{"i-0"}, stored.Replaced)
	requireNoGroupEffect(t, rg)
	history, err := rg.store.History(ctx, "prod")
	require.NoError(t, err)
	require.Len(t, history, 1)
	require.Equal(t, "halted", history[0].Event)
}

// A record an older agent left at Preparing goes back to Detected without its strategy and rolls by instance
// refresh through the gates from there.
func TestOlderEnginePreparingRecordStartsAgainByInstanceRefresh(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rec := replacing("surge", "")
	rec.Phase, rec.Current, rec.NewTemplateVersion = state.PhasePreparing, nil, ""
	rec.SourceModified = now0.Add(-48 * time.Hour)
	rg.seed0(rec)
	var seen []state.Transition
	restore := state.SetTransitionRecorder(func(tr state.Transition) { seen = append(seen, tr) })
	_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()})
	restore()
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(seen), 2, "Detected, then on through the gates")
	require.Equal(t, pos(state.PhasePreparing, ""), seen[0].From)
	require.Equal(t, pos(state.PhaseDetected, ""), seen[0].To)
	require.Equal(t, pos(state.PhasePreparing, ""), seen[1].To, "the gates pass again")
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, model.StrategyRefresh, stored.Strategy)
	require.False(t, stored.ByOlderEngine())
	require.Empty(t, groupWrites(rg), "no Auto Scaling write")
	require.Empty(t, rg.templates.pointed, "the group's own launch template reference is kept: the refresh names the version")
}

// A rollout the older agent halted itself (here at its drain deadline) gets the reason that says what that
// agent may have left raised, once, with its own reason kept; nothing else is written or changed.
func TestOlderEngineHaltedRecordGetsTheReasonThatSaysWhatToCheck(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rec := replacing("surge", state.StepDraining)
	rec.Phase, rec.Reason = state.PhaseHalted, "failed: drain of i-1 did not finish within 30m0s: put back in service"
	rg.seed0(rec)
	seeded, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	for range 3 {
		_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: olderEngineFleet(), AMI: newAMI()})
		require.NoError(t, err)
	}
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseHalted, stored.Phase)
	require.Equal(t, "failed: "+OlderEngineReason("prod", "surge", stored.Current)+
		" (the older agent's own reason: drain of i-1 did not finish within 30m0s: put back in service)", stored.Reason)
	require.Equal(t, seeded.Version+1, stored.Version, "the reason is written once")
	requireNoGroupEffect(t, rg)

	// A halt of this agent's own refresh keeps its reason.
	own := rec
	own.Group, own.Strategy, own.Reason = "prod", model.StrategyRefresh, "failed: instance refresh Failed"
	own.Current = &state.Replacement{Step: state.StepInstanceRefresh}
	require.Equal(t, own.Reason, olderEngineHalted(own).Reason)
}
