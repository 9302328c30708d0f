package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

// TestTaggedManagedNodegroupGroupShowsOnStatusWhyItIsNotRolled: the Auto Scaling group of an EKS managed node
// group (tag eks:nodegroup-name) that someone tagged for patch-agent, with a new AMI in its parameter, shows up
// in `patch-agent status` (operator.Status) at Halted with the reason it is never rolled as a plain group, while
// an ECS group next to it rolls; the node group's group is never touched: no launch template version, no
// capacity change, every instance still on the old AMI, every invariant held.
func TestTaggedManagedNodegroupGroupShowsOnStatusWhyItIsNotRolled(t *testing.T) {
	g := testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}
	w := build(t, oneGroup(&g))
	ctx := context.Background()
	w.Account.CreateEKSCluster("prod-eks", "1.31")
	ngGroup, err := w.Account.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: "prod-eks", Name: "workers", AMIType: "AL2023_x86_64_STANDARD",
		ReleaseVersion: "1.31.7-20261101", ImageID: testworld.ImageA, InstanceType: "m7g.large", Min: 2, Max: 4, Desired: 2,
		GroupTags: map[string]string{model.TagEnabled: "true", model.TagPlatform: model.PlatformEKS, model.TagCluster: "prod-eks",
			model.TagParameter: g.Parameter}})
	require.NoError(t, err)
	before := w.Account.Group(ngGroup)

	r := rollTo(t, w, g, testworld.ImageB)
	require.Equal(t, state.PhaseCompleted, r.Phase, "the plain group next to it rolls")

	rows, err := operator.Status(ctx, w.Store, ngGroup, w.Account.Clock().Now())
	require.NoError(t, err, "the node group's group has a status row")
	require.Len(t, rows, 1)
	require.Equal(t, state.PhaseHalted, rows[0].Phase)
	require.Contains(t, rows[0].Reason, "not rolled: ")
	require.Contains(t, rows[0].Reason, "eks:nodegroup-name=workers")
	require.Contains(t, rows[0].Reason, "tag the managed node group workers instead")
	require.Empty(t, rows[0].TargetImageID)

	after := w.Account.Group(ngGroup)
	require.Equal(t, before.LaunchTemplateVersion, after.LaunchTemplateVersion)
	require.Equal(t, before.Desired, after.Desired)
	require.Equal(t, before.Max, after.Max)
	lt, _ := w.Account.LaunchTemplate(after.LaunchTemplateID)
	require.Equal(t, int64(1), lt.LatestVersion, "no launch template version for the node group's group")
	require.Len(t, after.Instances, 2)
	for _, i := range after.Instances {
		require.Equal(t, testworld.ImageA, i.ImageID, "EKS's nodes are left alone")
		require.Equal(t, "InService", i.LifecycleState)
	}
	steps := w.Rollout(ctx, ngGroup).Steps
	_, err = w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
	require.NoError(t, err)
	require.Equal(t, steps, w.Rollout(ctx, ngGroup).Steps, "the reason is written once, not every tick")
	require.Empty(t, w.Checker.Finish())
}

// Scenario tests of EKS managed node group rollouts run by the agent on testworld.World, with the invariant checker
// judging every change of the account after every step. The node group's own Auto Scaling group is EKS's to
// drain, not a managed group of the checker; runMNG holds it to its own invariant: never fewer InService nodes
// than its desired capacity (EKS scales up before it removes old nodes), and the agent never changes it.

const (
	mngCluster    = "prod-eks"
	mngName       = "workers"
	mngAMIType    = "AL2023_x86_64_STANDARD"
	mngReleaseOld = "1.31.7-20261101"
	mngReleaseNew = "1.31.7-20261129"
)

var mngKey = model.NodegroupKey(mngCluster, mngName)

// mngWorld is a world with managed node group prod-eks/workers (3 nodes on ImageA, release mngReleaseOld,
// opted in) and its release published.
func mngWorld(t *testing.T) (*testworld.World, string) {
	t.Helper()
	w := build(t, testworld.Spec{Nodegroups: []sim.EKSNodegroupSpec{{Cluster: mngCluster, Name: mngName, AMIType: mngAMIType,
		ReleaseVersion: mngReleaseOld, ImageID: testworld.ImageA, InstanceType: "m5.large", Min: 3, Max: 6, Desired: 3,
		Tags: map[string]string{model.TagEnabled: "true"}}}})
	publishRelease(w, mngReleaseOld, testworld.ImageA)
	view, ok := w.Account.EKSNodegroup(mngCluster, mngName)
	require.True(t, ok)
	return w, view.Group
}

