package eksupgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

// Safety of the upgrade workflow: no add-on is downgraded, a retry survives a crash, node groups the control
// plane would leave behind stop it, a changed plan needs a new approval, the two-person rule compares
// principals, the self-managed step follows the agent's rollout, and the preflight refuses what would halt
// later.

func TestCompareAddonVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"v1.19.2-eksbuild.1", "v1.19.0-eksbuild.1", 1},
		{"v1.19.0-eksbuild.1", "v1.19.2-eksbuild.1", -1},
		{"v1.10.0-eksbuild.1", "v1.9.9-eksbuild.1", 1}, // not a string comparison
		{"v1.11.1-eksbuild.10", "v1.11.1-eksbuild.9", 1},
		{"v1.11.1-eksbuild.9", "v1.11.1-eksbuild.9", 0},
		{"v1.11.1", "v1.11.1-eksbuild.1", -1},
	} {
		got, err := eksupgrade.CompareAddonVersions(tc.a, tc.b)
		require.NoError(t, err, "%s vs %s", tc.a, tc.b)
		require.Equal(t, tc.want, got, "%s vs %s", tc.a, tc.b)
	}
	for _, bad := range []string{"", "latest", "v1.19", "v1.x.0-eksbuild.1", "v1.19.0-eksbuild.x"} {
		_, err := eksupgrade.CompareAddonVersions(bad, "v1.19.0-eksbuild.1")
		require.ErrorIs(t, err, eksupgrade.ErrInvalidAddonVersion, "%q", bad)
	}
}

// installVPCCNI publishes extra vpc-cni versions (newest last) and installs vpc-cni at installed.
func installVPCCNI(t *testing.T, a *sim.Account, installed string, versions ...sim.EKSAddonVersion) {
	t.Helper()
	for _, v := range versions {
		v.Addon = "vpc-cni"
		a.PublishEKSAddonVersion(v)
	}
	require.NoError(t, a.InstallEKSAddon(cluster, "vpc-cni", installed))
}

func stepOf(t *testing.T, wf state.Workflow, kind, name string) state.WorkflowStep {
	t.Helper()
	for _, s := range wf.Steps {
		if s.Kind == kind && s.Name == name {
			return s
		}
	}
	require.Failf(t, "no step", "%s %s", kind, name)
	return state.WorkflowStep{}
}

func checkOf(wf state.Workflow, name string) state.PreflightCheck {
	for _, c := range wf.Checks {
		if c.Name == name {
			return c
		}
	}
	return state.PreflightCheck{}
}

func TestAddonNewerThanTheTargetsDefaultIsNeverDowngraded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		installed string
		versions  []sim.EKSAddonVersion
		// wantTo is the planned version ("" when the preflight must fail), wantCheck a part of the check.
		wantTo, wantResult, wantCheck string
	}{
		{"field case: v1.19.2 installed, compatible with the target, default v1.19.0: kept", "v1.19.2-eksbuild.1",
			[]sim.EKSAddonVersion{{Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{"1.30", "1.31"}}},
			"v1.19.2-eksbuild.1", eksupgrade.CheckPass,
			"v1.19.2-eksbuild.1 kept: compatible with Kubernetes 1.31 and newer than its default v1.19.0-eksbuild.1 (an add-on is never downgraded)"},
		{"installed not compatible with the target, a newer compatible one exists: moved up, not to the default", "v1.19.2-eksbuild.1",
			[]sim.EKSAddonVersion{{Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{"1.30"}},
				{Version: "v1.19.4-eksbuild.1", ClusterVersions: []string{"1.31"}}, {Version: "v1.19.3-eksbuild.2", ClusterVersions: []string{"1.31"}}},
			"v1.19.3-eksbuild.2", eksupgrade.CheckPass, "the oldest compatible version newer than it"},
		{"installed not compatible with the target, every compatible one older: the preflight refuses", "v1.19.2-eksbuild.1",
			[]sim.EKSAddonVersion{{Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{"1.30"}}},
			"", eksupgrade.CheckFail, "installed v1.19.2-eksbuild.1 is not compatible with Kubernetes 1.31 and every compatible version is older (default v1.19.0-eksbuild.1, newest v1.19.0-eksbuild.1): an add-on is never downgraded"},
		{"installed older than the default: the default", demo.UpgradeAddons[0].From, nil,
			demo.UpgradeAddons[0].To, eksupgrade.CheckPass, "v1.18.3-eksbuild.1 -> v1.19.0-eksbuild.1 (the default for Kubernetes 1.31)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			installVPCCNI(t, w.a, tc.installed, tc.versions...)
			plan, err := w.runner("dry").Plan(context.Background(), cluster, demo.UpgradeTo)
			require.NoError(t, err)
			c := checkOf(plan, "add-on vpc-cni")
			require.Equal(t, tc.wantResult, c.Result, c.Detail)
			require.Contains(t, c.Detail, tc.wantCheck)

			wf := w.run(t, "run-1", upgrade())
			v, _, _ := w.a.EKSAddon(cluster, "vpc-cni")
			if tc.wantTo == "" {
				require.Equal(t, state.WorkflowHalted, wf.Phase)
				require.Contains(t, wf.Reason, "add-on vpc-cni: "+tc.wantCheck)
				require.Equal(t, tc.installed, v, "nothing was changed")
				require.Empty(t, w.a.EKSUpdates(cluster))
				return
			}
			require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
			require.Equal(t, tc.wantTo, stepOf(t, wf, eksupgrade.KindAddon, "vpc-cni").To)
			require.Equal(t, tc.wantTo, v, "vpc-cni ends at the planned version")
			cmp, err := eksupgrade.CompareAddonVersions(v, tc.installed)
			require.NoError(t, err)
			require.GreaterOrEqual(t, cmp, 0, "never older than installed")
			if tc.wantTo == tc.installed {
				require.Equal(t, state.StepStatusSkipped, stepOf(t, wf, eksupgrade.KindAddon, "vpc-cni").Status)
				require.Equal(t, 2, w.updateCalls()["UpdateAddon"], "no UpdateAddon for the kept vpc-cni")
			}
		})
	}
}

