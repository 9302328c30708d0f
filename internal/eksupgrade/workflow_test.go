package eksupgrade_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
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
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

const cluster = testworld.EKSCluster

// world is the eks-upgrade demo's account (cluster on 1.30: vpc-cni, coredns, kube-proxy, managed node group
// web, self-managed node group demo-eks-nodes) and a memory store.
type world struct {
	a     *sim.Account
	store *state.Memory
	// agent is the demo world whose agent rolls the self-managed node group while a runner waits.
	agent *testworld.World
}

func newWorld(t *testing.T) *world {
	t.Helper()
	store := state.NewMemory()
	dw, err := demo.EKSUpgradeWorld(store)
	require.NoError(t, err)
	return &world{a: dw.Account, store: store, agent: dw}
}

// advance lets d of simulated time pass with the agent running (as its service does between two runs of
// `patch-agent eks upgrade`).
func (w *world) advance(t *testing.T, d time.Duration) {
	t.Helper()
	require.NoError(t, w.agent.RunFor(context.Background(), d))
}

func (w *world) runner(owner string) *eksupgrade.Runner {
	if w.agent == nil { // a world of its own account (no node group to roll): waits only move the clock
		return demo.UpgradeRunner(w.a, w.store, owner, nil)
	}
	return demo.AgentUpgradeRunner(w.agent, owner, nil)
}

func (w *world) run(t *testing.T, owner string, req eksupgrade.Request) state.Workflow {
	t.Helper()
	wf, err := w.runner(owner).Run(context.Background(), req)
	require.NoError(t, err)
	return wf
}

func upgrade() eksupgrade.Request {
	return eksupgrade.Request{Cluster: cluster, To: demo.UpgradeTo, Approve: true}
}

// updateCalls counts the calls that start an EKS update.
func (w *world) updateCalls() map[string]int {
	c := w.a.Calls()
	return map[string]int{"UpdateClusterVersion": c["eks:UpdateClusterVersion"], "UpdateAddon": c["eks:UpdateAddon"],
		"UpdateNodegroupVersion": c["eks:UpdateNodegroupVersion"]}
}

func (w *world) history(t *testing.T) []state.HistoryEntry {
	t.Helper()
	h, err := w.store.History(context.Background(), eksupgrade.Subject(cluster))
	require.NoError(t, err)
	return h
}

func (w *world) clusterVersion(t *testing.T) string {
	t.Helper()
	out, err := w.a.EKS().DescribeCluster(context.Background(), &awseks.DescribeClusterInput{Name: aws.String(cluster)})
	require.NoError(t, err)
	return aws.ToString(out.Cluster.Version)
}

func statuses(wf state.Workflow) map[string]state.StepStatus {
	out := map[string]state.StepStatus{}
	for _, s := range wf.Steps {
		out[s.Kind+" "+s.Name] = s.Status
	}
	return out
}

func events(h []state.HistoryEntry) []string {
	var out []string
	for _, e := range h {
		out = append(out, e.Event)
	}
	return out
}

func TestUpgradeRunsEveryStepInOrderOneUpdateAtATime(t *testing.T) {
	w := newWorld(t)
	wf := w.run(t, "run-1", upgrade())

	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	for _, s := range wf.Steps {
		require.Equal(t, state.StepStatusCompleted, s.Status, "%s %s", s.Kind, s.Name)
	}
	require.Equal(t, "1.31", w.clusterVersion(t))
	for _, ad := range demo.UpgradeAddons {
		v, st, ok := w.a.EKSAddon(cluster, ad.Name)
		require.True(t, ok)
		require.Equal(t, ad.To, v)
		require.Equal(t, ekstypes.AddonStatusActive, st)
	}
	ups := w.a.EKSUpdates(cluster)
	var order []string
	for i, u := range ups {
		order = append(order, u.Addon+u.Nodegroup)
		require.Equal(t, ekstypes.UpdateStatusSuccessful, u.Status)
		if i > 0 {
			prev := ups[i-1]
			require.True(t, u.CreatedAt.After(prev.CreatedAt), "one update at a time")
		}
	}
	var addons []string
	for _, u := range ups[1:] {
		if u.Addon != "" {
			addons = append(addons, u.Addon)
		}
	}
	require.Equal(t, "", order[0], "the control plane first")
	require.Equal(t, []string{"vpc-cni", "coredns", "kube-proxy"}, addons, "then the add-ons (VPC CNI, CoreDNS, kube-proxy), one at a time")
	require.Contains(t, order, demo.UpgradeNodegroup, "the managed node group's update, by the agent's rollout once the control plane moved")
	require.Equal(t, map[string]int{"UpdateClusterVersion": 1, "UpdateAddon": 3, "UpdateNodegroupVersion": 1}, w.updateCalls())
}

