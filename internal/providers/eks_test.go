package providers_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// ssmRecorder records every parameter name the agent asks for.
type ssmRecorder struct {
	awsapi.SSM
	mu    sync.Mutex
	names map[string]int
}

func (r *ssmRecorder) GetParameters(ctx context.Context, in *ssm.GetParametersInput, o ...func(*ssm.Options)) (*ssm.GetParametersOutput, error) {
	r.mu.Lock()
	for _, n := range in.Names {
		r.names[n]++
	}
	r.mu.Unlock()
	return r.SSM.GetParameters(ctx, in, o...)
}

func (r *ssmRecorder) asked() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.names {
		out[k] = v
	}
	return out
}

// eksWorld builds a world with one EKS group "nodes" of cluster "c1" (control plane at controlPlane) whose
// AMI source is param, plus tags.
func eksWorld(t *testing.T, controlPlane, param, instanceType string, tags map[string]string) (*testworld.World, *ssmRecorder) {
	t.Helper()
	rec := &ssmRecorder{names: map[string]int{}}
	spec := testworld.Spec{EKSVersion: controlPlane,
		Groups: []testworld.GroupSetup{{Name: "nodes", Platform: model.PlatformEKS, Cluster: "c1", Parameter: param,
			InstanceType: instanceType, Min: 2, Max: 4, Desired: 2, Tags: tags}},
		KubeWorkload: kubesim.KubeWorkload{Replicas: 2},
		Wrap: func(c agent.Clients) agent.Clients {
			rec.SSM = c.SSM
			c.SSM = rec
			return c
		}}
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	if controlPlane == "" {
		w.Account.SetEKSClusterVersion("c1", "") // DescribeCluster without a version
	}
	return w, rec
}

// sources returns the EKS source resolver on the world's account.
func sources(w *testworld.World) *providers.EKSSources {
	return &providers.EKSSources{Clusters: &eks.Clusters{API: w.Account.EKS(), Clock: w.Account.Clock()},
		Architectures: &eks.Architectures{API: w.Account.EC2InstanceTypes()}, EC2: w.Account.EC2()}
}

func discover(t *testing.T, w *testworld.World) providers.Discovered {
	t.Helper()
	d, err := providers.Discover(context.Background(), w.Account.AutoScaling(), sources(w))
	require.NoError(t, err)
	return d
}

func TestAutoSourceIsTheEKSOptimizedAMIOfTheControlPlaneVersionAndTheInstanceArchitecture(t *testing.T) {
	cases := []struct {
		name, instanceType string
		tags               map[string]string
		want               string
	}{
		{"graviton default al2023", "m7g.large", nil, "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/recommended/image_id"},
		{"x86 default al2023", "m5.large", nil, "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id"},
		{"bottlerocket", "m5.large", map[string]string{providers.TagAMIFamily: "bottlerocket"}, "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/latest/image_id"},
		{"al2 arm64", "c7g.large", map[string]string{providers.TagAMIFamily: "al2"}, "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id"},
		{"pinned older version", "m5.large", map[string]string{providers.TagKubernetesVersion: "1.29"}, "/aws/service/eks/optimized-ami/1.29/amazon-linux-2023/x86_64/standard/recommended/image_id"},
		{"architecture tag", "m5.large", map[string]string{providers.TagArchitecture: "arm64"}, "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/arm64/standard/recommended/image_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, _ := eksWorld(t, "1.30", providers.ParameterAuto, c.instanceType, c.tags)
			d := discover(t, w)
			require.Empty(t, d.Misconfigured)
			require.Equal(t, c.want, d.Targets["nodes"].Parameter)
		})
	}
}