func TestAddonUpgradedBehindThePlansBackIsNotDowngradedByTheApprovedPlan(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.Approve = false
	require.Equal(t, state.WorkflowWaiting, w.run(t, "run-1", req).Phase)
	// After the preflight, someone moves vpc-cni past the planned default.
	installVPCCNI(t, w.a, "v1.19.2-eksbuild.1", sim.EKSAddonVersion{Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{"1.30", "1.31"}})
	wf := w.run(t, "run-2", upgrade())
	v, _, _ := w.a.EKSAddon(cluster, "vpc-cni")
	require.Equal(t, "v1.19.2-eksbuild.1", v, "never downgraded to the plan's v1.19.0-eksbuild.1")
	require.Zero(t, countUpdates(w.a, "vpc-cni"), "no UpdateAddon of vpc-cni was started")
	require.NotEqual(t, state.WorkflowCompleted, wf.Phase, "the plan is not carried out as if nothing changed")
}

func countUpdates(a *sim.Account, addon string) int {
	n := 0
	for _, u := range a.EKSUpdates(cluster) {
		if u.Addon == addon {
			n++
		}
	}
	return n
}

func TestDegradedAddonIsWaitedOutUpToADeadline(t *testing.T) {
	t.Run("DEGRADED for 3 minutes while its pods roll: waited out, the workflow completes", func(t *testing.T) {
		w := newWorld(t)
		w.a.DegradeEKSAddonAfterUpdate(cluster, "coredns", 3*time.Minute)
		wf := w.run(t, "run-1", upgrade())
		require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
		require.Equal(t, state.StepStatusCompleted, stepOf(t, wf, eksupgrade.KindAddon, "coredns").Status)
	})
	t.Run("DEGRADED for good: halts once DegradedWait has passed, not before", func(t *testing.T) {
		w := newWorld(t)
		w.a.DegradeEKSAddonAfterUpdate(cluster, "coredns", 0)
		wf := w.run(t, "run-1", upgrade())
		require.Equal(t, state.WorkflowHalted, wf.Phase)
		st := stepOf(t, wf, eksupgrade.KindAddon, "coredns")
		require.Equal(t, state.StepStatusFailed, st.Status)
		require.Contains(t, wf.Reason, "still DEGRADED at version "+demo.UpgradeAddons[1].To)
		require.Contains(t, wf.Reason, "InsufficientNumberOfReplicas")
		require.GreaterOrEqual(t, st.CompletedAt.Sub(st.StartedAt), eksupgrade.DefaultDegradedWait, "waited out up to the deadline")
		require.Equal(t, state.StepStatusPending, stepOf(t, wf, eksupgrade.KindAddon, "kube-proxy").Status, "nothing after it")
	})
}

// haltAtCoreDNS makes coredns's update fail and runs the upgrade until it halts there.
func haltAtCoreDNS(t *testing.T, w *world) state.Workflow {
	t.Helper()
	w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: cluster, Addon: "coredns", Errors: []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeConfigurationConflict,
		ErrorMessage: aws.String("Conflicts found when trying to apply. Will not continue due to resolve conflicts mode")}}})
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Equal(t, state.StepStatusFailed, stepOf(t, wf, eksupgrade.KindAddon, "coredns").Status)
	return wf
}

func retried() eksupgrade.Request {
	req := upgrade()
	req.Retry = true
	return req
}

// requireRetriedToTheEnd checks that a --retry of the halted coredns step completed the upgrade with one new
// coredns update (two in all: the failed one and the retry's) and one update call for everything else.
func (w *world) requireRetriedToTheEnd(t *testing.T, wf state.Workflow, failedID string) {
	t.Helper()
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	require.Equal(t, map[string]int{"UpdateClusterVersion": 1, "UpdateAddon": 4, "UpdateNodegroupVersion": 1}, w.updateCalls())
	require.Len(t, w.a.EKSUpdates(cluster), 6)
	require.Equal(t, 2, countUpdates(w.a, "coredns"))
	cd := stepOf(t, wf, eksupgrade.KindAddon, "coredns")
	require.NotEqual(t, failedID, cd.UpdateID, "the retry's own update, not the failed one")
	require.Equal(t, []string{failedID}, cd.EarlierUpdateIDs)
	v, _, _ := w.a.EKSAddon(cluster, "coredns")
	require.Equal(t, demo.UpgradeAddons[1].To, v)
}