func publishRelease(w *testworld.World, release, image string) {
	rel, img, err := eks.ReleaseParameters(mngAMIType, "1.31")
	if err != nil {
		panic(err)
	}
	w.Account.PublishEKSRelease(sim.EKSRelease{AMIType: mngAMIType, KubernetesVersion: "1.31", Release: release, ImageID: image,
		ReleaseParameter: rel, ImageParameter: img})
}

// runMNG steps the world (agent, then the account) until done or limit, requiring no invariant violation
// and at least 3 InService nodes in the node group's group after any step.
func runMNG(t *testing.T, w *testworld.World, limit time.Duration, done func(state.Rollout) bool) state.Rollout {
	t.Helper()
	ctx := context.Background()
	view, _ := w.Account.EKSNodegroup(mngCluster, mngName)
	for elapsed := time.Duration(0); elapsed < limit; elapsed += tick {
		require.NoError(t, w.Step(ctx, tick))
		require.Empty(t, w.Checker.Violations, "after %s", elapsed)
		require.GreaterOrEqual(t, inService(w, view.Group), 3, "after %s: EKS scales up before it removes old nodes", elapsed)
		if r := w.Rollout(ctx, mngKey); done(r) {
			return r
		}
	}
	t.Fatalf("rollout never ended: %+v", w.Rollout(ctx, mngKey))
	return state.Rollout{}
}

func phaseIs(ps ...state.Phase) func(state.Rollout) bool {
	return func(r state.Rollout) bool {
		for _, p := range ps {
			if r.Phase == p {
				return true
			}
		}
		return false
	}
}

func mngUpdates(w *testworld.World) []sim.EKSUpdateView {
	var out []sim.EKSUpdateView
	for _, u := range w.Account.EKSUpdates(mngCluster) {
		if u.Nodegroup == mngName {
			out = append(out, u)
		}
	}
	return out
}

// requireNoAgentGroupCalls: the agent made no change to any Auto Scaling group, container instance or
// lifecycle action: EKS replaced the nodes.
func requireNoAgentGroupCalls(t *testing.T, w *testworld.World) {
	t.Helper()
	c := w.Account.Calls()
	for _, op := range []string{"autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup", "autoscaling:TerminateInstanceInAutoScalingGroup",
		"autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceProtection", "ecs:UpdateContainerInstancesState"} {
		require.Zero(t, c[op], "the agent called %s", op)
	}
}

func requireNodesOn(t *testing.T, w *testworld.World, group, image string, n int) {
	t.Helper()
	var on []string
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState == "InService" {
			on = append(on, i.ImageID)
		}
	}
	want := make([]string, n)
	for i := range want {
		want[i] = image
	}
	require.Equal(t, want, on)
}