func TestAutoSourceReadsTheInstanceTypeOfTheLaunchTemplateWhenTheGroupIsEmpty(t *testing.T) {
	rec := &ssmRecorder{names: map[string]int{}}
	w, err := testworld.Build(testworld.Spec{EKSVersion: "1.31", Groups: []testworld.GroupSetup{{Name: "nodes", Platform: model.PlatformEKS,
		Cluster: "c1", Parameter: providers.ParameterAuto, InstanceType: "m6i.large", Min: 0, Max: 2, Desired: 0}},
		Wrap: func(c agent.Clients) agent.Clients { rec.SSM = c.SSM; c.SSM = rec; return c }})
	require.NoError(t, err)
	d := discover(t, w)
	require.Empty(t, d.Misconfigured)
	require.Equal(t, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id", d.Targets["nodes"].Parameter)
}

func TestAutoSourceFollowsAControlPlaneUpgrade(t *testing.T) {
	w, _ := eksWorld(t, "1.30", providers.ParameterAuto, "m5.large", nil)
	src := sources(w)
	d, err := providers.Discover(context.Background(), w.Account.AutoScaling(), src)
	require.NoError(t, err)
	require.Contains(t, d.Targets["nodes"].Parameter, "/1.30/")
	w.Account.SetEKSClusterVersion("c1", "1.31")
	w.Account.Advance(eks.DefaultClusterTTL)
	d, err = providers.Discover(context.Background(), w.Account.AutoScaling(), src)
	require.NoError(t, err)
	require.Contains(t, d.Targets["nodes"].Parameter, "/1.31/", "the cluster is described again after its TTL")
}

// Field case C12 (../shared/CASES.md).
func TestC12ControlPlane130WithAParameterNaming131IsRefused(t *testing.T) {
	for name, c := range map[string]struct {
		param string
		tags  map[string]string
		want  string
	}{
		"explicit parameter": {param: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id",
			want: "node AMI for Kubernetes 1.31, control plane at 1.30"},
		"explicit bottlerocket parameter": {param: "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id",
			want: "node AMI for Kubernetes 1.31, control plane at 1.30"},
		"pinned version": {param: providers.ParameterAuto, tags: map[string]string{providers.TagKubernetesVersion: "1.31"},
			want: "tag patch-agent/kubernetes-version=1.31 on EKS cluster c1: node AMI for Kubernetes 1.31, control plane at 1.30"},
	} {
		t.Run(name, func(t *testing.T) {
			w, rec := eksWorld(t, "1.30", c.param, "m5.large", c.tags)
			d := discover(t, w)
			require.ErrorIs(t, d.Misconfigured["nodes"], eks.ErrNodeNewerThanControlPlane)
			require.ErrorContains(t, d.Misconfigured["nodes"], c.want)
			require.NotContains(t, d.Targets, "nodes")
			requireNeverRolled(t, w, rec, c.param)
		})
	}
}

// Field case C12 (../shared/CASES.md).
func TestC12MissingVersionIsAConfigErrorAtDiscoveryNotARuntimeLoop(t *testing.T) {
	for name, c := range map[string]struct {
		controlPlane, param string
		tags                map[string]string
		want                string
	}{
		"control plane reports no version": {controlPlane: "", param: providers.ParameterAuto,
			want: `EKS cluster c1 reports Kubernetes version "": not a Kubernetes version`},
		"pinned version undefined": {controlPlane: "1.30", param: providers.ParameterAuto, tags: map[string]string{providers.TagKubernetesVersion: "undefined"},
			want: `tag patch-agent/kubernetes-version: "undefined": not a Kubernetes version`},
		"pinned version empty": {controlPlane: "1.30", param: providers.ParameterAuto, tags: map[string]string{providers.TagKubernetesVersion: ""},
			want: `tag patch-agent/kubernetes-version: "": not a Kubernetes version`},
		"path with undefined version": {controlPlane: "1.30", param: "/aws/service/eks/optimized-ami/undefined/amazon-linux-2023/x86_64/standard/recommended/image_id",
			want: `the Kubernetes version in the path is "undefined": not a Kubernetes version`},
		"path with empty version": {controlPlane: "1.30", param: "/aws/service/bottlerocket/aws-k8s-/x86_64/latest/image_id",
			want: `the Kubernetes version in the path is "": not a Kubernetes version`},
		"unknown family": {controlPlane: "1.30", param: providers.ParameterAuto, tags: map[string]string{providers.TagAMIFamily: "ubuntu"},
			want: `unknown AMI family "ubuntu"`},
	} {
		t.Run(name, func(t *testing.T) {
			w, rec := eksWorld(t, c.controlPlane, c.param, "m5.large", c.tags)
			d := discover(t, w)
			require.ErrorContains(t, d.Misconfigured["nodes"], c.want)
			require.ErrorContains(t, d.Misconfigured["nodes"], "group nodes is opted in but misconfigured")
			requireNeverRolled(t, w, rec, c.param)
		})
	}
}

func TestAutoSourceWithoutAResolverIsMisconfigured(t *testing.T) {
	w, _ := eksWorld(t, "1.30", providers.ParameterAuto, "m5.large", nil)
	d, err := providers.Discover(context.Background(), w.Account.AutoScaling())
	require.NoError(t, err)
	require.ErrorContains(t, d.Misconfigured["nodes"], "tag patch-agent/ami-parameter=auto is not resolved for platform eks")
}

// requireNeverRolled publishes a new AMI on the group's refused parameter (when it names one) and runs the
// agent for an hour of ticks: the misconfigured group is skipped at every discovery — its source is never resolved, no rollout starts, nothing of it is touched — and DescribeCluster
// is not called on every tick.
func requireNeverRolled(t *testing.T, w *testworld.World, rec *ssmRecorder, param string) {
	t.Helper()
	ctx := context.Background()
	if param != providers.ParameterAuto {
		w.PublishPublicAMI(param, testworld.ImageB) // a new AMI on the refused path, and a scheduled tick
	}
	w.Account.ResetCalls()
	for range 720 {
		require.NoError(t, w.Step(ctx, 5*time.Second))
	}
	r, err := w.Store.GetRollout(ctx, "nodes")
	require.NoError(t, err, "status says why the misconfigured group is not rolled")
	require.Equal(t, state.PhaseHalted, r.Phase)
	require.Contains(t, r.Reason, "not rolled: group nodes is opted in but misconfigured")
	require.Empty(t, r.TargetImageID, "no rollout started for a misconfigured group")
	for name := range rec.asked() {
		require.NotContains(t, name, "undefined")
		require.NotContains(t, name, "/1.31/", "a node AMI newer than the control plane is never even resolved")
		require.NotEqual(t, providers.ParameterAuto, name)
	}
	calls := w.Account.Calls()
	require.Zero(t, calls["autoscaling:SetDesiredCapacity"]+calls["autoscaling:UpdateAutoScalingGroup"]+calls["autoscaling:TerminateInstanceInAutoScalingGroup"])
	require.LessOrEqual(t, calls["eks:DescribeCluster"], 13, "described once per cache TTL, not per tick")
	require.Empty(t, w.Checker.Finish())
}
