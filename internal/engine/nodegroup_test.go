package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// fakeNodegroups answers the managed node group rollout's EKS calls: StartUpdate returns the update its token
// started (a new id for a new token), DescribeUpdate the status set for the id.
type fakeNodegroups struct {
	starts   []model.NodegroupUpdateRequest
	byToken  map[string]string
	status   map[string]model.NodegroupUpdate
	startErr error
}

var _ model.NodegroupAPI = (*fakeNodegroups)(nil)

func (f *fakeNodegroups) StartUpdate(_ context.Context, req model.NodegroupUpdateRequest) (model.NodegroupUpdate, error) {
	f.starts = append(f.starts, req)
	if f.startErr != nil {
		return model.NodegroupUpdate{}, f.startErr
	}
	if f.byToken == nil {
		f.byToken = map[string]string{}
	}
	id, ok := f.byToken[req.Token]
	if !ok {
		id = "u-" + string(rune('1'+len(f.byToken)))
		f.byToken[req.Token] = id
	}
	return model.NodegroupUpdate{ID: id, Status: "InProgress"}, nil
}

func (f *fakeNodegroups) DescribeUpdate(_ context.Context, _, _, id string) (model.NodegroupUpdate, error) {
	if u, ok := f.status[id]; ok {
		u.ID = id
		return u, nil
	}
	return model.NodegroupUpdate{ID: id, Status: "InProgress"}, nil
}

const (
	releaseOld = "1.31.7-20250101"
	releaseNew = "1.31.7-20250610"
)

