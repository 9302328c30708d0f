package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// pos builds a Position (the zero Step: no replacement in flight).
func pos(ph state.Phase, st state.Step) state.Position { return state.Position{Phase: ph, Step: st} }

// replacing is a Replacing record whose current replacement of i-1 is at step, with DesiredBefore 2 and
// InstancesBefore i-1, i-2.
func replacing(strategy string, step state.Step) state.Rollout {
	return state.Rollout{Phase: state.PhaseReplacing, TargetImageID: amiNew, PreviousImageID: amiOld, Strategy: strategy,
		PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, NewTemplateVersion: "2",
		Current: &state.Replacement{Step: step, OldInstanceID: "i-1", DesiredBefore: 2, InstancesBefore: []string{"i-1", "i-2"},
			StepStartedAt: now0.Add(-time.Minute)}}
}

// transitionCase sets up the world for one row of state.Transitions: the record is stored, the returned
// inputs are what the tick sees; check (optional) asserts the effect the transition made.
type transitionCase struct {
	from, to state.Position
	why      string
	setup    func(rg *rig) Inputs
	check    func(t *testing.T, rg *rig, stored state.Rollout)
}

func transitionCases() []transitionCase {
	platformless := func(rec state.Rollout) func(rg *rig) Inputs {
		return func(rg *rig) Inputs {
			rg.target.Platform = "nomad"
			rg.seed0(rec)
			return Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
		}
	}
	halted := func(t *testing.T, _ *rig, stored state.Rollout) {
		require.Equal(t, state.PhaseHalted, stored.Phase)
		require.True(t, strings.HasPrefix(stored.Reason, "failed: "), stored.Reason)
	}
	return []transitionCase{
		{from: pos("", ""), to: pos(state.PhaseIdle, ""), why: "first sight of a group already on the target",
			setup: func(rg *rig) Inputs {
				rg.templates.current.ImageID = amiNew
				return Inputs{View: view(2, false, serving("i-1", amiNew), serving("i-2", amiNew)), AMI: newAMI()}
			}},
		{from: pos("", ""), to: pos(state.PhaseDetected, ""), why: "first sight of a group on an older AMI",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual // stops at Waiting: the test looks at Detected only
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.Equal(t, amiOld, stored.PreviousImageID, "the group's template AMI is the one before")
			}},
		detectFrom(state.PhaseIdle), detectFrom(state.PhaseCompleted), detectFrom(state.PhaseRolledBack),
		{from: pos(state.PhaseHalted, ""), to: pos(state.PhaseIdle, ""), why: "a group not rolled for its tags, fixed, already on the target",
			setup: func(rg *rig) Inputs {
				rg.templates.current.ImageID = amiNew
				rg.seed0(notRolledRecord())
				return Inputs{View: view(2, false, serving("i-1", amiNew), serving("i-2", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Empty(t, stored.Reason, "the not-rolled reason goes")
				require.Equal(t, amiNew, stored.TargetImageID)
			}},
		{from: pos(state.PhaseHalted, ""), to: pos(state.PhaseDetected, ""), why: "a group not rolled for its tags, fixed, on an older AMI",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual // stops at Waiting: the test looks at Detected only
				rg.seed0(notRolledRecord())
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.NotContains(t, stored.Reason, "not rolled")
			}},
		{from: pos(state.PhaseWaiting, ""), to: pos(state.PhaseDetected, ""), why: "a newer AMI replaces a refused one",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual
				rg.seed0(state.Rollout{Phase: state.PhaseWaiting, TargetImageID: amiBad, PreviousImageID: amiOld, Reason: amiRefusedPrefix + "pending"})
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, amiNew, stored.TargetImageID)
				require.Equal(t, amiOld, stored.PreviousImageID, "the refused AMI was never rolled")
			}},
		{from: pos(state.PhaseDetected, ""), to: pos(state.PhaseWaiting, ""), why: "manual approval holds it",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual
				rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Contains(t, stored.Reason, "approval: waiting for `patch-agent approve prod`")
				require.Empty(t, rg.templates.pointed, "nothing changed")
			}},
		startFrom(state.PhaseDetected), startFrom(state.PhaseWaiting),
		cannotRoll(state.PhaseDetected), cannotRoll(state.PhaseWaiting), cannotRoll(state.PhasePreparing),
		{from: pos(state.PhasePreparing, ""), to: pos(state.PhaseReplacing, ""), why: "the group launches the new version",
			setup: func(rg *rig) Inputs {
				rg.seed0(state.Rollout{Phase: state.PhasePreparing, TargetImageID: amiNew, PreviousImageID: amiOld, Strategy: StrategySurge})
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, []state.LaunchTemplateRef{{ID: "lt-1", Version: "2"}}, rg.templates.pointed)
				require.Equal(t, "2", stored.NewTemplateVersion)
			}},
		{from: pos(state.PhaseReplacing, ""), to: pos(state.PhaseReplacing, state.StepSurge), why: "pick the oldest outdated instance (surge)",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, "")
				rec.Current = nil
				rg.seed0(rec)
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, groupCall{Op: "SetDesired", Target: "prod", N: 3}, rg.groups.calls[0], "the surge follows the pick")
			}},
		pickFirst(StrategyDrainFirst, false, state.StepDraining), pickFirst(StrategyDrainFirst, true, state.StepTerminating),
		{from: pos(state.PhaseReplacing, ""), to: pos(state.PhaseDetected, ""), why: "a newer AMI supersedes the target at an instance boundary",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual // the newer AMI waits for its own approval
				rec := replacing(StrategySurge, "")
				rec.Current, rec.Replaced, rec.ApprovedImage, rec.ApprovedBy = nil, []string{"i-0"}, amiNew, "alice"
				rec.MaxRaisedFrom, rec.MaxRaisedTo = 2, 3
				rec.Trigger = TriggerMaxInstanceAge // superseding a max-instance-age rollout
				rg.seed0(rec)
				newer := &ResolvedAMI{Parameter: "/golden/ecs", ImageID: amiBad, Version: 3, LastModified: now0.Add(-48 * time.Hour)}
				return Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-9", amiNew)), AMI: newer}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, amiBad, stored.TargetImageID)
				require.Equal(t, state.PhaseDetected, stored.Phase, "every gate again (approval holds it next tick)")
				require.Empty(t, stored.ApprovedImage, "an approval belongs to one AMI")
				require.Empty(t, stored.Trigger, "a newer AMI is an AMI rollout: its soak applies")
				require.Empty(t, stored.Replaced, "instances on the superseded AMI are outdated again")
				require.Equal(t, &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, stored.PreviousTemplate, "rollback still goes to the last good template")
				require.Equal(t, int32(3), stored.MaxRaisedTo, "the agent's max change is kept for Verifying")
				require.Empty(t, rg.groups.calls, "nothing touched at the boundary")
			}},
		{from: pos(state.PhaseReplacing, ""), to: pos(state.PhaseVerifying, ""), why: "no outdated instance left",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, "")
				rec.Current = nil
				rg.seed0(rec)
				return Inputs{View: view(2, false, serving("i-8", amiNew), serving("i-9", amiNew)), AMI: newAMI()}
			}},
		{from: pos(state.PhaseReplacing, ""), to: pos(state.PhaseHalted, ""), why: "platform unavailable",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, "")
				rec.Current = nil
				return platformless(rec)(rg)
			}, check: halted},
		{from: pos(state.PhaseReplacing, state.StepSurge), to: pos(state.PhaseReplacing, state.StepReplacementHealthy), why: "desired+1 written",
			setup: func(rg *rig) Inputs {
				rg.seed0(replacing(StrategySurge, state.StepSurge))
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, _ state.Rollout) {
				require.Equal(t, []groupCall{{Op: "SetDesired", Target: "prod", N: 3}}, rg.groups.calls, "one absolute surge from DesiredBefore")
			}},
		{from: pos(state.PhaseReplacing, state.StepSurge), to: pos(state.PhaseHalted, state.StepSurge), why: "platform unavailable",
			setup: platformless(replacing(StrategySurge, state.StepSurge)), check: halted},
		{from: pos(state.PhaseReplacing, state.StepReplacementHealthy), to: pos(state.PhaseReplacing, state.StepDraining), why: "replacement serving",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual // irrelevant once replacing; kept to show gates do not hold a wait
				rg.o.Policy.DrainTimeout = time.Hour
				rg.seed0(replacing(StrategySurge, state.StepReplacementHealthy))
				return Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, "i-9", stored.Current.NewInstanceID)
				require.Equal(t, []string{"i-1"}, rg.platform.started, "the old instance is drained once its replacement serves")
			}},
		{from: pos(state.PhaseReplacing, state.StepReplacementHealthy), to: pos(state.PhaseRollingBack, state.StepReplacementHealthy),
			why: "the replacement launched another AMI",
			setup: func(rg *rig) Inputs {
				rg.seed0(replacing(StrategySurge, state.StepReplacementHealthy))
				return Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiBad)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Contains(t, stored.Reason, "replacement i-9 launched AMI "+amiBad)
				require.Empty(t, rg.platform.started, "nothing drained")
			}},
		{from: pos(state.PhaseReplacing, state.StepReplacementHealthy), to: pos(state.PhaseHalted, state.StepReplacementHealthy),
			why: "health timeout without a template to roll back to",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, state.StepReplacementHealthy)
				rec.PreviousTemplate = nil
				rec.Current.StepStartedAt = now0.Add(-rg.o.Policy.HealthTimeout - time.Second)
				rg.seed0(rec)
				return Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Contains(t, stored.Reason, "no replacement instance launched after 10m0s")
			}},
		{from: pos(state.PhaseReplacing, state.StepReplacementHealthy), to: pos(state.PhaseReplacing, state.StepSurge),
			why: "capacity provider: ECS scaled the replacement in before it took tasks",
			setup: func(rg *rig) Inputs {
				rg.seed0(replacing(StrategyCapacityProvider, state.StepReplacementHealthy))
				// desired is back at DesiredBefore and nothing launched since the surge is left
				return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, 1, stored.Current.Resurges)
				require.Equal(t, "i-1", stored.Current.OldInstanceID, "the same old instance waits for the new surge")
				require.Empty(t, rg.platform.started, "nothing drained without a replacement")
			}},
		{from: pos(state.PhaseReplacing, state.StepTerminating), to: pos(state.PhaseReplacing, state.StepReplacementHealthy),
			why: "capacity provider: terminated without decrement to rebalance zones",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategyCapacityProvider, state.StepTerminating)
				rec.Current.Rebalance, rec.Current.NewInstanceID = true, "i-9"
				rg.seed0(rec)
				return Inputs{View: view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, []groupCall{{Op: "Terminate", Target: "i-1", Decrease: false}}, rg.groups.calls, "Auto Scaling launches into i-1's zone")
				require.True(t, stored.Current.GiveBack, "the surge goes back through the next replacement")
				require.Contains(t, stored.Replaced, "i-1")
			}},
		{from: pos(state.PhaseReplacing, state.StepDraining), to: pos(state.PhaseReplacing, state.StepReplacementHealthy),
			why: "the replacement stopped serving before the drain",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, state.StepDraining)
				rec.Current.NewInstanceID = "i-9"
				rg.seed0(rec)
				return Inputs{View: view(3, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Empty(t, rg.platform.started, "no drain while the replacement is gone")
				require.Empty(t, stored.Current.NewInstanceID)
			}},
		{from: pos(state.PhaseReplacing, state.StepDraining), to: pos(state.PhaseReplacing, state.StepTerminating), why: "drained",
			setup: func(rg *rig) Inputs {
				rg.platform.drained = true
				rec := replacing(StrategySurge, state.StepDraining)
				rec.Current.NewInstanceID, rec.Current.DrainStartedAt = "i-9", now0.Add(-time.Minute)
				rg.seed0(rec)
				return Inputs{View: view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, _ state.Rollout) {
				require.Equal(t, groupCall{Op: "Terminate", Target: "i-1", Decrease: true}, rg.groups.calls[0], "terminated with decrement: the surge goes back")
			}},
		{from: pos(state.PhaseReplacing, state.StepDraining), to: pos(state.PhaseHalted, state.StepDraining), why: "drain deadline",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, state.StepDraining)
				rec.Current.NewInstanceID, rec.Current.DrainStartedAt = "i-9", now0.Add(-rg.o.Policy.DrainTimeout-time.Second)
				rg.seed0(rec)
				return Inputs{View: view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, []string{"i-1"}, rg.platform.undrained, "put back in service at the deadline")
				require.Contains(t, stored.Reason, "drain of i-1 did not finish within 30m0s")
			}},
		{from: pos(state.PhaseReplacing, state.StepDraining), to: pos(state.PhaseReplacing, ""), why: "old instance left (drain-first)",
			setup: func(rg *rig) Inputs {
				rg.target.Policy.Approval = ApprovalManual
				rg.seed0(replacing(StrategyDrainFirst, state.StepDraining))
				return Inputs{View: view(1, false, serving("i-2", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Contains(t, stored.Replaced, "i-1")
			}},
		{from: pos(state.PhaseReplacing, state.StepDraining), to: pos(state.PhaseReplacing, state.StepSurge), why: "old instance left, the surge carries over",
			setup: func(rg *rig) Inputs {
				rg.seed0(replacing(StrategySurge, state.StepDraining))
				// desired is still DesiredBefore+1: the agent's surge, carried to i-2 whose replacement i-9 is there
				return Inputs{View: view(3, false, serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, "i-2", stored.Current.OldInstanceID)
				require.NotContains(t, rg.groups.calls, groupCall{Op: "SetDesired", Target: "prod", N: 4}, "no second surge")
			}},
		{from: pos(state.PhaseReplacing, state.StepTerminating), to: pos(state.PhaseReplacing, ""), why: "old instance terminating",
			setup: func(rg *rig) Inputs {
				rg.seed0(replacing(StrategySurge, state.StepTerminating))
				return Inputs{View: view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, []groupCall{{Op: "Terminate", Target: "i-1", Decrease: true}}, rg.groups.calls)
				require.Equal(t, []string{"i-1"}, stored.Replaced)
			}},
		{from: pos(state.PhaseReplacing, state.StepTerminating), to: pos(state.PhaseReplacing, state.StepSurge), why: "old instance left, the surge carries over",
			setup: func(rg *rig) Inputs {
				rg.seed0(replacing(StrategySurge, state.StepTerminating))
				return Inputs{View: view(3, false, serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, "i-2", stored.Current.OldInstanceID)
				require.Equal(t, int32(2), stored.Current.DesiredBefore, "the baseline is not the raised desired capacity")
			}},
		{from: pos(state.PhaseReplacing, state.StepTerminating), to: pos(state.PhaseReplacing, state.StepDraining),
			why: "old instance left with no outdated one: the surge goes back through a drain",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, state.StepTerminating)
				rec.Current.NewInstanceID = "i-9"
				rg.seed0(rec)
				return Inputs{View: view(3, false, serving("i-8", amiNew), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, "i-8", stored.Current.OldInstanceID, "an instance on the target gives the surge back, never the replacement")
				require.NotContains(t, rg.groups.calls, groupCall{Op: "SetDesired", Target: "prod", N: 2}, "never by lowering desired capacity")
			}},
		{from: pos(state.PhaseReplacing, state.StepTerminating), to: pos(state.PhaseHalted, state.StepTerminating), why: "platform unavailable",
			setup: platformless(replacing(StrategySurge, state.StepTerminating)), check: halted},
		{from: pos(state.PhaseVerifying, ""), to: pos(state.PhaseReplacing, ""), why: "an instance is not on the target",
			setup: func(rg *rig) Inputs {
				rg.seed0(state.Rollout{Phase: state.PhaseVerifying, TargetImageID: amiNew, Strategy: StrategySurge})
				return Inputs{View: view(2, false, serving("i-2", amiOld), serving("i-9", amiNew)), AMI: newAMI()}
			}},
		{from: pos(state.PhaseVerifying, ""), to: pos(state.PhaseCompleted, ""), why: "all on the target, max restored",
			setup: func(rg *rig) Inputs {
				rg.seed0(state.Rollout{Phase: state.PhaseVerifying, TargetImageID: amiNew, MaxRaisedFrom: 3, MaxRaisedTo: 4})
				return Inputs{View: view(2, false, serving("i-8", amiNew), serving("i-9", amiNew)), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, []groupCall{{Op: "SetMax", Target: "prod", N: 3}}, rg.groups.calls, "the agent's own +1 on max goes back")
				require.Zero(t, stored.MaxRaisedTo)
			}},
		{from: pos(state.PhaseRollingBack, state.StepReplacementHealthy), to: pos(state.PhaseRolledBack, ""), why: "template restored",
			setup: func(rg *rig) Inputs {
				rec := replacing(StrategySurge, state.StepReplacementHealthy)
				rec.Phase, rec.PreviousTemplate = state.PhaseRollingBack, &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}
				rg.seed0(rec)
				v := view(2, false, serving("i-1", amiOld), serving("i-2", amiOld))
				v.Group.LaunchTemplate.Version = new("2")
				return Inputs{View: v, AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, []state.LaunchTemplateRef{{ID: "lt-1", Version: "1"}}, rg.templates.pointed, "the group is back on its version")
				require.Nil(t, stored.Current)
			}},
	}
}

// detectFrom is the row phase -> Detected: a settled record and a source naming a new AMI.
// notRolledRecord is the record recordNotRolled writes for a misconfigured group that had none: Halted, no
// target AMI, the reason.
func notRolledRecord() state.Rollout {
	return state.Rollout{Phase: state.PhaseHalted, Reason: notRolledPrefix + `group prod is opted in but misconfigured: tag patch-agent/strategy="rolling" is not one of auto, refresh, surge, drain-first, capacity-provider`}
}

func detectFrom(phase state.Phase) transitionCase {
	return transitionCase{from: pos(phase, ""), to: pos(state.PhaseDetected, ""), why: "the source names a new AMI",
		setup: func(rg *rig) Inputs {
			rg.target.Policy.Approval = ApprovalManual
			rec := state.Rollout{Phase: phase, TargetImageID: amiOld, PreviousImageID: "ami-00000000000000009"}
			if phase == state.PhaseRolledBack {
				rec.TargetImageID, rec.PreviousImageID = amiBad, amiOld
			}
			rg.seed0(rec)
			return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, _ *rig, stored state.Rollout) {
			require.Equal(t, amiNew, stored.TargetImageID)
			require.Equal(t, amiOld, stored.PreviousImageID, "the group ran the previous target (after a rollback: the one before it)")
		}}
}

// startFrom is the row phase -> Preparing: every gate passes.
func startFrom(phase state.Phase) transitionCase {
	return transitionCase{from: pos(phase, ""), to: pos(state.PhasePreparing, ""), why: "gates pass, strategy chosen",
		setup: func(rg *rig) Inputs {
			rg.seed0(state.Rollout{Phase: phase, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour), Reason: "soak: ..."})
			return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, rg *rig, stored state.Rollout) {
			require.Equal(t, StrategySurge, stored.Strategy)
			require.Equal(t, &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, stored.PreviousTemplate, "recorded for rollback")
			require.Equal(t, groupCall{Op: "Traits", Target: "prod"}, rg.groups.calls[0])
		}}
}