func TestRetryCrashRightAfterTheRequestDoesNotAdoptTheEarlierFailedUpdate(t *testing.T) {
	w := newWorld(t)
	halted := haltAtCoreDNS(t, w)
	failedID := stepOf(t, halted, eksupgrade.KindAddon, "coredns").UpdateID
	// The retry dies right after it wrote the step Requested (effects: the "retrying" write, its history
	// entry, the Requested write), before UpdateAddon.
	f := &fuse{At: 3}
	_, err := w.incarnation("retry-1", f).Run(context.Background(), retried())
	require.ErrorIs(t, err, errCrashed)
	mid, err := w.store.GetWorkflow(context.Background(), cluster)
	require.NoError(t, err)
	require.Equal(t, state.StepStatusRequested, stepOf(t, mid, eksupgrade.KindAddon, "coredns").Status)
	require.Equal(t, 1, countUpdates(w.a, "coredns"), "the crash came before the retry's call")

	w.advance(t, eksupgrade.DefaultLeaseTTL+state.LeaseRule{}.Margin())
	wf := w.run(t, "retry-2", retried())
	w.requireRetriedToTheEnd(t, wf, failedID)
}

// TestCrashMatrixEKSUpgradeWorkflowRetry is the crash matrix of a --retry run: the upgrade halted at a failed
// coredns update; for every effect k of the uncrashed --retry run and both crash modes, the retry dies right
// after effect k, and a second --retry run (what an operator runs again) must complete with one new coredns
// update, adopting none of the failed attempt's, and the audit trail of the uncrashed retry.
func TestCrashMatrixEKSUpgradeWorkflowRetry(t *testing.T) {
	clean := newWorld(t)
	failedID := stepOf(t, haltAtCoreDNS(t, clean), eksupgrade.KindAddon, "coredns").UpdateID
	f := &fuse{}
	wf, err := clean.incarnation("clean", f).Run(context.Background(), retried())
	require.NoError(t, err)
	clean.requireRetriedToTheEnd(t, wf, failedID)
	total := f.effects
	require.Greater(t, total, 10)
	for at := 1; at <= total; at++ {
		for _, mode := range crash.CrashModes {
			t.Run(fmt.Sprintf("%s effect %d of %d", mode, at, total), func(t *testing.T) {
				w := newWorld(t)
				failedID := stepOf(t, haltAtCoreDNS(t, w), eksupgrade.KindAddon, "coredns").UpdateID
				first := &fuse{At: at, loseResponse: mode == crash.CrashResponseLost}
				_, err := w.incarnation("first", first).Run(context.Background(), retried())
				require.True(t, first.blown, "the fuse fired")
				if at < total || err != nil {
					require.True(t, errors.Is(err, errCrashed) || errors.Is(err, errResponseLost), "%v", err)
				}
				w.advance(t, eksupgrade.DefaultLeaseTTL+state.LeaseRule{}.Margin())
				wf, err := w.runner("second").Run(context.Background(), retried())
				require.NoError(t, err, "resume after effect %d", at)
				w.requireRetriedToTheEnd(t, wf, failedID)
				var trail []string
				for _, e := range events(w.history(t)) {
					if e != "resumed" {
						trail = append(trail, e)
					}
				}
				require.Equal(t, events(clean.history(t)), trail, "audit trail after a crash at effect %d of the retry", at)
			})
		}
	}
}

func TestManagedNodegroupOneMinorBehindTheControlPlaneFailsThePreflightAndEKSRefusesTheUpdate(t *testing.T) {
	// 1.29 under a 1.30 control plane is within the upstream kubelet skew even at 1.31, but EKS requires
	// managed node groups on the control plane's version before UpdateClusterVersion.
	w := newWorld(t)
	_, err := w.a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: cluster, Name: "batch", AMIType: "AL2023_x86_64_STANDARD", Version: "1.29",
		ImageID: "ami-0batch", InstanceType: "m5.large", Min: 1, Max: 1, Desired: 1})
	require.NoError(t, err)
	require.NoError(t, eksupgrade.CheckSkew("1.29", "1.31"), "the upstream skew alone would let it pass")

	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Contains(t, wf.Reason, "managed node group batch: at 1.29, the control plane at 1.30")
	require.Empty(t, w.a.EKSUpdates(cluster))

	// The simulation refuses what EKS refuses, force or not.
	_, err = w.a.EKSUpgrade().UpdateClusterVersion(context.Background(), &awseks.UpdateClusterVersionInput{Name: aws.String(cluster),
		Version: aws.String("1.31"), Force: true})
	var invalid *ekstypes.InvalidParameterException
	require.ErrorAs(t, err, &invalid)
	require.Contains(t, err.Error(), "batch (1.29) must be updated to match cluster version 1.30")
	require.Equal(t, "1.30", w.clusterVersion(t))
}