func TestEveryStepIsInTheHistoryWithWhoFromToAndUpdateID(t *testing.T) {
	w := newWorld(t)
	wf := w.run(t, "run-1", upgrade())
	h := w.history(t)
	require.Equal(t, []string{"preflight-passed", "approved",
		"control-plane-requested", "control-plane-started", "control-plane-completed",
		"addon-requested", "addon-started", "addon-completed",
		"addon-requested", "addon-started", "addon-completed",
		"addon-requested", "addon-started", "addon-completed",
		"managed-nodegroup-handed-over", "managed-nodegroup-completed",
		"self-managed-handed-over", "self-managed-completed", "completed"}, events(h))
	cp := wf.Steps[2]
	require.Equal(t, eksupgrade.KindControlPlane, cp.Kind)
	started := h[3]
	require.Contains(t, started.Detail, "control-plane demo-eks: 1.30 -> 1.31")
	require.Contains(t, started.Detail, "update "+cp.UpdateID)
	require.Contains(t, started.Detail, "by "+demo.UpgradeOperator)
	require.False(t, started.At.IsZero())
	for _, e := range h {
		require.Equal(t, eksupgrade.Subject(cluster), e.Group)
	}
}

func TestWithoutApprovalTheWorkflowWaitsAndChangesNothing(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.Approve = false
	wf := w.run(t, "run-1", req)
	require.Equal(t, state.WorkflowWaiting, wf.Phase)
	require.Contains(t, wf.Reason, "patch-agent approve eks:demo-eks` (or run again with --yes)", "the current flag, not the deprecated --approve")
	require.Empty(t, wf.LeaseOwner, "a waiting workflow holds no lease")
	require.Empty(t, w.a.EKSUpdates(cluster))

	again := w.run(t, "run-2", req)
	require.Equal(t, state.WorkflowWaiting, again.Phase, "a run without approval keeps waiting")
	require.Empty(t, w.a.EKSUpdates(cluster))
	require.Equal(t, []string{"preflight-passed", "waiting"}, events(w.history(t)), "the same wait is recorded once")

	_, err := eksupgrade.Approve(context.Background(), w.store, cluster, "alice", w.a.Clock().Now())
	require.NoError(t, err)
	done := w.run(t, "run-3", req)
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
	require.Equal(t, "alice", done.ApprovedBy)
	require.Equal(t, "alice", done.Steps[1].By)
}

func TestApproveFlagOnASecondInvocationApproves(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.Approve = false
	require.Equal(t, state.WorkflowWaiting, w.run(t, "run-1", req).Phase)
	req.Approve = true
	done := w.run(t, "run-2", req)
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
	require.Equal(t, demo.UpgradeOperator, done.ApprovedBy)
}

func TestPreflightFailsOnAnErrorInsightAndChangesNothing(t *testing.T) {
	w := newWorld(t)
	id := w.a.AddEKSInsight(cluster, sim.EKSInsightSpec{Name: "Deprecated APIs removed in Kubernetes v1.31", KubernetesVersion: "1.31",
		Status: ekstypes.InsightStatusValueError, Reason: "deprecated API usage detected",
		Recommendation: "Update manifests and API clients to use newer Kubernetes APIs",
		Resources:      []string{"/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas"}})
	wf := w.run(t, "run-1", upgrade())

	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Equal(t, state.StepStatusFailed, wf.Steps[0].Status)
	require.Contains(t, wf.Reason, "insight Deprecated APIs removed in Kubernetes v1.31: ERROR: deprecated API usage detected")
	require.Contains(t, wf.Reason, "recommendation: Update manifests")
	require.Contains(t, wf.Reason, "/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas")
	require.Empty(t, w.a.EKSUpdates(cluster))
	require.Equal(t, map[string]int{"UpdateClusterVersion": 0, "UpdateAddon": 0, "UpdateNodegroupVersion": 0}, w.updateCalls())
	require.Equal(t, []string{"preflight-failed"}, events(w.history(t)))

	// Fixed: the next run starts with a new preflight, without --retry.
	w.a.SetEKSInsightStatus(cluster, id, ekstypes.InsightStatusValuePassing, "no deprecated API calls in 30 days")
	done := w.run(t, "run-2", upgrade())
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
}

func TestWarningInsightsAndInsightsOfLaterVersionsDoNotFailThePreflight(t *testing.T) {
	w := newWorld(t)
	w.a.AddEKSInsight(cluster, sim.EKSInsightSpec{Name: "Kube-proxy version skew", KubernetesVersion: "1.31", Status: ekstypes.InsightStatusValueWarning})
	w.a.AddEKSInsight(cluster, sim.EKSInsightSpec{Name: "Deprecated APIs removed in Kubernetes v1.32", KubernetesVersion: "1.32", Status: ekstypes.InsightStatusValueError})
	w.a.AddEKSInsight(cluster, sim.EKSInsightSpec{Name: "Amazon Linux 2 compatibility", Category: ekstypes.CategoryMisconfiguration, Status: ekstypes.InsightStatusValueError})
	plan, err := w.runner("dry").Plan(context.Background(), cluster, "1.31")
	require.NoError(t, err)
	require.NotEqual(t, state.WorkflowHalted, plan.Phase, plan.Reason)
	results := map[string]string{}
	for _, c := range plan.Checks {
		results[c.Name] = c.Result
	}
	require.Equal(t, eksupgrade.CheckWarn, results["insight Kube-proxy version skew"])
	require.NotContains(t, results, "insight Deprecated APIs removed in Kubernetes v1.32", "about a later upgrade")
	require.NotContains(t, results, "insight Amazon Linux 2 compatibility", "not an upgrade readiness insight")
}