// cannotRoll is the row phase -> Halted of a group without a launch template.
func cannotRoll(phase state.Phase) transitionCase {
	return transitionCase{from: pos(phase, ""), to: pos(state.PhaseHalted, ""), why: "the group has no launch template",
		setup: func(rg *rig) Inputs {
			rg.seed0(state.Rollout{Phase: phase, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
			return Inputs{View: view(2, true, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, rg *rig, stored state.Rollout) {
			require.Contains(t, stored.Reason, "has no launch template")
			require.Empty(t, rg.templates.pointed)
		}}
}

// pickFirst is the row Replacing -> Replacing/first of the drain-first strategy.
func pickFirst(strategy string, managedDraining bool, first state.Step) transitionCase {
	why := "pick (" + strategy + ")"
	if managedDraining {
		why = "pick (" + strategy + ", ECS managed draining)"
	}
	return transitionCase{from: pos(state.PhaseReplacing, ""), to: pos(state.PhaseReplacing, first), why: why,
		setup: func(rg *rig) Inputs {
			rg.target.Policy.Approval = ApprovalManual
			rec := replacing(strategy, "")
			rec.Current, rec.ECSManagedDraining = nil, managedDraining
			rg.seed0(rec)
			return Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI()}
		},
		check: func(t *testing.T, rg *rig, _ state.Rollout) {
			require.NotContains(t, rg.groups.calls, groupCall{Op: "SetDesired", Target: "prod", N: 3}, "drain-first never surges")
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
	cases := append(append(transitionCases(), nodegroupTransitionCases()...), refreshTransitionCases()...)
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