// approvedWaiting runs the preflight without approval, then approves the plan as alice: the workflow waits
// with an approved plan, as when `patch-agent approve` ran between two runs.
func approvedWaiting(t *testing.T, w *world) {
	t.Helper()
	req := upgrade()
	req.Approve = false
	require.Equal(t, state.WorkflowWaiting, w.run(t, "run-1", req).Phase)
	_, err := eksupgrade.Approve(context.Background(), w.store, cluster, "alice", w.a.Clock().Now())
	require.NoError(t, err)
}

func TestNodeGroupPinnedTo127AppearingAfterThePreflightKeepsTheControlPlaneWhereItIs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, a *sim.Account)
		want  string
	}{
		{"self-managed node group pinned to 1.27", func(t *testing.T, a *sim.Account) {
			selfManaged(t, a, "legacy-nodes", map[string]string{model.TagParameter: providers.ParameterAuto, providers.TagKubernetesVersion: "1.27"})
		}, "self-managed node group legacy-nodes: AMI for Kubernetes 1.27 (pinned): kubelet 1.27 is 4 minor versions behind the API server 1.31"},
		{"managed node group at 1.27", func(t *testing.T, a *sim.Account) {
			_, err := a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: cluster, Name: "legacy", AMIType: "AL2_x86_64", Version: "1.27",
				ImageID: "ami-0legacy", InstanceType: "m5.large", Min: 1, Max: 1, Desired: 1})
			require.NoError(t, err)
		}, "managed node group legacy: at 1.27, the control plane at 1.30"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			approvedWaiting(t, w)
			tc.setup(t, w.a) // after the preflight and its approval
			wf := w.run(t, "run-2", upgrade())
			require.Equal(t, state.WorkflowHalted, wf.Phase)
			require.Contains(t, wf.Reason, "preflight before the first change failed: "+tc.want)
			require.Equal(t, "1.30", w.clusterVersion(t), "the control plane did not move")
			require.Empty(t, w.a.EKSUpdates(cluster))
			require.Equal(t, "preflight-failed", events(w.history(t))[len(w.history(t))-1])
		})
	}
}

func TestAPlanThatChangedAfterItsApprovalNeedsANewApproval(t *testing.T) {
	w := newWorld(t)
	approvedWaiting(t, w)
	// A new self-managed node group that passes the checks: the plan has a step the approval did not see.
	selfManaged(t, w.a, "more-nodes", map[string]string{model.TagParameter: providers.ParameterAuto})
	wf := w.run(t, "run-2", upgrade())
	require.Equal(t, state.WorkflowWaiting, wf.Phase)
	require.Contains(t, wf.Reason, "the plan changed since it was approved (added self-managed-nodegroup more-nodes")
	require.Contains(t, wf.Reason, "(or run again with --yes)", "the current flag, not the deprecated --approve")
	require.Empty(t, wf.ApprovedBy, "the old approval does not carry over")
	require.Empty(t, w.a.EKSUpdates(cluster))
	require.Contains(t, events(w.history(t)), "plan-changed")
	stepOf(t, wf, eksupgrade.KindSelfManagedNodegroup, "more-nodes")

	_, err := eksupgrade.Approve(context.Background(), w.store, cluster, "bob", w.a.Clock().Now())
	require.NoError(t, err)
	req := upgrade()
	req.Approve = false
	// more-nodes has no nodes the agent can roll in this world: the run carries out the new plan up to its
	// step, which waits for the agent's rollout of more-nodes.
	r := w.runner("run-3")
	r.MaxWait = 30 * time.Minute
	_, err = r.Run(context.Background(), req)
	require.ErrorContains(t, err, "self-managed node group more-nodes: the agent's rollout to the Kubernetes 1.31 AMI is not done")
	done, err := w.store.GetWorkflow(context.Background(), cluster)
	require.NoError(t, err)
	require.Equal(t, "bob", done.ApprovedBy)
	require.Equal(t, "1.31", w.clusterVersion(t))
	require.Equal(t, state.StepStatusInProgress, stepOf(t, done, eksupgrade.KindSelfManagedNodegroup, "more-nodes").Status)
}

func TestAnInsightInErrorAfterTheApprovalHaltsBeforeTheFirstChange(t *testing.T) {
	w := newWorld(t)
	approvedWaiting(t, w)
	w.a.AddEKSInsight(cluster, sim.EKSInsightSpec{Name: "Kubelet version skew", KubernetesVersion: "1.31", Status: ekstypes.InsightStatusValueError})
	wf := w.run(t, "run-2", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Contains(t, wf.Reason, "preflight before the first change failed: insight Kubelet version skew: ERROR")
	require.Zero(t, w.updateCalls()["UpdateClusterVersion"], "not even attempted")
}

func TestTwoPersonRuleTheRequesterCannotApproveItsOwnPlan(t *testing.T) {
	w := newWorld(t)
	req := upgrade() // --approve by the requester
	req.TwoPerson = true
	wf := w.run(t, "run-1", req)
	require.Equal(t, state.WorkflowWaiting, wf.Phase)
	require.Contains(t, wf.Reason, "two-person rule: "+demo.UpgradeOperator+" requested the plan")
	require.Empty(t, wf.ApprovedBy)
	require.Empty(t, w.a.EKSUpdates(cluster))

	_, err := eksupgrade.Approve(context.Background(), w.store, cluster, demo.UpgradeOperator, w.a.Clock().Now())
	require.ErrorIs(t, err, eksupgrade.ErrSameApprover)
	again := w.run(t, "run-2", eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo, Approve: true}) // a run cannot lift the rule
	require.Equal(t, state.WorkflowWaiting, again.Phase)
	require.Empty(t, w.a.EKSUpdates(cluster))

	_, err = eksupgrade.Approve(context.Background(), w.store, cluster, "bob", w.a.Clock().Now())
	require.NoError(t, err)
	done := w.run(t, "run-3", eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo})
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
	require.Equal(t, "bob", done.ApprovedBy)
	require.Equal(t, demo.UpgradeOperator, done.RequestedBy)
}

