package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Scenario tests of managed node group rollouts on the simulated account: discovery by tags, the release or AMI
// parameter, one UpdateNodegroupVersion tracked through DescribeUpdate, EKS replacing the nodes.

const (
	ngAMI1       = "ami-0aaaaaaaaaaaaaaa1"
	ngAMI2       = "ami-0aaaaaaaaaaaaaaa2"
	ngCustomPath = "/golden/eks/1.31"
	ngAMIType    = "AL2023_x86_64_STANDARD"
)

type ngWorld struct {
	t      *testing.T
	a      *sim.Account
	clk    *clocktesting.FakeClock
	store  *state.Memory
	o      *Orchestrator
	reader providers.NodegroupReader
	pause  *state.Lock
	group  string // the node group's Auto Scaling group
}

// newNGWorld is EKS cluster prod at 1.31 with managed node group workers of 3 nodes on ngAMI1, opted in:
// AMI type AL2023 at releaseOld, or (custom) AMI type CUSTOM with its launch template and ngCustomPath.
func newNGWorld(t *testing.T, custom bool, tags map[string]string) *ngWorld {
	clk := clocktesting.NewFakeClock(now0)
	a := sim.New(clk, sim.Options{})
	a.CreateEKSCluster("prod", "1.31")
	owner := "" // Amazon's: the public release parameters' AMIs
	if custom {
		owner = "111122223333" // the account's own golden AMIs
	}
	for i, id := range []string{ngAMI1, ngAMI2} {
		a.RegisterImage(sim.ImageSpec{ID: id, Name: "amazon-eks-node-al2023-x86_64-standard-1.31-v2026110" + string(rune('1'+i)), Created: now0.AddDate(0, 0, -30),
			OwnerID: owner})
	}
	all := map[string]string{model.TagEnabled: "true"}
	for k, v := range tags {
		all[k] = v
	}
	spec := sim.EKSNodegroupSpec{Cluster: "prod", Name: "workers", InstanceType: "m5.large", Min: 3, Max: 6, Desired: 3, Tags: all}
	if custom {
		a.PutParameter(ngCustomPath, ngAMI1)
		spec.AMIType, spec.LaunchTemplateID = "CUSTOM", a.CreateLaunchTemplate("workers", ngAMI1, "m5.large")
		if all[model.TagParameter] == "" {
			all[model.TagParameter] = ngCustomPath
		}
	} else {
		a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseOld, ImageID: ngAMI1}))
		spec.AMIType, spec.ReleaseVersion, spec.ImageID = ngAMIType, releaseOld, ngAMI1
	}
	group, err := a.CreateEKSNodegroup(spec)
	require.NoError(t, err)
	store := state.NewMemory()
	client := providers.NodegroupClient{EKS: a.EKSNodegroups(), SSM: a.SSM()}
	templates := providers.Templates{EC2: a.EC2(), AutoScaling: a.AutoScaling()}
	w := &ngWorld{t: t, a: a, clk: clk, store: store, group: group,
		reader: providers.NodegroupReader{Client: client, AutoScaling: a.AutoScaling(), EC2: a.EC2(), Templates: templates, Resolver: providers.Resolver{SSM: a.SSM()}}}
	w.o = w.orchestrator(client, templates)
	return w
}

// orchestrator is a fresh engine on the world's store: a restarted agent.
func (w *ngWorld) orchestrator(ng model.NodegroupAPI, templates providers.TemplateProvider) *Orchestrator {
	return &Orchestrator{Owner: "me", Store: w.store, AutoScaling: w.a.AutoScaling(), Templates: templates, Platforms: model.Platforms{},
		Clock: w.clk, Log: zap.NewNop(), Policy: model.DefaultPolicy(), Nodegroups: ng,
		AMIGate: &providers.AMIGate{EC2: w.a.EC2(), InstanceTypes: w.a.EC2InstanceTypes(), AccountID: "111122223333", Clock: w.clk}}
}

// tick discovers the node group, reads its inputs and reconciles it once, then lets 30 s pass.
func (w *ngWorld) tick() (state.Rollout, error) {
	ctx := context.Background()
	d, err := w.reader.Client.Discover(ctx)
	require.NoError(w.t, err)
	key := model.NodegroupKey("prod", "workers")
	require.Contains(w.t, d.Targets, key, "discovered by its tags: %v", d.Misconfigured)
	in, err := w.reader.Inputs(ctx, d.Targets[key], d.Nodegroups[key], w.pause, w.clk.Now())
	require.NoError(w.t, err)
	r, err := w.o.ReconcileNodegroup(ctx, d.Targets[key], in)
	w.a.Advance(30 * time.Second)
	return r, err
}