func TestPreflightFailsOnAnAddonWithoutAVersionForTheTarget(t *testing.T) {
	w := newWorld(t)
	w.a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: "aws-ebs-csi-driver", Version: "v1.30.0-eksbuild.1", ClusterVersions: []string{"1.29", "1.30"},
		DefaultFor: []string{"1.30"}})
	require.NoError(t, w.a.InstallEKSAddon(cluster, "aws-ebs-csi-driver", "v1.30.0-eksbuild.1"))
	wf := w.run(t, "run-1", upgrade())

	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Contains(t, wf.Reason, "add-on aws-ebs-csi-driver: no version of aws-ebs-csi-driver is compatible with Kubernetes 1.31")
	require.Empty(t, w.a.EKSUpdates(cluster))
}

func TestPreflightRefusesATargetThatIsNotTheNextMinor(t *testing.T) {
	for _, to := range []string{"1.32", "1.30", "1.29"} {
		t.Run(to, func(t *testing.T) {
			w := newWorld(t)
			wf := w.run(t, "run-1", eksupgrade.Request{Cluster: cluster, To: to, Approve: true})
			require.Equal(t, state.WorkflowHalted, wf.Phase)
			require.Contains(t, wf.Reason, "exactly one minor version above it (1.31)")
			require.Empty(t, w.a.EKSUpdates(cluster))
		})
	}
}

func TestPreflightRefusesNodeGroupsThatWouldBeOutsideTheKubeletSkew(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, a *sim.Account)
		want  string
	}{
		{"managed node group 4 minors behind the target", func(t *testing.T, a *sim.Account) {
			_, err := a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: cluster, Name: "legacy", AMIType: "AL2_x86_64", Version: "1.27",
				ImageID: "ami-0legacy", InstanceType: "m5.large", Min: 1, Max: 1, Desired: 1})
			require.NoError(t, err)
		}, "managed node group legacy: at 1.27, the control plane at 1.30: EKS moves the control plane only when every managed node group is on its version"},
		{"self-managed node group pinned 4 minors behind the target", func(t *testing.T, a *sim.Account) {
			selfManaged(t, a, "batch-nodes", map[string]string{model.TagParameter: providers.ParameterAuto, providers.TagKubernetesVersion: "1.27"})
		}, "self-managed node group batch-nodes: AMI for Kubernetes 1.27 (pinned): kubelet 1.27 is 4 minor versions behind"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.setup(t, w.a)
			wf := w.run(t, "run-1", upgrade())
			require.Equal(t, state.WorkflowHalted, wf.Phase)
			require.Contains(t, wf.Reason, tc.want)
			require.Empty(t, w.a.EKSUpdates(cluster))
		})
	}
}

func TestPreflightRefusesAClusterThatIsUpdating(t *testing.T) {
	w := newWorld(t)
	_, err := w.a.EKSUpgrade().UpdateNodegroupVersion(context.Background(), &awseks.UpdateNodegroupVersionInput{ClusterName: aws.String(cluster),
		NodegroupName: aws.String(demo.UpgradeNodegroup)})
	require.NoError(t, err)
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Contains(t, wf.Reason, "managed node group web: the node group is UPDATING")
}

func TestUnknownClusterIsAnErrorAndWritesNothing(t *testing.T) {
	w := newWorld(t)
	_, err := w.runner("run-1").Run(context.Background(), eksupgrade.Request{Cluster: "nope", To: "1.31"})
	require.ErrorContains(t, err, "EKS cluster not found")
	_, err = w.store.GetWorkflow(context.Background(), "nope")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func TestFailedControlPlaneUpdateHaltsAndNothingAfterItIsDone(t *testing.T) {
	w := newWorld(t)
	w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: cluster, Errors: []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeInsufficientFreeAddresses,
		ErrorMessage: aws.String("One or more of the subnets has fewer than 5 free IP addresses"), ResourceIds: []string{"subnet-0a1b2c"}}}})
	wf := w.run(t, "run-1", upgrade())

	require.Equal(t, state.WorkflowHalted, wf.Phase)
	cp := wf.Steps[2]
	require.Equal(t, state.StepStatusFailed, cp.Status)
	require.Contains(t, cp.Detail, "Failed: InsufficientFreeAddresses: One or more of the subnets has fewer than 5 free IP addresses (subnet-0a1b2c)")
	require.Contains(t, wf.Reason, "failed: control-plane demo-eks: update "+cp.UpdateID)
	for _, s := range wf.Steps[3:] {
		require.Equal(t, state.StepStatusPending, s.Status, "%s %s is not done after the failure", s.Kind, s.Name)
	}
	require.Equal(t, map[string]int{"UpdateClusterVersion": 1, "UpdateAddon": 0, "UpdateNodegroupVersion": 0}, w.updateCalls())
	require.Equal(t, "1.30", w.clusterVersion(t))
	require.Contains(t, events(w.history(t)), "control-plane-failed")

	// Run again without --retry: still halted, nothing called.
	again := w.run(t, "run-2", upgrade())
	require.Equal(t, state.WorkflowHalted, again.Phase)
	require.Equal(t, 1, w.updateCalls()["UpdateClusterVersion"])

	// --retry starts the control plane update again with a new token and finishes.
	req := upgrade()
	req.Retry = true
	done := w.run(t, "run-3", req)
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
	require.NotEqual(t, cp.Token, done.Steps[2].Token)
	require.NotEqual(t, cp.UpdateID, done.Steps[2].UpdateID)
	require.Equal(t, "1.31", w.clusterVersion(t))
}