// The requester cannot lift the two-person rule by running again without --two-person after the preflight
// halted: the replanned workflow keeps the rule of the unfinished upgrade it replaces.
func TestTwoPersonRuleSurvivesAHaltAtThePreflight(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.TwoPerson = true
	id := w.a.AddEKSInsight(cluster, sim.EKSInsightSpec{Name: "Deprecated APIs removed in Kubernetes v1.31", KubernetesVersion: "1.31",
		Status: ekstypes.InsightStatusValueError, Reason: "deprecated API usage detected"})
	halted := w.run(t, "run-1", req)
	require.Equal(t, state.WorkflowHalted, halted.Phase)

	w.a.SetEKSInsightStatus(cluster, id, ekstypes.InsightStatusValuePassing, "no deprecated API calls in 30 days")
	again := w.run(t, "run-2", upgrade()) // the requester again, --approve, without --two-person
	require.Equal(t, state.WorkflowWaiting, again.Phase, again.Reason)
	require.True(t, again.TwoPersonRule)
	require.Contains(t, again.Reason, "two-person rule")
	require.Empty(t, w.a.EKSUpdates(cluster))
}

// An installed add-on version that does not read as vX.Y.Z-eksbuild.N cannot be ordered against the plan: it is
// never updated on the chance that the update is a downgrade.
func TestAddonWhoseInstalledVersionCannotBeComparedIsNeverUpdated(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.Approve = false
	require.Equal(t, state.WorkflowWaiting, w.run(t, "run-1", req).Phase)
	installVPCCNI(t, w.a, "v1.19-custom", sim.EKSAddonVersion{Version: "v1.19-custom", ClusterVersions: []string{"1.30", "1.31"}})
	wf := w.run(t, "run-2", upgrade())
	v, _, _ := w.a.EKSAddon(cluster, "vpc-cni")
	require.Equal(t, "v1.19-custom", v)
	require.Zero(t, countUpdates(w.a, "vpc-cni"), "no UpdateAddon of vpc-cni was started")
	require.NotEqual(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
}

// A --retry that plans an add-on at another version than the approved plan (a newer default
// for the target was published after the halt) does not carry out the new plan on the old approval, even with
// --approve: the workflow waits at its approval step, and only after a new approval is the new version sent.
func TestRetryThatReplansAnAddonNeedsANewApproval(t *testing.T) {
	w := newWorld(t)
	haltAtCoreDNS(t, w)
	w.a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: "coredns", Version: "v1.11.4-eksbuild.2", ClusterVersions: []string{"1.30", "1.31"}, DefaultFor: []string{"1.31"}})
	before := countUpdates(w.a, "coredns")

	wf := w.run(t, "retry-1", retried()) // --retry --approve
	require.Equal(t, state.WorkflowWaiting, wf.Phase, wf.Reason)
	require.Contains(t, wf.Reason, "the plan changed at the retry (addon coredns: ")
	require.Contains(t, wf.Reason, "(or run again with --yes)", "the current flag, not the deprecated --approve")
	require.Contains(t, wf.Reason, "now v1.11.1-eksbuild.9 -> v1.11.4-eksbuild.2")
	require.Empty(t, wf.ApprovedBy, "the old approval does not cover the new plan")
	require.Equal(t, state.StepStatusPending, stepOf(t, wf, eksupgrade.KindApproval, cluster).Status)
	require.Equal(t, state.StepStatusCompleted, stepOf(t, wf, eksupgrade.KindControlPlane, cluster).Status, "done steps stay done")
	require.Equal(t, before, countUpdates(w.a, "coredns"), "no UpdateAddon on the old approval")
	require.Contains(t, events(w.history(t)), "plan-changed")

	_, err := eksupgrade.Approve(context.Background(), w.store, cluster, "bob", w.a.Clock().Now())
	require.NoError(t, err)
	done := w.run(t, "run-3", eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo})
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
	require.Equal(t, "bob", done.ApprovedBy)
	v, _, _ := w.a.EKSAddon(cluster, "coredns")
	require.Equal(t, "v1.11.4-eksbuild.2", v)
	require.Equal(t, 1, w.updateCalls()["UpdateClusterVersion"], "the control plane is not updated twice")
}