func TestManagedNodegroupScenarios(t *testing.T) {
	for _, tc := range []struct {
		name string
		// run plays the scenario after the release bump and returns the record at its end.
		run func(t *testing.T, w *testworld.World) state.Rollout
		// phase, release and image are where the node group ends; updates counts UpdateNodegroupVersion.
		phase   state.Phase
		release string
		image   string
		updates int
	}{
		{name: "release bump: one update, EKS replaces the nodes",
			run: func(t *testing.T, w *testworld.World) state.Rollout {
				return runMNG(t, w, 2*time.Hour, phaseIs(state.PhaseCompleted, state.PhaseHalted, state.PhaseRolledBack))
			}, phase: state.PhaseCompleted, release: mngReleaseNew, image: testworld.ImageB, updates: 1},
		{name: "failed update: PodEvictionFailure halts with EKS's error and rolls back",
			run: func(t *testing.T, w *testworld.World) state.Rollout {
				r := runMNG(t, w, 2*time.Hour, phaseIs(state.PhaseCompleted, state.PhaseHalted, state.PhaseRolledBack))
				require.Contains(t, r.Reason, "PodEvictionFailure", "EKS's error is the reason on status")
				return r
			}, phase: state.PhaseRolledBack, release: mngReleaseOld, image: testworld.ImageA, updates: 2},
		{name: "pause mid-update: the update under way finishes, the next one waits for resume",
			run: func(t *testing.T, w *testworld.World) state.Rollout {
				ctx := context.Background()
				r := runMNG(t, w, time.Hour, func(r state.Rollout) bool { return r.Nodegroup != nil && r.Nodegroup.UpdateID != "" })
				require.Equal(t, state.PhaseReplacing, r.Phase)
				require.NoError(t, operator.Pause(ctx, w.Store, mngKey, "game day", "bob", time.Time{}, w.Account.Clock().Now()))
				r = runMNG(t, w, 2*time.Hour, phaseIs(state.PhaseCompleted, state.PhaseHalted))
				require.Len(t, mngUpdates(w), 1, "EKS finished the update it had started; nothing else was sent")
				// The next release is held by the pause: no update for an hour, then resume.
				publishRelease(w, "1.31.7-20261206", testworld.ImageA)
				for range 720 {
					require.NoError(t, w.Step(ctx, tick))
				}
				require.Empty(t, w.Checker.Violations)
				require.Len(t, mngUpdates(w), 1, "paused: no UpdateNodegroupVersion")
				require.Contains(t, w.Rollout(ctx, mngKey).Reason, "paused")
				_, resumeErr := operator.Resume(ctx, w.Store, mngKey, w.Account.Clock().Now())
				require.NoError(t, resumeErr)
				return runMNG(t, w, 2*time.Hour, func(r state.Rollout) bool {
					return r.Phase == state.PhaseCompleted && r.Nodegroup.TargetRelease == "1.31.7-20261206"
				})
			}, phase: state.PhaseCompleted, release: "1.31.7-20261206", image: testworld.ImageA, updates: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, group := mngWorld(t)
			ctx := context.Background()
			r := runMNG(t, w, time.Hour, phaseIs(state.PhaseIdle))
			require.Equal(t, mngReleaseOld, r.Nodegroup.TargetRelease)
			if strings.HasPrefix(tc.name, "failed") {
				w.Account.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: mngCluster, Nodegroup: mngName, PodEviction: true})
			}
			publishRelease(w, mngReleaseNew, testworld.ImageB)
			r = tc.run(t, w)
			require.Equal(t, tc.phase, r.Phase, r.Reason)
			ng, _ := w.Account.EKSNodegroup(mngCluster, mngName)
			require.Equal(t, tc.release, ng.ReleaseVersion)
			requireNodesOn(t, w, group, tc.image, 3)
			require.Len(t, mngUpdates(w), tc.updates, "exactly one UpdateNodegroupVersion per rollout attempt")
			requireNoAgentGroupCalls(t, w)
			_, err := w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
			require.NoError(t, err)
			require.Len(t, mngUpdates(w), tc.updates, "nothing more is sent once it ended")
			require.Empty(t, w.Checker.Finish(), "every invariant held")
		})
	}
}

func inService(w *testworld.World, group string) int {
	n := 0
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState == "InService" {
			n++
		}
	}
	return n
}

// TestCrashMatrixManagedNodegroupUpdate crashes a managed node group rollout after every one of its effects (the
// record's writes with the ClientRequestToken before the call and the update id after, UpdateNodegroupVersion
// itself), in both modes (crash after, response lost then crash): the fresh incarnation resumes with the
// recorded token, so each rollout attempt sends exactly one UpdateNodegroupVersion per version (RepeatedEffects
// fails the run on a second one), and the rollout ends as uncrashed. Rows: a release bump, and a failed update
// rolled back to the previous release (two updates: forward and back).
func TestCrashMatrixManagedNodegroupUpdate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fail    bool
		phase   state.Phase
		release string
		image   string
	}{
		{"release bump", false, state.PhaseCompleted, mngReleaseNew, testworld.ImageB},
		{"failed update rolled back", true, state.PhaseRolledBack, mngReleaseOld, testworld.ImageA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var group string
			runCrashMatrix(t, crash.CrashScenario{
				Name: "managed node group " + tc.name,
				Build: func() (*testworld.World, error) {
					w, g := mngWorld(t)
					group = g
					return w, nil
				},
				Drive: func(w *testworld.World) error {
					runMNG(t, w, time.Hour, phaseIs(state.PhaseIdle))
					if tc.fail {
						w.Account.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: mngCluster, Nodegroup: mngName, PodEviction: true})
					}
					publishRelease(w, mngReleaseNew, testworld.ImageB)
					runMNG(t, w, 2*time.Hour, phaseIs(state.PhaseCompleted, state.PhaseHalted, state.PhaseRolledBack))
					return nil
				},
				Final: func(w *testworld.World) error {
					r := w.Rollout(context.Background(), mngKey)
					require.Equal(t, tc.phase, r.Phase, r.Reason)
					ng, _ := w.Account.EKSNodegroup(mngCluster, mngName)
					require.Equal(t, tc.release, ng.ReleaseVersion)
					requireNodesOn(t, w, group, tc.image, 3)
					want := 1
					if tc.fail {
						want = 2
					}
					require.Len(t, mngUpdates(w), want, "one UpdateNodegroupVersion per rollout attempt")
					requireNoAgentGroupCalls(t, w)
					return nil
				},
			})
		})
	}
}