// runUntil ticks until the rollout reaches one of phases (at most 200 ticks) and returns the record.
func (w *ngWorld) runUntil(phases ...state.Phase) state.Rollout {
	for range 200 {
		r, err := w.tick()
		require.NoError(w.t, err)
		for _, p := range phases {
			if r.Phase == p {
				return r
			}
		}
	}
	w.t.Fatalf("rollout never reached %v", phases)
	return state.Rollout{}
}

// nodes returns the AMIs of the node group's in-service instances.
func (w *ngWorld) nodes() []string {
	var out []string
	for _, i := range w.a.Group(w.group).Instances {
		if i.LifecycleState == "InService" {
			out = append(out, i.ImageID)
		}
	}
	return out
}

// requireGroupUntouched: the agent made no Auto Scaling, ECS or Kubernetes-side change: EKS did the work.
func (w *ngWorld) requireGroupUntouched() {
	c := w.a.Calls()
	for _, op := range []string{"autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup", "autoscaling:TerminateInstanceInAutoScalingGroup",
		"autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceProtection", "ecs:UpdateContainerInstancesState"} {
		require.Zero(w.t, c[op], "the agent called %s: EKS drains and replaces a managed node group's nodes itself", op)
	}
}

func (w *ngWorld) nodegroupUpdates() []sim.EKSUpdateView {
	var out []sim.EKSUpdateView
	for _, u := range w.a.EKSUpdates("prod") {
		if u.Nodegroup == "workers" {
			out = append(out, u)
		}
	}
	return out
}

func (w *ngWorld) history() []string {
	h, err := w.store.History(context.Background(), model.NodegroupKey("prod", "workers"))
	require.NoError(w.t, err)
	var out []string
	for _, e := range h {
		out = append(out, e.Event)
	}
	return out
}

func TestManagedNodegroupReleaseBumpRollsWithOneUpdateAndNeverTouchesItsGroup(t *testing.T) {
	w := newNGWorld(t, false, nil)
	r := w.runUntil(state.PhaseIdle)
	require.Equal(t, releaseOld, r.Nodegroup.TargetRelease, "first sight: already on the recommended release")

	w.a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2}))
	r = w.runUntil(state.PhaseCompleted)

	ups := w.nodegroupUpdates()
	require.Len(t, ups, 1, "one UpdateNodegroupVersion for the whole rollout")
	require.Equal(t, releaseNew, ups[0].Params["ReleaseVersion"])
	require.Equal(t, r.Nodegroup.UpdateToken, ups[0].Token, "sent with the recorded ClientRequestToken")
	ng, _ := w.a.EKSNodegroup("prod", "workers")
	require.Equal(t, releaseNew, ng.ReleaseVersion)
	require.Equal(t, []string{ngAMI2, ngAMI2, ngAMI2}, w.nodes(), "EKS replaced every node with the new release's AMI")
	require.Equal(t, ngAMI2, r.TargetImageID)
	require.Equal(t, releaseOld, r.Nodegroup.PreviousRelease)
	w.requireGroupUntouched()
	require.Contains(t, w.history(), "detected")
	require.Contains(t, w.history(), "completed")

	// C13: the release parameter written again with the same value (a new parameter Version) starts nothing.
	w.a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2}))
	for range 5 {
		r, err := w.tick()
		require.NoError(t, err)
		require.Equal(t, state.PhaseCompleted, r.Phase)
	}
	require.Len(t, w.nodegroupUpdates(), 1, "decided on the release, never on the parameter Version")
}

func TestManagedNodegroupCustomAMIBumpUpdatesToANewLaunchTemplateVersion(t *testing.T) {
	w := newNGWorld(t, true, nil)
	w.runUntil(state.PhaseIdle)
	w.a.PutParameter(ngCustomPath, ngAMI2)
	r := w.runUntil(state.PhaseCompleted)

	ups := w.nodegroupUpdates()
	require.Len(t, ups, 1)
	require.Equal(t, "2", ups[0].Params["LaunchTemplateVersion"], "the node group moves to the version the agent made")
	require.Equal(t, "2", r.Nodegroup.TargetTemplateVersion)
	require.Equal(t, "1", r.Nodegroup.PreviousTemplateVersion, "recorded for rollback")
	ng, _ := w.a.EKSNodegroup("prod", "workers")
	require.Equal(t, "2", ng.LaunchTemplateVersion)
	require.Equal(t, []string{ngAMI2, ngAMI2, ngAMI2}, w.nodes())
	require.Equal(t, 1, w.a.Calls()["ec2:CreateLaunchTemplateVersion"], "one new launch template version")
	w.requireGroupUntouched()
}