func TestFailedAddonUpdateHaltsAtThatAddon(t *testing.T) {
	w := newWorld(t)
	w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: cluster, Addon: "coredns", Errors: []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeConfigurationConflict,
		ErrorMessage: aws.String("Conflicts found when trying to apply. Will not continue due to resolve conflicts mode")}}})
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Equal(t, map[string]state.StepStatus{"preflight demo-eks": state.StepStatusCompleted, "approval demo-eks": state.StepStatusCompleted,
		"control-plane demo-eks": state.StepStatusCompleted, "addon vpc-cni": state.StepStatusCompleted, "addon coredns": state.StepStatusFailed,
		"addon kube-proxy": state.StepStatusPending, "managed-nodegroup web": state.StepStatusPending,
		"self-managed-nodegroup demo-eks-nodes": state.StepStatusPending}, statuses(wf))
	require.Contains(t, wf.Reason, "ConfigurationConflict")
	require.Equal(t, 2, w.updateCalls()["UpdateAddon"])
}

func TestAnUpdateEKSRefusesHaltsWithItsMessage(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.Approve = false
	require.Equal(t, state.WorkflowWaiting, w.run(t, "run-1", req).Phase)
	// After the preflight ran again, EKS refuses the update for a reason only it sees.
	r := w.runner("run-2")
	r.EKS = refusingEKS{r.EKS}
	wf, err := r.Run(context.Background(), upgrade())
	require.NoError(t, err)
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Contains(t, wf.Reason, "EKS refused UpdateClusterVersion of demo-eks to 1.31")
	require.Contains(t, wf.Reason, "Kubelet version skew")
	require.Empty(t, w.a.EKSUpdates(cluster))
}

// refusingEKS refuses every UpdateClusterVersion as EKS does for a blocking upgrade insight.
type refusingEKS struct{ awsapi.EKSUpgrade }

func (refusingEKS) UpdateClusterVersion(context.Context, *awseks.UpdateClusterVersionInput, ...func(*awseks.Options)) (*awseks.UpdateClusterVersionOutput, error) {
	return nil, &ekstypes.InvalidRequestException{Message: aws.String("Cluster upgrade is blocked by upgrade readiness insights in ERROR: Kubelet version skew. Resolve them or use force")}
}

// fuse kills an incarnation right after its At-th effect (a workflow write, a history entry, a call that
// starts an EKS update): that effect is durable, every later call fails with errCrashed.
type fuse struct {
	mu      sync.Mutex
	At      int
	effects int
	blown   bool
	// progressOnly counts only the effects that move the workflow: not the write that claims the lease of a
	// resumed workflow or renews it, nor the "resumed" history entry.
	progressOnly bool
	// loseResponse makes effect At "applied, response lost": the effect is durable, the incarnation gets
	// errResponseLost instead of its answer and dies (as testworld.Fuse.LoseResponse).
	loseResponse bool
}

var (
	errCrashed      = errors.New("process crashed (simulated)")
	errResponseLost = errors.New("response lost, then process crashed (simulated)")
)

func (f *fuse) before() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blown {
		return errCrashed
	}
	return nil
}

// after counts a completed effect and blows the fuse at effect At; it returns the error the incarnation
// sees: err, or errResponseLost for effect At with loseResponse.
func (f *fuse) after(err error) error {
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.effects++
	if f.At > 0 && f.effects == f.At {
		f.blown = true
		if f.loseResponse {
			return errResponseLost
		}
	}
	return nil
}

type fusedStore struct {
	eksupgrade.Store
	f *fuse
}

func (s fusedStore) GetWorkflow(ctx context.Context, c string) (state.Workflow, error) {
	if err := s.f.before(); err != nil {
		return state.Workflow{}, err
	}
	return s.Store.GetWorkflow(ctx, c)
}

func (s fusedStore) PutWorkflow(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	if err := s.f.before(); err != nil {
		return state.Workflow{}, err
	}
	stored, _ := s.Store.GetWorkflow(ctx, w.Cluster)
	out, err := s.Store.PutWorkflow(ctx, w)
	if !s.f.progressOnly || progressed(stored, w) {
		if err = s.f.after(err); err != nil {
			return state.Workflow{}, err
		}
	}
	return out, err
}

// progressed reports whether a write moves the workflow (not only its lease).
func progressed(before, after state.Workflow) bool {
	return before.Phase != after.Phase || before.Reason != after.Reason || before.Current != after.Current ||
		before.ApprovedBy != after.ApprovedBy || !reflect.DeepEqual(before.Steps, after.Steps)
}