// The two-person rule compares principals. Two callers of one assumed role
// (arn:aws:sts::ACCOUNT:assumed-role/ROLE/NAME, the name chosen by the caller) are one person.
func TestTwoPersonRuleComparesPrincipalsNotRoleSessionNames(t *testing.T) {
	const alice, aliceAgain, bob = "arn:aws:sts::111122223333:assumed-role/Admin/alice", "arn:aws:sts::111122223333:assumed-role/Admin/bob",
		"arn:aws:sts::111122223333:assumed-role/Approver/bob"
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{alice, aliceAgain, true},
		{alice, bob, false},
		{"arn:aws:sts::111122223333:assumed-role/Admin/alice", "arn:aws:sts::444455556666:assumed-role/Admin/alice", false},
		{"arn:aws:iam::111122223333:user/alice", "arn:aws:iam::111122223333:user/bob", false},
		{"arn:aws:iam::111122223333:user/alice", "arn:aws:iam::111122223333:user/alice", true},
		{"alice", "bob", false},
	} {
		require.Equal(t, tc.same, eksupgrade.SamePrincipal(tc.a, tc.b), "%s vs %s", tc.a, tc.b)
	}
	require.Equal(t, "arn:aws:sts::111122223333:assumed-role/Admin", eksupgrade.Principal(alice))

	w := newWorld(t)
	r := w.runner("run-1")
	r.Who = alice
	wf, err := r.Run(context.Background(), eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo, TwoPerson: true})
	require.NoError(t, err)
	require.Equal(t, state.WorkflowWaiting, wf.Phase)

	_, err = eksupgrade.Approve(context.Background(), w.store, cluster, aliceAgain, w.a.Clock().Now())
	require.ErrorIs(t, err, eksupgrade.ErrSameApprover, "a second session name of the same role is the same person")
	require.ErrorContains(t, err, "arn:aws:sts::111122223333:assumed-role/Admin")
	r = w.runner("run-2")
	r.Who = aliceAgain
	again, err := r.Run(context.Background(), eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo, Approve: true})
	require.NoError(t, err)
	require.Equal(t, state.WorkflowWaiting, again.Phase)
	require.Contains(t, again.Reason, "two-person rule")
	require.Empty(t, w.a.EKSUpdates(cluster))

	_, err = eksupgrade.Approve(context.Background(), w.store, cluster, bob, w.a.Clock().Now())
	require.NoError(t, err, "another role is another principal")
}

// Approving a completed upgrade is refused with ErrNothingToApprove, not silently accepted.
func TestApprovingACompletedUpgradeIsRefused(t *testing.T) {
	w := newWorld(t)
	require.Equal(t, state.WorkflowCompleted, w.run(t, "run-1", upgrade()).Phase)
	_, err := eksupgrade.Approve(context.Background(), w.store, cluster, "bob", w.a.Clock().Now())
	require.ErrorIs(t, err, eksupgrade.ErrNothingToApprove)
	require.ErrorContains(t, err, "the upgrade of demo-eks to 1.31 completed at ")
	require.ErrorContains(t, err, "start a new upgrade with `patch-agent eks upgrade --cluster demo-eks --to 1.<minor>`")
}

// The two-person rule on the STS path: who requested and who approves are the identities STS GetCallerIdentity
// answers (operator.CallerIdentity), as the CLI records them. A second AssumeRole session of the same role,
// with another session name, is refused as the approver.
func TestTwoPersonRuleOverSTSCallerIdentitiesOfOneRoleIsOnePerson(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.a.SetCallerARN("arn:aws:sts::111122223333:assumed-role/PlatformAdmin/alice")
	requester, err := operator.CallerIdentity(ctx, w.a.STS())
	require.NoError(t, err)
	r := w.runner("run-1")
	r.Who = requester
	wf, err := r.Run(ctx, eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo, TwoPerson: true})
	require.NoError(t, err)
	require.Equal(t, requester, wf.RequestedBy)

	w.a.SetCallerARN("arn:aws:sts::111122223333:assumed-role/PlatformAdmin/bob") // alice, with --role-session-name bob
	sameRole, err := operator.CallerIdentity(ctx, w.a.STS())
	require.NoError(t, err)
	_, err = eksupgrade.Approve(ctx, w.store, cluster, sameRole, w.a.Clock().Now())
	require.ErrorIs(t, err, eksupgrade.ErrSameApprover)

	w.a.SetCallerARN("arn:aws:sts::111122223333:assumed-role/UpgradeApprover/bob")
	other, err := operator.CallerIdentity(ctx, w.a.STS())
	require.NoError(t, err)
	approved, err := eksupgrade.Approve(ctx, w.store, cluster, other, w.a.Clock().Now())
	require.NoError(t, err)
	require.Equal(t, other, approved.ApprovedBy, "the full ARN is recorded; only the comparison uses the principal")
}

// tagless hides the managed node groups' tags from the workflow: to it, they are not opted in.
type tagless struct{ awsapi.EKSUpgrade }

func (e tagless) DescribeNodegroup(ctx context.Context, in *awseks.DescribeNodegroupInput, o ...func(*awseks.Options)) (*awseks.DescribeNodegroupOutput, error) {
	out, err := e.EKSUpgrade.DescribeNodegroup(ctx, in, o...)
	if err == nil && out.Nodegroup != nil {
		ng := *out.Nodegroup
		ng.Tags = nil
		out = &awseks.DescribeNodegroupOutput{Nodegroup: &ng}
	}
	return out, err
}

