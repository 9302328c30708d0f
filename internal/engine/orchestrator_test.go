package engine

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// pos builds a Position (the zero Step: no replacement in flight).
func pos(ph state.Phase, st state.Step) state.Position { return state.Position{Phase: ph, Step: st} }

// replacing is a Replacing record by strategy whose replacement in flight (of i-1) is at step; the launch
// template version 1 is recorded for rollback.
func replacing(strategy string, step state.Step) state.Rollout {
	return state.Rollout{Phase: state.PhaseReplacing, TargetImageID: amiNew, PreviousImageID: amiOld, Strategy: strategy,
		PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, NewTemplateVersion: "2",
		Current: &state.Replacement{Step: step, OldInstanceID: "i-1", StepStartedAt: now0.Add(-time.Minute)}}
}

// transitionCase sets up the world for one row of state.Transitions: the record is stored, the returned
// inputs are what the tick sees; check (optional) asserts the effect the transition made.
type transitionCase struct {
	from, to state.Position
	why      string
	setup    func(rg *rig) model.Inputs
	check    func(t *testing.T, rg *rig, stored state.Rollout)
}

func transitionCases() []transitionCase {
	return []transitionCase{
		{from: pos("", ""), to: pos(state.PhaseIdle, ""), why: "first sight of a group already on the target",
			setup: func(rg *rig) model.Inputs {
				rg.templates.current.ImageID = amiNew
				return model.Inputs{View: view(2, false, serving("i-1", amiNew), serving("i-2", amiNew)), AMI: newAMI()}
			}},
		{from: pos("", ""), to: pos(state.PhaseDetected, ""), why: "first sight of a group on an older AMI",
			setup: func(rg *rig) model.Inputs {
				rg.target.Policy.Approval = model.ApprovalManual // stops at Waiting: the test looks at Detected only
				return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.Equal(t, amiOld, stored.PreviousImageID, "the group's template AMI is the one before")
			}},
		detectFrom(state.PhaseIdle), detectFrom(state.PhaseCompleted), detectFrom(state.PhaseRolledBack),
		{from: pos(state.PhaseHalted, ""), to: pos(state.PhaseIdle, ""), why: "a group not rolled for its tags, fixed, already on the target",
			setup: func(rg *rig) model.Inputs {
				rg.templates.current.ImageID = amiNew
				rg.seed0(notRolledRecord())
				return model.Inputs{View: view(2, false, serving("i-1", amiNew), serving("i-2", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Empty(t, stored.Reason, "the not-rolled reason goes")
				require.Equal(t, amiNew, stored.TargetImageID)
			}},
		{from: pos(state.PhaseHalted, ""), to: pos(state.PhaseDetected, ""), why: "a group not rolled for its tags, fixed, on an older AMI",
			setup: func(rg *rig) model.Inputs {
				rg.target.Policy.Approval = model.ApprovalManual // stops at Waiting: the test looks at Detected only
				rg.seed0(notRolledRecord())
				return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.NotContains(t, stored.Reason, "not rolled")
			}},
		{from: pos(state.PhaseWaiting, ""), to: pos(state.PhaseDetected, ""), why: "a newer AMI replaces a refused one",
			setup: func(rg *rig) model.Inputs {
				rg.target.Policy.Approval = model.ApprovalManual
				rg.seed0(state.Rollout{Phase: state.PhaseWaiting, TargetImageID: amiBad, PreviousImageID: amiOld, Reason: model.AMIRefusedPrefix + "pending"})
				return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.Equal(t, amiOld, stored.PreviousImageID, "the refused AMI was never rolled")
			}},
		{from: pos(state.PhaseDetected, ""), to: pos(state.PhaseWaiting, ""), why: "manual approval holds it",
			setup: func(rg *rig) model.Inputs {
				rg.target.Policy.Approval = model.ApprovalManual
				rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
				return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Contains(t, stored.Reason, "approval: waiting for `patch-agent approve prod`")
				require.Empty(t, rg.templates.pointed, "nothing changed")
			}},
		startFrom(state.PhaseDetected), startFrom(state.PhaseWaiting),
		cannotRoll(state.PhaseDetected), cannotRoll(state.PhaseWaiting), cannotRoll(state.PhasePreparing),
		{from: pos(state.PhaseVerifying, ""), to: pos(state.PhaseCompleted, ""), why: "all on the target",
			setup: func(rg *rig) model.Inputs {
				rec := refreshing("ir-1")
				rec.Phase, rec.Current = state.PhaseVerifying, nil
				rg.seed0(rec)
				return model.Inputs{View: view(2, false, serving("i-8", amiNew), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, _ state.Rollout) {
				require.Empty(t, groupWrites(rg), "nothing of the group is written")
				require.Empty(t, rg.o.AutoScaling.(*fakeRefreshes).starts)
			}},
	}
}

// detectFrom is the row phase -> Detected: a settled record and a source naming a new AMI.
// notRolledRecord is the record recordNotRolled writes for a misconfigured group that had none: Halted, no
// target AMI, the reason.
func notRolledRecord() state.Rollout {
	return state.Rollout{Phase: state.PhaseHalted, Reason: notRolledPrefix + `group prod is opted in but misconfigured: tag patch-agent/strategy="rolling": want refresh or auto`}
}

func detectFrom(phase state.Phase) transitionCase {
	return transitionCase{from: pos(phase, ""), to: pos(state.PhaseDetected, ""), why: "the source names a new AMI",
		setup: func(rg *rig) model.Inputs {
			rg.target.Policy.Approval = model.ApprovalManual
			rec := state.Rollout{Phase: phase, TargetImageID: amiOld, PreviousImageID: "ami-00000000000000009"}
			if phase == state.PhaseRolledBack {
				rec.TargetImageID, rec.PreviousImageID = amiBad, amiOld
			}
			rg.seed0(rec)
			return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, _ *rig, stored state.Rollout) {
			require.Equal(t, amiNew, stored.TargetImageID)
			require.Equal(t, amiOld, stored.PreviousImageID, "the group ran the previous target (after a rollback: the one before it)")
		}}
}

// startFrom is the row phase -> Preparing: every gate passes.
func startFrom(phase state.Phase) transitionCase {
	return transitionCase{from: pos(phase, ""), to: pos(state.PhasePreparing, ""), why: "gates pass, strategy chosen",
		setup: func(rg *rig) model.Inputs {
			rg.seed0(state.Rollout{Phase: phase, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour), Reason: "soak: ..."})
			return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, rg *rig, stored state.Rollout) {
			require.Equal(t, model.StrategyRefresh, stored.Strategy)
			require.Equal(t, "patch-agent-launch", stored.Refresh.LaunchingHook, "the launching hook the refresh's instances wait on")
			require.Equal(t, &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, stored.PreviousTemplate, "recorded for rollback")
			require.Equal(t, groupCall{Op: "Traits", Target: "prod"}, rg.groups.calls[0])
		}}
}

// cannotRoll is the row phase -> Halted of a group without a launch template.
func cannotRoll(phase state.Phase) transitionCase {
	return transitionCase{from: pos(phase, ""), to: pos(state.PhaseHalted, ""), why: "the group has no launch template",
		setup: func(rg *rig) model.Inputs {
			rg.seed0(state.Rollout{Phase: phase, Strategy: model.StrategyRefresh, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
			return model.Inputs{View: view(2, true, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, rg *rig, stored state.Rollout) {
			require.Contains(t, stored.Reason, "has no launch template")
			require.Empty(t, rg.templates.pointed)
		}}
}

// seed0 stores rec for the rig's target (the test's failure is reported by the first Reconcile).
func (r *rig) seed0(rec state.Rollout) {
	rec.Group, rec.Platform, rec.Cluster = r.target.Group, r.target.Platform, r.target.Cluster
	if _, err := r.store.PutRollout(context.Background(), rec); err != nil {
		panic(err)
	}
}

// TestOrchestratorTransitions exercises every agent row of the transition table (state.Transitions) with one
// Reconcile on a fake clock and fake providers: the subtest named after the row starts at its From position
// and requires the first transition written to be exactly that row. A row of the table without a case here,
// or a case whose first write is another row, fails.
func TestOrchestratorTransitions(t *testing.T) {
	cases := slices.Concat(transitionCases(), nodegroupTransitionCases(), refreshTransitionCases(), olderEngineTransitionCases())
	exercised := map[state.Transition]bool{}
	ran := 0
	for _, tc := range cases {
		t.Run(tc.from.String()+"->"+tc.to.String()+" "+tc.why, func(t *testing.T) {
			ran++
			rg := newRig()
			in := tc.setup(rg)
			var seen []state.Transition
			restore := state.SetTransitionRecorder(func(tr state.Transition) { seen = append(seen, tr) })
			_, err := rg.o.Reconcile(context.Background(), rg.target, in)
			restore()
			require.NoError(t, err)
			require.NotEmpty(t, seen, "no transition written")
			require.Equal(t, tc.from, seen[0].From, "first transition %s -> %s", seen[0].From, seen[0].To)
			require.Equal(t, tc.to, seen[0].To, "first transition %s -> %s", seen[0].From, seen[0].To)
			require.Equal(t, state.WriterAgent, seen[0].By)
			exercised[seen[0]] = true
			if tc.check != nil {
				stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
				require.NoError(t, err)
				tc.check(t, rg, stored)
			}
		})
	}
	if ran < len(cases) {
		return // filtered with -run: coverage is judged on a full run only
	}
	for _, row := range state.Transitions {
		if row.By == state.WriterAgent {
			require.True(t, exercised[row], "row %s -> %s (%s) is never exercised by an orchestrator unit test", row.From, row.To, row.Why)
		}
	}
}

// TestOrchestratorRefusesIdleToTerminating: a save the table does not declare writes nothing and returns an
// error wrapping state.ErrTransition.
func TestOrchestratorRefusesIdleToTerminating(t *testing.T) {
	rg := newRig()
	rg.seed0(state.Rollout{Phase: state.PhaseIdle, TargetImageID: amiOld})
	ctx := context.Background()
	idle, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	rg.o.lastStored = idle
	bad := idle.Clone()
	bad.Phase, bad.Current = state.PhaseReplacing, &state.Replacement{Step: state.StepTerminating, OldInstanceID: "i-1"}
	_, err = rg.o.save(ctx, bad, "terminate")
	require.ErrorIs(t, err, state.ErrTransition)
	require.ErrorContains(t, err, "from Idle to Replacing/Terminating")
	after, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, idle, after, "nothing written")
}