func (s fusedStore) AppendHistory(ctx context.Context, e state.HistoryEntry) error {
	if err := s.f.before(); err != nil {
		return err
	}
	err := s.Store.AppendHistory(ctx, e)
	if !s.f.progressOnly || e.Event != "resumed" {
		err = s.f.after(err)
	}
	return err
}

type fusedEKS struct {
	awsapi.EKSUpgrade
	f *fuse
}

func (e fusedEKS) DescribeCluster(ctx context.Context, in *awseks.DescribeClusterInput, o ...func(*awseks.Options)) (*awseks.DescribeClusterOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	return e.EKSUpgrade.DescribeCluster(ctx, in, o...)
}

func (e fusedEKS) DescribeUpdate(ctx context.Context, in *awseks.DescribeUpdateInput, o ...func(*awseks.Options)) (*awseks.DescribeUpdateOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	return e.EKSUpgrade.DescribeUpdate(ctx, in, o...)
}

func (e fusedEKS) UpdateClusterVersion(ctx context.Context, in *awseks.UpdateClusterVersionInput, o ...func(*awseks.Options)) (*awseks.UpdateClusterVersionOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.EKSUpgrade.UpdateClusterVersion(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (e fusedEKS) UpdateAddon(ctx context.Context, in *awseks.UpdateAddonInput, o ...func(*awseks.Options)) (*awseks.UpdateAddonOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.EKSUpgrade.UpdateAddon(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

func (e fusedEKS) UpdateNodegroupVersion(ctx context.Context, in *awseks.UpdateNodegroupVersionInput, o ...func(*awseks.Options)) (*awseks.UpdateNodegroupVersionOutput, error) {
	if err := e.f.before(); err != nil {
		return nil, err
	}
	out, err := e.EKSUpgrade.UpdateNodegroupVersion(ctx, in, o...)
	if err = e.f.after(err); err != nil {
		return nil, err
	}
	return out, nil
}

// incarnation returns a runner whose store and EKS calls die with f.
func (w *world) incarnation(owner string, f *fuse) *eksupgrade.Runner {
	r := w.runner(owner)
	r.Store = fusedStore{Store: w.store, f: f}
	r.EKS = fusedEKS{EKSUpgrade: r.EKS, f: f}
	return r
}

// requireOneUpdateEach checks that the upgrade ended Completed with exactly one call and one update per
// control plane, add-on and managed node group: nothing was repeated.
func (w *world) requireOneUpdateEach(t *testing.T, wf state.Workflow) {
	t.Helper()
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	require.Equal(t, map[string]int{"UpdateClusterVersion": 1, "UpdateAddon": 3, "UpdateNodegroupVersion": 1}, w.updateCalls())
	require.Len(t, w.a.EKSUpdates(cluster), 5)
	for _, s := range wf.Steps {
		require.Equal(t, state.StepStatusCompleted, s.Status, "%s %s", s.Kind, s.Name)
	}
}

func TestCrashAfterEveryEffectResumesWithoutRepeatingAnUpdate(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	var wf state.Workflow
	restarts := 0
	for ; restarts < 500; restarts++ {
		f := &fuse{At: 1, progressOnly: true}
		var err error
		wf, err = w.incarnation("incarnation-"+string(rune('a'+restarts%26))+strings.Repeat("x", restarts/26), f).Run(ctx, upgrade())
		if err == nil { // the run ended: completed (its last effect may have been the last history entry)
			break
		}
		require.True(t, f.blown, "%v", err)
		require.ErrorIs(t, err, errCrashed)
		w.advance(t, eksupgrade.DefaultLeaseTTL+state.LeaseRule{}.Margin()) // the dead incarnation's lease expires, margin included
	}
	require.Greater(t, restarts, 30, "every write, history entry and update call was a crash point")
	w.requireOneUpdateEach(t, wf)
	require.Equal(t, "1.31", w.clusterVersion(t))

	// The audit trail is complete and holds each entry once: a crash between a write and its history entry
	// is made good by the next run.
	clean := newWorld(t)
	clean.run(t, "clean", upgrade())
	var trail []string
	for _, e := range events(w.history(t)) {
		if e != "resumed" {
			trail = append(trail, e)
		}
	}
	require.Equal(t, events(clean.history(t)), trail)
}

// TestCrashMatrixEKSUpgradeWorkflow is the EKS upgrade workflow's crash matrix. Its world is the eks-upgrade
// testworld.World, whose agent rolls the self-managed node group while the runner waits (so the hand-over, the
// progress writes and the self-managed step's completion are effects of the matrix too); only the runner
// crashes, not the agent, so the matrix keeps its own fuse on the runner's store and EKS calls,
// with the generic harness's counting (N effects of the uncrashed run) and modes (crash.CrashModes): for every
// k in 1..N the first incarnation dies right after effect k, or with effect k applied and its response lost;
// a second incarnation resumes once the first one's lease expired and must complete with one update call per
// control plane, add-on and managed node group, and the audit trail of the uncrashed run.
func TestCrashMatrixEKSUpgradeWorkflow(t *testing.T) {
	start := time.Now()
	clean := newWorld(t)
	f := &fuse{}
	_, err := clean.incarnation("clean", f).Run(context.Background(), upgrade())
	require.NoError(t, err)
	total := f.effects
	require.Greater(t, total, 20)
	runs := 1
	for at := 1; at <= total; at++ {
		for _, mode := range crash.CrashModes {
			t.Run(fmt.Sprintf("%s effect %d of %d", mode, at, total), func(t *testing.T) {
				w := newWorld(t)
				first := &fuse{At: at, loseResponse: mode == crash.CrashResponseLost}
				_, err := w.incarnation("first", first).Run(context.Background(), upgrade())
				require.True(t, first.blown, "the fuse fired")
				if at < total || err != nil { // after its last effect (the last history entry) the run may end well
					require.Error(t, err)
					require.True(t, errors.Is(err, errCrashed) || errors.Is(err, errResponseLost), "%v", err)
				}
				w.advance(t, eksupgrade.DefaultLeaseTTL+state.LeaseRule{}.Margin())
				wf, err := w.runner("second").Run(context.Background(), upgrade())
				require.NoError(t, err, "resume after effect %d", at)
				w.requireOneUpdateEach(t, wf)
				var trail []string
				for _, e := range events(w.history(t)) {
					if e != "resumed" {
						trail = append(trail, e)
					}
				}
				require.Equal(t, events(clean.history(t)), trail, "audit trail after a crash at effect %d", at)
			})
			runs++
		}
	}
	t.Logf("crash matrix EKS upgrade workflow: N = %d effects, %d runs, %v wall", total, runs, time.Since(start).Round(time.Millisecond))
}

func TestASecondConcurrentInvocationIsRefusedByTheLease(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	first := w.runner("first")
	var refused error
	wait := first.Wait
	first.Wait = func(ctx context.Context, d time.Duration) error {
		if refused == nil { // while the first tracks the control plane update
			_, refused = w.runner("second").Run(ctx, upgrade())
		}
		return wait(ctx, d)
	}
	wf, err := first.Run(ctx, upgrade())
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase)

	var held *eksupgrade.LeaseHeldError
	require.ErrorAs(t, refused, &held)
	require.ErrorIs(t, refused, eksupgrade.ErrLeaseHeld)
	require.Equal(t, "first", held.Owner)
	require.Equal(t, 1, w.updateCalls()["UpdateClusterVersion"])
}

func TestACrashedInvocationsLeaseBlocksUntilItExpires(t *testing.T) {
	w := newWorld(t)
	f := &fuse{At: 3} // preflight written, approved, control plane requested
	_, err := w.incarnation("crashed", f).Run(context.Background(), upgrade())
	require.ErrorIs(t, err, errCrashed)

	_, err = w.runner("next").Run(context.Background(), upgrade())
	require.ErrorIs(t, err, eksupgrade.ErrLeaseHeld)
	w.advance(t, eksupgrade.DefaultLeaseTTL)
	_, err = w.runner("next").Run(context.Background(), upgrade())
	require.ErrorIs(t, err, eksupgrade.ErrLeaseHeld, "held for the skew margin past its expiry")
	w.advance(t, state.LeaseRule{}.Margin())
	wf, err := w.runner("next").Run(context.Background(), upgrade())
	require.NoError(t, err)
	w.requireOneUpdateEach(t, wf)
}

func TestPauseHoldsTheNextUpdateButNotTheOneInFlight(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	now := w.a.Clock().Now()
	require.NoError(t, w.store.PutLock(ctx, state.Lock{Group: eksupgrade.Subject(cluster), Reason: "change freeze", Who: "bob", Since: now}))
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowWaiting, wf.Phase)
	require.Contains(t, wf.Reason, "paused (group eks:demo-eks) by bob")
	require.Contains(t, wf.Reason, "next step: UpdateClusterVersion of demo-eks to 1.31")
	require.Empty(t, w.a.EKSUpdates(cluster))

	require.NoError(t, w.store.DeleteLock(ctx, eksupgrade.Subject(cluster)))
	// A global pause set while the control plane update runs: the update is tracked to its end, the first
	// add-on is not started.
	r := w.runner("run-2")
	wait := r.Wait
	r.Wait = func(ctx context.Context, d time.Duration) error {
		if locks, _ := w.store.ListLocks(ctx); len(locks) == 0 {
			require.NoError(t, w.store.PutLock(ctx, state.Lock{Reason: "incident 4711", Who: "carol", Since: w.a.Clock().Now()}))
		}
		return wait(ctx, d)
	}
	wf, err := r.Run(ctx, upgrade())
	require.NoError(t, err)
	require.Equal(t, state.WorkflowWaiting, wf.Phase)
	require.Contains(t, wf.Reason, "paused (global) by carol")
	require.Equal(t, state.StepStatusCompleted, statuses(wf)["control-plane demo-eks"])
	require.Equal(t, state.StepStatusPending, statuses(wf)["addon vpc-cni"])
	require.Equal(t, 0, w.updateCalls()["UpdateAddon"])

	require.NoError(t, w.store.DeleteLock(ctx, state.GlobalScope))
	done := w.run(t, "run-3", upgrade())
	require.Equal(t, state.WorkflowCompleted, done.Phase, done.Reason)
}

func TestDryRunPlansAndTouchesNothing(t *testing.T) {
	w := newWorld(t)
	plan, err := w.runner("dry").Plan(context.Background(), cluster, "1.31")
	require.NoError(t, err)
	require.Equal(t, state.WorkflowPreflight, plan.Phase)
	var steps []string
	for _, s := range plan.Steps {
		steps = append(steps, s.Kind+" "+s.Name+" "+s.From+"->"+s.To)
	}
	require.Equal(t, []string{"preflight demo-eks 1.30->1.31", "approval demo-eks 1.30->1.31", "control-plane demo-eks 1.30->1.31",
		"addon vpc-cni v1.18.3-eksbuild.1->v1.19.0-eksbuild.1", "addon coredns v1.11.1-eksbuild.9->v1.11.3-eksbuild.1",
		"addon kube-proxy v1.30.6-eksbuild.3->v1.31.2-eksbuild.3", "managed-nodegroup web 1.30->1.31",
		"self-managed-nodegroup demo-eks-nodes 1.30->1.31"}, steps)
	_, err = w.store.GetWorkflow(context.Background(), cluster)
	require.ErrorIs(t, err, state.ErrNotFound)
	require.Empty(t, w.history(t))
	require.Equal(t, 0, w.store.Writes)
	require.Equal(t, map[string]int{"UpdateClusterVersion": 0, "UpdateAddon": 0, "UpdateNodegroupVersion": 0}, w.updateCalls())
}

// selfManaged adds an opted-in self-managed node group of the cluster with the given tags.
func selfManaged(t *testing.T, a *sim.Account, name string, tags map[string]string) {
	t.Helper()
	all := map[string]string{model.TagEnabled: "true", model.TagPlatform: model.PlatformEKS, model.TagCluster: cluster}
	for k, v := range tags {
		all[k] = v
	}
	lt := a.CreateLaunchTemplate(name+"-lt", "ami-0self", "m7g.large")
	require.NoError(t, a.CreateGroup(sim.GroupSpec{Name: name, Min: 1, Max: 2, Desired: 1, LaunchTemplateID: lt, Tags: all}))
}

func TestSelfManagedGroupsThatDoNotFollowTheControlPlaneNeedAnAction(t *testing.T) {
	w := newWorld(t)
	selfManaged(t, w.a, "pinned-nodes", map[string]string{model.TagParameter: providers.ParameterAuto, providers.TagKubernetesVersion: "1.30"})
	selfManaged(t, w.a, "path-nodes", map[string]string{model.TagParameter: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/recommended/image_id"})
	selfManaged(t, w.a, "golden-nodes", map[string]string{model.TagParameter: "/golden-ami/eks/al2023"})
	wf := w.run(t, "run-1", upgrade())

	require.Equal(t, state.WorkflowCompleted, wf.Phase)
	require.Equal(t, "3 action(s) required: see the steps in ActionRequired", wf.Reason)
	byName := map[string]state.WorkflowStep{}
	for _, s := range wf.Steps {
		byName[s.Name] = s
	}
	require.Equal(t, state.StepStatusCompleted, byName[testworld.EKSGroupName].Status, "auto without a pin moves by itself")
	require.Contains(t, byName[testworld.EKSGroupName].Detail, "follows the control plane")
	require.Equal(t, state.StepStatusActionRequired, byName["pinned-nodes"].Status)
	require.Contains(t, byName["pinned-nodes"].Action, "tag patch-agent/kubernetes-version=1.30 pins the AMI: set it to 1.31")
	require.Equal(t, state.StepStatusActionRequired, byName["path-nodes"].Status)
	require.Contains(t, byName["path-nodes"].Action, "set it to /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id")
	require.Equal(t, state.StepStatusActionRequired, byName["golden-nodes"].Status)
	require.Contains(t, byName["golden-nodes"].Action, "publish a node AMI built for Kubernetes 1.31")
	require.Len(t, eksupgrade.Actions(wf), 3)

	var golden state.PreflightCheck
	for _, c := range wf.Checks {
		if c.Name == "self-managed node group golden-nodes" {
			golden = c
		}
	}
	require.Equal(t, eksupgrade.CheckWarn, golden.Result, "its version is unknown")
}

func TestSelfManagedVersionComesFromItsLastRolloutsParameter(t *testing.T) {
	w := newWorld(t)
	_, err := w.store.PutRollout(context.Background(), state.Rollout{Group: testworld.EKSGroupName, Phase: state.PhaseCompleted,
		Source: "/aws/service/eks/optimized-ami/1.27/amazon-linux-2023/arm64/standard/recommended/image_id"})
	require.NoError(t, err)
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowHalted, wf.Phase, "its nodes still run a 1.27 AMI")
	require.Contains(t, wf.Reason, "self-managed node group demo-eks-nodes: AMI for Kubernetes 1.27 (follows)")
}

func TestManagedNodegroupWithACustomAMINeedsAnAction(t *testing.T) {
	w := newWorld(t)
	_, err := w.a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: cluster, Name: "gpu", AMIType: "CUSTOM", Version: "1.30", ImageID: "ami-0gpu",
		InstanceType: "g5.xlarge", Min: 1, Max: 1, Desired: 1})
	require.NoError(t, err)
	wf := w.run(t, "run-1", upgrade())
	require.Equal(t, state.WorkflowCompleted, wf.Phase)
	require.Equal(t, state.StepStatusActionRequired, statuses(wf)["managed-nodegroup gpu"])
	require.Equal(t, 1, w.updateCalls()["UpdateNodegroupVersion"], "only web is updated")
	require.Contains(t, eksupgrade.Actions(wf)[0], "managed-nodegroup gpu: the node group runs a custom AMI")
}

func TestRunningACompletedUpgradeAgainDoesNothing(t *testing.T) {
	w := newWorld(t)
	first := w.run(t, "run-1", upgrade())
	calls := w.a.Calls()
	again := w.run(t, "run-2", upgrade())
	require.Equal(t, first.Version, again.Version)
	require.Equal(t, calls, w.a.Calls(), "no AWS call at all")
}

func TestAnUnfinishedUpgradeToAnotherVersionIsRefused(t *testing.T) {
	w := newWorld(t)
	req := upgrade()
	req.Approve = false
	require.Equal(t, state.WorkflowWaiting, w.run(t, "run-1", req).Phase)
	_, err := w.runner("run-2").Run(context.Background(), eksupgrade.Request{Cluster: cluster, To: "1.32"})
	require.ErrorIs(t, err, eksupgrade.ErrOtherUpgrade)
	require.ErrorContains(t, err, "run it to its end with --to 1.31 first")
}

func TestApproveNeedsAWaitingWorkflow(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	_, err := eksupgrade.Approve(ctx, w.store, cluster, "alice", w.a.Clock().Now())
	require.ErrorIs(t, err, eksupgrade.ErrNoWorkflow)

	w.a.FailNextEKSUpdate(sim.EKSUpdateFailure{Cluster: cluster, Errors: []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeUnknown}}})
	require.Equal(t, state.WorkflowHalted, w.run(t, "run-1", upgrade()).Phase)
	wf, err := eksupgrade.Approve(ctx, w.store, cluster, "alice", w.a.Clock().Now())
	require.NoError(t, err, "already approved by the run's --approve")
	require.Equal(t, demo.UpgradeOperator, wf.ApprovedBy)

	_, err = eksupgrade.Approve(ctx, w.store, cluster, " ", w.a.Clock().Now())
	require.ErrorContains(t, err, "who approved")
}