// ngTarget is the managed node group target of the unit tests: prod/workers, AL2023.
func ngTarget() model.Target {
	return model.Target{Group: model.NodegroupKey("prod", "workers"), Platform: model.PlatformEKSManaged, Cluster: "prod",
		Parameter: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/release_version"}
}

// ngInputs is one tick of the node group at release, ACTIVE, with the new release published.
func ngInputs(release, status string) model.Inputs {
	return model.Inputs{Nodegroup: &model.NodegroupInputs{
		Nodegroup:    model.Nodegroup{Cluster: "prod", Name: "workers", Version: "1.31", ReleaseVersion: release, AMIType: "AL2023_x86_64_STANDARD", Status: status},
		ControlPlane: "1.31",
		Release: &model.ResolvedRelease{Parameter: ngTarget().Parameter, Release: releaseNew, ImageID: amiNew, Version: 7,
			LastModified: now0.AddDate(0, 0, -2)}}}
}

// ngRecord is a node group record at phase/step with the update updateID (none when "").
func ngRecord(phase state.Phase, step state.Step, updateID string, rollback bool) state.Rollout {
	r := state.Rollout{Phase: phase, TargetImageID: amiNew, Source: ngTarget().Parameter, DetectedAt: now0.Add(-10 * 60e9),
		Nodegroup: &state.NodegroupProgress{Cluster: "prod", Name: "workers", AMIType: "AL2023_x86_64_STANDARD", KubernetesVersion: "1.31",
			TargetRelease: releaseNew, PreviousRelease: releaseOld, UpdateToken: "tok", UpdateID: updateID, Rollback: rollback}}
	if step != "" {
		r.Current = &state.Replacement{Step: step, StepStartedAt: now0.Add(-5 * 60e9)}
	}
	return r
}

// nodegroupTransitionCases are the managed node group rows of state.Transitions (TestOrchestratorTransitions).
func nodegroupTransitionCases() []transitionCase {
	useNG := func(rg *rig, f *fakeNodegroups, rec state.Rollout) {
		rg.target = ngTarget()
		rg.o.Nodegroups = f
		rg.seed0(rec)
	}
	failed := &model.NodegroupUpdate{Status: "Failed", Errors: []string{"PodEvictionFailure: Reached max retries while trying to evict pods"}}
	return []transitionCase{
		{from: pos("", ""), to: pos(state.PhaseHalted, ""), why: "a managed node group's Auto Scaling group tagged for patch-agent: status says why, nothing is touched",
			setup: func(rg *rig) model.Inputs {
				why := model.ManagedNodegroupGroup("prod", map[string]string{model.TagEnabled: "true", model.TagNodegroupName: "workers"})
				return model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), AMI: newAMI(), NotRolled: why}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, state.PhaseHalted, stored.Phase)
				require.Contains(t, stored.Reason, "not rolled: ")
				require.Contains(t, stored.Reason, "eks:nodegroup-name=workers", "status names the tag that keeps it from being rolled")
				require.Empty(t, stored.TargetImageID, "no target: nothing to approve or roll back")
				require.Empty(t, rg.groups.calls, "no Auto Scaling call")
				require.Empty(t, rg.templates.pointed, "no launch template change")
				require.Empty(t, rg.platform.started, "no drain")
				why := model.ManagedNodegroupGroup("prod", map[string]string{model.TagNodegroupName: "workers"})
				again, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{NotRolled: why, AMI: newAMI()})
				require.NoError(t, err)
				require.Equal(t, stored.Version, again.Version, "the same reason is not written again")
			}},
		{from: pos(state.PhasePreparing, ""), to: pos(state.PhaseReplacing, state.StepNodegroupUpdate), why: "managed node group: the token is written before UpdateNodegroupVersion",
			setup: func(rg *rig) model.Inputs {
				useNG(rg, &fakeNodegroups{}, ngRecord(state.PhasePreparing, "", "", false))
				return ngInputs(releaseOld, "ACTIVE")
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				f := rg.o.Nodegroups.(*fakeNodegroups)
				require.Len(t, f.starts, 1, "one UpdateNodegroupVersion")
				require.Equal(t, releaseNew, f.starts[0].ReleaseVersion)
				require.Equal(t, stored.Nodegroup.UpdateToken, f.starts[0].Token, "sent with the recorded token")
				require.Equal(t, "u-1", stored.Nodegroup.UpdateID, "the update id is recorded")
				next, err := rg.o.Reconcile(context.Background(), rg.target, ngInputs(releaseOld, "UPDATING"))
				require.NoError(t, err)
				require.Contains(t, next.Reason, "maxUnavailable 1, EKS's default", "status shows the updateConfig left to EKS")
				require.Len(t, f.starts, 1, "the next tick follows the update, sends none")
			}},
		{from: pos(state.PhaseReplacing, state.StepNodegroupUpdate), to: pos(state.PhaseVerifying, ""), why: "managed node group: EKS update Successful",
			setup: func(rg *rig) model.Inputs {
				useNG(rg, &fakeNodegroups{status: map[string]model.NodegroupUpdate{"u-1": {Status: "Successful"}}}, ngRecord(state.PhaseReplacing, state.StepNodegroupUpdate, "u-1", false))
				return ngInputs(releaseNew, "ACTIVE")
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Equal(t, state.PhaseCompleted, stored.Phase, "verified on the node group's release")
				require.Empty(t, rg.o.Nodegroups.(*fakeNodegroups).starts, "no second update")
			}},
		{from: pos(state.PhaseReplacing, state.StepNodegroupUpdate), to: pos(state.PhaseRollingBack, state.StepNodegroupUpdate), why: "managed node group: EKS update Failed, roll back",
			setup: func(rg *rig) model.Inputs {
				useNG(rg, &fakeNodegroups{status: map[string]model.NodegroupUpdate{"u-1": *failed}}, ngRecord(state.PhaseReplacing, state.StepNodegroupUpdate, "u-1", false))
				return ngInputs(releaseOld, "ACTIVE")
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				require.Contains(t, stored.Reason, "PodEvictionFailure", "EKS's error on status")
				require.True(t, stored.Nodegroup.Rollback)
				f := rg.o.Nodegroups.(*fakeNodegroups)
				require.Len(t, f.starts, 1, "the rollback update is sent")
				require.Equal(t, releaseOld, f.starts[0].ReleaseVersion, "back to the previous release")
				require.NotEqual(t, "tok", f.starts[0].Token, "the rollback has a token of its own")
			}},
		{from: pos(state.PhaseReplacing, state.StepNodegroupUpdate), to: pos(state.PhaseHalted, state.StepNodegroupUpdate), why: "managed node group: EKS update Failed, no rollback",
			setup: func(rg *rig) model.Inputs {
				rg.o.Policy.RollbackOnFailure = false
				useNG(rg, &fakeNodegroups{status: map[string]model.NodegroupUpdate{"u-1": *failed}}, ngRecord(state.PhaseReplacing, state.StepNodegroupUpdate, "u-1", false))
				return ngInputs(releaseOld, "ACTIVE")
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.True(t, strings.HasPrefix(stored.Reason, "failed: EKS update u-1"), stored.Reason)
				require.Contains(t, stored.Reason, "PodEvictionFailure")
				require.Equal(t, []string{failed.Errors[0]}, stored.Nodegroup.UpdateErrors)
			}},
		{from: pos(state.PhaseRollingBack, state.StepNodegroupUpdate), to: pos(state.PhaseRolledBack, ""), why: "managed node group: previous release restored",
			setup: func(rg *rig) model.Inputs {
				useNG(rg, &fakeNodegroups{status: map[string]model.NodegroupUpdate{"u-2": {Status: "Successful"}}}, ngRecord(state.PhaseRollingBack, state.StepNodegroupUpdate, "u-2", true))
				return ngInputs(releaseOld, "ACTIVE")
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, releaseNew, stored.RollbackFrom, "the failed release is not rolled again")
			}},
		{from: pos(state.PhaseRollingBack, state.StepNodegroupUpdate), to: pos(state.PhaseHalted, state.StepNodegroupUpdate), why: "managed node group: rollback update Failed",
			setup: func(rg *rig) model.Inputs {
				useNG(rg, &fakeNodegroups{status: map[string]model.NodegroupUpdate{"u-2": *failed}}, ngRecord(state.PhaseRollingBack, state.StepNodegroupUpdate, "u-2", true))
				return ngInputs(releaseOld, "ACTIVE")
			},
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Contains(t, stored.Reason, "rollback update u-2")
			}},
	}
}