func TestManagedNodegroupFailedUpdateHaltsWithEKSErrorAndRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rollback bool
		want     state.Phase
		updates  int
	}{
		{"rolls back to the previous release", true, state.PhaseRolledBack, 2},
		{"halts without rollback", false, state.PhaseHalted, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newNGWorld(t, false, nil)
			w.o.Policy.RollbackOnFailure = tc.rollback
			w.runUntil(state.PhaseIdle)
			w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: "prod", Nodegroup: "workers", PodEviction: true})
			w.a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2}))
			r := w.runUntil(tc.want)

			require.Contains(t, r.Reason, "PodEvictionFailure", "EKS's error is the reason on status")
			require.Equal(t, []string{"PodEvictionFailure: Reached max retries while trying to evict pods from nodes in node group workers"}, r.Nodegroup.UpdateErrors)
			ups := w.nodegroupUpdates()
			require.Len(t, ups, tc.updates)
			require.Equal(t, releaseNew, ups[0].Params["ReleaseVersion"])
			if tc.rollback {
				require.Equal(t, releaseOld, ups[1].Params["ReleaseVersion"], "the rollback goes back to the previous release")
				require.Equal(t, releaseNew, r.RollbackFrom, "the failed release is not rolled again")
				require.Contains(t, w.history(), "rolling-back")
				require.Contains(t, w.history(), "rolled-back")
			}
			ng, _ := w.a.EKSNodegroup("prod", "workers")
			require.Equal(t, releaseOld, ng.ReleaseVersion)
			require.Equal(t, []string{ngAMI1, ngAMI1, ngAMI1}, w.nodes(), "the nodes stay on the release that works")
			for range 5 {
				r, err := w.tick()
				require.NoError(t, err)
				require.Equal(t, tc.want, r.Phase, "it stays where it stopped")
			}
			require.Len(t, w.nodegroupUpdates(), tc.updates, "nothing is retried on its own")
			w.requireGroupUntouched()
		})
	}
}

// crashing makes one call fail like a crash: before or after the call's effect.
type crashing struct {
	model.NodegroupAPI
	providers.TemplateProvider
	at    string // "before-update", "after-update", "after-template"
	fired bool
}

var errCrash = errors.New("crash")

func (c *crashing) StartUpdate(ctx context.Context, req model.NodegroupUpdateRequest) (model.NodegroupUpdate, error) {
	if c.at == "before-update" && !c.fired {
		c.fired = true
		return model.NodegroupUpdate{}, errCrash
	}
	u, err := c.NodegroupAPI.StartUpdate(ctx, req)
	if c.at == "after-update" && !c.fired {
		c.fired = true
		return model.NodegroupUpdate{}, errCrash // the update started; its id never reached the record
	}
	return u, err
}

func (c *crashing) EnsureVersion(ctx context.Context, ref state.LaunchTemplateRef, imageID, why string) (providers.TemplateVersion, error) {
	v, err := c.TemplateProvider.EnsureVersion(ctx, ref, imageID, why)
	if c.at == "after-template" && !c.fired {
		c.fired = true
		return providers.TemplateVersion{}, errCrash
	}
	return v, err
}

func TestManagedNodegroupCrashAfterEachEffectResumesWithoutASecondUpdate(t *testing.T) {
	for _, tc := range []struct {
		at     string
		custom bool
	}{
		{"before-update", false}, {"after-update", false}, {"after-template", true}, {"after-update", true},
	} {
		t.Run(tc.at+map[bool]string{true: " custom", false: " release"}[tc.custom], func(t *testing.T) {
			w := newNGWorld(t, tc.custom, nil)
			w.runUntil(state.PhaseIdle)
			templates := providers.Templates{EC2: w.a.EC2(), AutoScaling: w.a.AutoScaling()}
			c := &crashing{NodegroupAPI: w.reader.Client, TemplateProvider: templates, at: tc.at}
			w.o = w.orchestrator(c, c)
			if tc.custom {
				w.a.PutParameter(ngCustomPath, ngAMI2)
			} else {
				w.a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2}))
			}
			for i := 0; !c.fired; i++ {
				r, err := w.tick()
				if err != nil {
					require.ErrorIs(t, err, errCrash)
				}
				require.Less(t, i, 50, "the crash point was never reached: %s %q", r.Phase, r.Reason)
			}
			w.o = w.orchestrator(w.reader.Client, templates) // the agent restarts on the same store
			r := w.runUntil(state.PhaseCompleted)
			require.Len(t, w.nodegroupUpdates(), 1, "resumed with the same update: no second UpdateNodegroupVersion")
			require.Equal(t, []string{ngAMI2, ngAMI2, ngAMI2}, w.nodes())
			if tc.custom {
				require.Equal(t, 1, w.a.Calls()["ec2:CreateLaunchTemplateVersion"], "the version made before the crash is reused")
				require.Equal(t, "2", r.Nodegroup.TargetTemplateVersion)
			}
			w.requireGroupUntouched()
		})
	}
}