func TestProgressLinesNameEveryTransition(t *testing.T) {
	w := newWorld(t)
	var out bytes.Buffer
	r := demo.AgentUpgradeRunner(w.agent, "run-1", &out)
	_, err := r.Run(context.Background(), upgrade())
	require.NoError(t, err)
	for _, want := range []string{"preflight passed", "plan approved by operator", "UpdateClusterVersion of demo-eks to 1.31: requested",
		"UpdateAddon kube-proxy of demo-eks to v1.31.2-eksbuild.3: update", "managed node group web handed over to the agent's managed-node-group rollout",
		"managed node group web: on Kubernetes 1.31, release " + demo.UpgradeReleaseTo,
		"self-managed node group demo-eks-nodes handed over", "upgrade of demo-eks to 1.31 completed"} {
		require.Contains(t, out.String(), want)
	}
}

func TestRenderShowsStepsChecksAndActions(t *testing.T) {
	w := newWorld(t)
	selfManaged(t, w.a, "pinned-nodes", map[string]string{model.TagParameter: providers.ParameterAuto, providers.TagKubernetesVersion: "1.30"})
	wf := w.run(t, "run-1", upgrade())
	var out bytes.Buffer
	eksupgrade.Render(&out, eksupgrade.NewSummary(wf, w.a.Clock().Now()), true)
	s := out.String()
	require.Contains(t, s, "EKS upgrade of demo-eks: 1.30 -> 1.31")
	require.Contains(t, s, "phase Completed")
	require.Regexp(t, `control-plane\s+demo-eks\s+1\.30\s+1\.31\s+Completed\s+`+wf.Steps[2].UpdateID+`\s+operator`, s)
	require.Contains(t, s, "CHECK")
	require.Contains(t, s, "Actions required:\n  - self-managed-nodegroup pinned-nodes: tag patch-agent/kubernetes-version=1.30 pins the AMI")
}

func TestCheckSkew(t *testing.T) {
	for _, tc := range []struct {
		node, controlPlane string
		ok                 bool
	}{
		{"1.31", "1.31", true},
		{"1.28", "1.31", true},
		{"1.27", "1.31", false},
		{"1.25", "1.27", true},  // before 1.28: two minors
		{"1.24", "1.27", false}, // before 1.28: not three
		{"1.32", "1.31", false}, // never newer
		{"", "1.31", false},
	} {
		err := eksupgrade.CheckSkew(tc.node, tc.controlPlane)
		require.Equal(t, tc.ok, err == nil, "%s under %s: %v", tc.node, tc.controlPlane, err)
	}
}