// aloneRunner is a runner whose waits only move the clock (no agent runs) and to which the managed node group is
// not opted in (its step is ActionRequired), so that the workflow reaches the self-managed step without the agent.
func aloneRunner(w *world, owner string) *eksupgrade.Runner {
	r := demo.UpgradeRunner(w.a, w.store, owner, nil)
	r.EKS = tagless{r.EKS}
	return r
}

// imagesOf returns the AMIs the group's instances run.
func imagesOf(a *sim.Account, group string) []string {
	var out []string
	for _, i := range a.Group(group).Instances {
		out = append(out, i.ImageID)
	}
	return out
}

// Item 6, self-managed node groups (the issue's "marked Completed the moment it is handed over, while every
// node still runs the old version's AMI"): with no agent running, the step is handed over (InProgress), never
// Completed, and the workflow is not Completed; once the agent's rollout of the group is Completed on the
// Kubernetes 1.31 AMI, the next run completes the step and the workflow, with every node on that AMI.
func TestSelfManagedStepIsNotCompletedAtHandOverButWhenTheAgentsRolloutIsOnTheNewVersion(t *testing.T) {
	w := newWorld(t)
	alone := aloneRunner(w, "run-1") // its waits only move the clock: no agent runs
	alone.MaxWait = 20 * time.Minute
	_, err := alone.Run(context.Background(), upgrade())
	require.ErrorContains(t, err, "self-managed node group "+testworld.EKSGroupName+": the agent's rollout to the Kubernetes 1.31 AMI is not done after 20m0s")
	mid, err := w.store.GetWorkflow(context.Background(), cluster)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowRunning, mid.Phase)
	sm := stepOf(t, mid, eksupgrade.KindSelfManagedNodegroup, testworld.EKSGroupName)
	require.Equal(t, state.StepStatusInProgress, sm.Status, "handed over, not Completed")
	require.True(t, sm.CompletedAt.IsZero())
	require.NotNil(t, sm.Nodes)
	require.Equal(t, "no rollout record yet: waiting for the agent", eksupgrade.NodesLine(sm.Nodes))
	require.NotContains(t, imagesOf(w.a, testworld.EKSGroupName), demo.UpgradeImage, "no node is on the new AMI yet")
	require.Contains(t, events(w.history(t)), "self-managed-handed-over")
	require.NotContains(t, events(w.history(t)), "self-managed-completed")

	w.a.Advance(eksupgrade.DefaultLeaseTTL + state.LeaseRule{}.Margin())
	done := w.run(t, "run-2", upgrade()) // the agent runs during this run's waits
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
	sm = stepOf(t, done, eksupgrade.KindSelfManagedNodegroup, testworld.EKSGroupName)
	require.Equal(t, state.StepStatusCompleted, sm.Status)
	require.Equal(t, &state.NodeProgress{Phase: state.PhaseCompleted, OnTarget: 3, Instances: 3, TargetImageID: demo.UpgradeImage,
		Source: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id", OnVersion: true}, sm.Nodes)
	require.Equal(t, []string{demo.UpgradeImage, demo.UpgradeImage, demo.UpgradeImage}, imagesOf(w.a, testworld.EKSGroupName))
	require.Equal(t, 1, w.updateCalls()["UpdateClusterVersion"])
}

// Item 6: a halted agent rollout of the group halts the workflow's step with the rollout's reason; a rollout
// still on the old version's parameter, even Completed, does not complete the step.
func TestSelfManagedStepHaltsWhenTheAgentsRolloutHalts(t *testing.T) {
	const param131 = "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id"
	for _, tc := range []struct {
		name    string
		record  state.Rollout
		phase   state.WorkflowPhase
		contain string
	}{
		{"halted on the new version", state.Rollout{Phase: state.PhaseHalted, Source: param131, TargetImageID: demo.UpgradeImage, Instances: 3, OnTarget: 1,
			Reason: "failed: drain of i-0abc did not finish within 30m0s"}, state.WorkflowHalted,
			"the agent's rollout of demo-eks-nodes is Halted: failed: drain of i-0abc did not finish within 30m0s"},
		{"rolled back", state.Rollout{Phase: state.PhaseRolledBack, Source: param131, TargetImageID: demo.UpgradeImage, Instances: 3, OnTarget: 0, Reason: "replacement not healthy"},
			state.WorkflowHalted, "is RolledBack: replacement not healthy"},
		{"completed on the old version's parameter", state.Rollout{Phase: state.PhaseCompleted, Instances: 3, OnTarget: 3, TargetImageID: testworld.ImageA,
			Source: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/recommended/image_id"}, state.WorkflowRunning, ""},
		{"completed on the new version with an instance left", state.Rollout{Phase: state.PhaseCompleted, Instances: 3, OnTarget: 2, Source: param131},
			state.WorkflowRunning, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			alone := aloneRunner(w, "run-1")
			alone.MaxWait = 20 * time.Minute
			_, _ = alone.Run(context.Background(), upgrade()) // up to the hand-over's wait
			tc.record.Group = testworld.EKSGroupName
			_, err := w.store.PutRollout(context.Background(), tc.record)
			require.NoError(t, err)
			w.a.Advance(eksupgrade.DefaultLeaseTTL + state.LeaseRule{}.Margin())
			wf, err := alone.Run(context.Background(), upgrade())
			wf, gerr := w.store.GetWorkflow(context.Background(), cluster)
			require.NoError(t, gerr)
			require.Equal(t, tc.phase, wf.Phase, wf.Reason)
			sm := stepOf(t, wf, eksupgrade.KindSelfManagedNodegroup, testworld.EKSGroupName)
			if tc.phase == state.WorkflowHalted {
				require.NoError(t, err)
				require.Equal(t, state.StepStatusFailed, sm.Status)
				require.Contains(t, wf.Reason, tc.contain)
				return
			}
			require.ErrorContains(t, err, "not done after")
			require.Equal(t, state.StepStatusInProgress, sm.Status, "not Completed")
			require.Equal(t, tc.record.OnTarget, sm.Nodes.OnTarget, "its progress is on the step")
		})
	}
}

// Item 6: `eks upgrade --status` shows how far the agent's rollout of a self-managed node group is (instances
// on the new AMI / total, the rollout's phase) while the step waits, and the JSON summary carries it as
// steps[].nodes.
func TestStatusShowsTheSelfManagedRolloutsProgress(t *testing.T) {
	w := newWorld(t)
	alone := aloneRunner(w, "run-1")
	alone.MaxWait = 20 * time.Minute
	_, _ = alone.Run(context.Background(), upgrade())
	_, err := w.store.PutRollout(context.Background(), state.Rollout{Group: testworld.EKSGroupName, Phase: state.PhaseReplacing, Instances: 4, OnTarget: 2,
		TargetImageID: demo.UpgradeImage, Source: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id"})
	require.NoError(t, err)
	w.a.Advance(eksupgrade.DefaultLeaseTTL + state.LeaseRule{}.Margin())
	_, err = alone.Run(context.Background(), upgrade())
	require.ErrorContains(t, err, "not done after")
	wf, err := w.store.GetWorkflow(context.Background(), cluster)
	require.NoError(t, err)

	var out bytes.Buffer
	eksupgrade.Render(&out, eksupgrade.NewSummary(wf, w.a.Clock().Now()), false)
	require.Regexp(t, `self-managed-nodegroup\s+demo-eks-nodes\s+1\.30\s+1\.31\s+InProgress\s+.*rollout Replacing: 2/4 instance\(s\) on `+demo.UpgradeImage, out.String())
	doc, err := json.Marshal(eksupgrade.NewSummary(wf, w.a.Clock().Now()))
	require.NoError(t, err)
	require.Contains(t, string(doc), `"nodes":{"phase":"Replacing","onTarget":2,"instances":4,"targetImageId":"`+demo.UpgradeImage+`"`)
}

// With the agent's rollout of a self-managed node group already Halted, the preflight fails on it, before
// anything changes; passing it would let the workflow move the control plane, the add-ons and the managed node
// group, only to halt at that group's step.
func TestPreflightFailsWhenTheAgentsRolloutOfASelfManagedGroupIsHalted(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.advance(t, 0)
	r, err := w.store.GetRollout(ctx, testworld.EKSGroupName)
	if err != nil {
		r = state.Rollout{}
	}
	r.Group, r.Platform, r.Cluster = testworld.EKSGroupName, "eks", cluster
	r.Phase, r.Reason = state.PhaseHalted, "failed: replacement i-0 not healthy after 10m0s"
	_, err = w.store.PutRollout(ctx, r)
	require.NoError(t, err)

	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase, wf.Reason)
	var found bool
	for _, c := range wf.Checks {
		if c.Name == "rollout of "+testworld.EKSGroupName {
			found = true
			require.Equal(t, eksupgrade.CheckFail, c.Result)
			require.Contains(t, c.Detail, "is Halted (failed: replacement i-0 not healthy after 10m0s)")
		}
	}
	require.True(t, found, "the preflight names the halted rollout")
	require.Empty(t, w.a.EKSUpdates(cluster), "nothing changed")
}

// The same for a managed node group. With the agent's rollout of nodegroup/demo-eks/web already Halted (the
// agent does not detect again from Halted), the preflight fails: passing it would let the workflow move the
// control plane and the add-ons and then halt at the node group's step, a halt certain from the start.
func TestPreflightFailsWhenTheAgentsRolloutOfAManagedNodegroupIsHalted(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	key := model.NodegroupKey(cluster, demo.UpgradeNodegroup)
	_, err := w.store.PutRollout(ctx, state.Rollout{Group: key, Platform: "eks", Cluster: cluster, Phase: state.PhaseHalted, Reason: "failed: earlier PodEvictionFailure"})
	require.NoError(t, err)

	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase, wf.Reason)
	var found bool
	for _, c := range wf.Checks {
		if c.Name == "rollout of "+key {
			found = true
			require.Equal(t, eksupgrade.CheckFail, c.Result)
			require.Contains(t, c.Detail, "is Halted (failed: earlier PodEvictionFailure)")
		}
	}
	require.True(t, found, "the preflight names the halted rollout")
	require.Empty(t, w.a.EKSUpdates(cluster), "nothing changed")
}