func TestManagedNodegroupPauseHoldsTheUpdateUntilResumeAndAnUpdateUnderWayFinishes(t *testing.T) {
	w := newNGWorld(t, false, nil)
	w.runUntil(state.PhaseIdle)
	w.pause = &state.Lock{Group: model.NodegroupKey("prod", "workers"), Who: "alice", Reason: "game day", Since: now0}
	w.a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2}))
	for range 10 {
		r, err := w.tick()
		require.NoError(t, err)
		require.NotEqual(t, state.PhaseReplacing, r.Phase)
		require.True(t, strings.HasPrefix(r.Reason, pausedPrefix), r.Reason)
	}
	require.Empty(t, w.nodegroupUpdates(), "a pause holds UpdateNodegroupVersion")

	w.pause = nil
	for {
		r, err := w.tick()
		require.NoError(t, err)
		if r.Nodegroup != nil && r.Nodegroup.UpdateID != "" {
			break
		}
	}
	// Paused mid-update: the update EKS carries out is not the agent's to stop; it is followed to the end and
	// nothing new is sent.
	w.pause = &state.Lock{Group: model.NodegroupKey("prod", "workers"), Who: "alice", Reason: "mid-update", Since: w.clk.Now()}
	r := w.runUntil(state.PhaseCompleted)
	require.Len(t, w.nodegroupUpdates(), 1)
	require.Equal(t, releaseNew, r.Nodegroup.TargetRelease)
	require.Equal(t, []string{ngAMI2, ngAMI2, ngAMI2}, w.nodes())
}

func TestManagedNodegroupAutoScalingGroupIsNeverRolledOrDrainedAsAGroup(t *testing.T) {
	clk := clocktesting.NewFakeClock(now0)
	a := sim.New(clk, sim.Options{})
	a.CreateEKSCluster("prod", "1.31")
	group, err := a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: "prod", Name: "workers", AMIType: ngAMIType, ReleaseVersion: releaseOld,
		ImageID: ngAMI1, InstanceType: "m5.large", Min: 1, Max: 3, Desired: 2,
		GroupTags: map[string]string{model.TagEnabled: "true", model.TagPlatform: model.PlatformEKS, model.TagCluster: "prod", model.TagParameter: "/golden/eks"}})
	require.NoError(t, err)
	d, err := providers.Discover(context.Background(), a.AutoScaling())
	require.NoError(t, err)
	require.NotContains(t, d.Targets, group, "never rolled as a plain group")
	_, drain := d.DrainTarget(group)
	require.False(t, drain, "its lifecycle actions are EKS's: never drained or completed by the agent")
	require.ErrorIs(t, d.Misconfigured[group], model.ErrManagedNodegroupGroup)
	require.Contains(t, d.Misconfigured[group].Error(), "eks:nodegroup-name=workers", "the reason names the node group to tag instead")
}

func TestC12ManagedNodegroupNeverGoesPastTheControlPlane(t *testing.T) {
	param := "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id"
	w := newNGWorld(t, true, map[string]string{model.TagParameter: param})
	w.a.PutParameter(param, ngAMI2)
	r := w.runUntil(state.PhaseHalted)
	require.Contains(t, r.Reason, "newer Kubernetes version than the control plane")
	require.Empty(t, w.nodegroupUpdates(), "refused before any update")
	require.Zero(t, w.a.Calls()["ec2:CreateLaunchTemplateVersion"])
}

// withReleaseParams names r's public parameters as EKS publishes them.
func withReleaseParams(r sim.EKSRelease) sim.EKSRelease {
	rel, img, err := eks.ReleaseParameters(r.AMIType, r.KubernetesVersion)
	if err != nil {
		panic(err)
	}
	r.ReleaseParameter, r.ImageParameter = rel, img
	return r
}

// A release whose image_id parameter is unreadable names no AMI the agent can verify: no AMI gate can run and
// no approval can be given for it, so nothing starts (the empty target must not pass the approval check by
// comparing empty with empty).
func TestManagedNodegroupReleaseWithoutAReadableImageIDStartsNothingEvenApproved(t *testing.T) {
	w := newNGWorld(t, false, map[string]string{model.TagApproval: "manual"})
	w.runUntil(state.PhaseIdle)
	rel := withReleaseParams(sim.EKSRelease{AMIType: ngAMIType, KubernetesVersion: "1.31", Release: releaseNew, ImageID: ngAMI2})
	w.a.PublishEKSRelease(rel)
	w.a.PutParameter(rel.ImageParameter, "garbage")
	var r state.Rollout
	for range 10 {
		var err error
		r, err = w.tick()
		require.NoError(t, err)
	}
	require.Equal(t, state.PhaseWaiting, r.Phase)
	require.Contains(t, r.Reason, "AMI gate: cannot verify the update")
	require.Empty(t, w.nodegroupUpdates(), "no UpdateNodegroupVersion for an unverified release")
	w.requireGroupUntouched()
}