// countingTemplates counts EnsureVersion calls (a launch template version created or found again).
type countingTemplates struct {
	providers.TemplateProvider
	ensured int
}

func (c *countingTemplates) EnsureVersion(ctx context.Context, ref state.LaunchTemplateRef, imageID, why string) (providers.TemplateVersion, error) {
	c.ensured++
	return c.TemplateProvider.EnsureVersion(ctx, ref, imageID, why)
}

// Invariant 7: a CUSTOM managed node group's launch template version is a destructive step with its own
// strongly consistent pause check, so a pause the look's (shared, up to a tick old) listing does not show yet
// still holds it, as it holds UpdateNodegroupVersion.
func TestPausedCustomNodegroupCreatesNoLaunchTemplateVersionOnAStalePauseRead(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rg.target = ngTarget()
	rg.o.Nodegroups = &fakeNodegroups{}
	ct := &countingTemplates{TemplateProvider: rg.templates}
	rg.o.Templates = ct
	rec := ngRecord(state.PhasePreparing, "", "", false)
	rec.Nodegroup.AMIType, rec.Nodegroup.LaunchTemplateID, rec.Nodegroup.PreviousTemplateVersion = "CUSTOM", "lt-1", "1"
	rec.Nodegroup.TargetRelease, rec.Nodegroup.PreviousRelease = "", ""
	rg.seed0(rec)
	require.NoError(t, rg.store.PutLock(ctx, state.Lock{Group: state.GlobalScope, Reason: "incident", Who: "alice", Since: now0}))
	in := ngInputs(releaseOld, "ACTIVE")
	in.Nodegroup.Nodegroup.AMIType = "CUSTOM"
	in.AMI = newAMI()
	in.PauseRead = func(context.Context) (*state.Lock, error) { return nil, nil } // a listing from before the pause
	_, err := rg.o.Reconcile(ctx, rg.target, in)
	require.NoError(t, err)
	require.Empty(t, rg.o.Nodegroups.(*fakeNodegroups).starts)
	require.Zero(t, ct.ensured, "no launch template version while paused")
}
