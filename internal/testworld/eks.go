package testworld

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// Names of the demo's EKS self-managed node group: its instances join cluster EKSCluster (control plane at
// EKSVersion), its AMI source is `auto` (the EKS-optimized AL2023 AMI of the cluster's version for the
// architecture of its instance type), and it runs Deployment "web" (6 pods) under a PodDisruptionBudget
// minAvailable 5, and DaemonSet "node-agent".
const (
	EKSCluster   = "demo-eks"
	EKSGroupName = "demo-eks-nodes"
	EKSVersion   = "1.31"
)

// demoEvictionBackoff is the eviction retry backoff of the demo's EKS drains: without jitter, so every run
// prints the same lines.
var demoEvictionBackoff = eksdrain.Backoff{Base: 5 * time.Second, Cap: 2 * time.Minute}.Delay

// agentSettings returns the settings of a new agent incarnation: the world's settings with a fresh EKS
// platform and AMI source resolver (their caches live in the agent process), the platform's calls fused
// when fuse is given.
func (w *World) agentSettings(fuse *Fuse) agent.Settings {
	s := w.settings
	if w.Kube == nil {
		return s
	}
	clk := w.Account.Clock()
	var platform model.Platform = providers.NewEKSPlatform(staticKube{w.Kube.Client},
		eksdrain.Options{Clock: clk, Backoff: demoEvictionBackoff})
	if fuse != nil {
		platform = fusedPlatform{api: platform, f: fuse}
	}
	platforms := model.Platforms{}
	for name, p := range s.Platforms {
		platforms[name] = p
	}
	platforms[model.PlatformEKS] = platform
	s.Platforms = platforms
	var eksAPI, typesAPI = w.Account.EKS(), w.Account.EC2InstanceTypes()
	if w.faults != nil {
		eksAPI, typesAPI = w.faults.EKS(eksAPI), w.faults.EC2InstanceTypes(typesAPI)
	}
	s.Sources = append(append([]providers.SourceResolver(nil), s.Sources...), &providers.EKSSources{
		Clusters:      &eks.Clusters{API: eksAPI, Clock: clk},
		Architectures: &eks.Architectures{API: typesAPI},
		EC2:           w.Clients.EC2,
	})
	return s
}

// syncKube lets the simulated Kubernetes side catch up with the account (no-op without EKS groups).
func (w *World) SyncKube(ctx context.Context) error {
	if w.Kube == nil {
		return nil
	}
	if err := w.Kube.Sync(ctx, false); err != nil {
		return fmt.Errorf("simulated Kubernetes: %w", err)
	}
	return nil
}

// EKSParameter returns the public AMI parameter an EKS group's `auto` source resolves to ("" for other
// groups).
func (w *World) EKSParameter(group string) string { return w.eksParams[group] }

// autoParameter returns the parameter the agent derives for an `auto` EKS group: the AMI of the tagged
// family (default AL2023) for the cluster's (or the pinned) version and the architecture of the group's
// instance type. A group whose source cannot be built (the agent refuses it) gets an error.
func AutoParameter(ctx context.Context, w *World, version, instanceType string, tags map[string]string) (string, error) {
	arch := tags[providers.TagArchitecture]
	if arch == "" {
		var err error
		if arch, err = (&eks.Architectures{API: w.Account.EC2InstanceTypes()}).For(ctx, []string{instanceType}); err != nil {
			return "", err
		}
	}
	if v, ok := tags[providers.TagKubernetesVersion]; ok {
		version = v
	}
	family := tags[providers.TagAMIFamily]
	if family == "" {
		family = eks.FamilyAL2023
	}
	return eks.ParameterPath(family, version, arch)
}

// staticKube serves one Kubernetes API for every cluster (providers.KubeClients).
type staticKube struct{ client kubernetes.Interface }

func (s staticKube) ClientFor(context.Context, string) (kubernetes.Interface, error) {
	return s.client, nil
}
