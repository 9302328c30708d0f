package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// EKSUpgradeScenario is the demo of `patch-agent eks upgrade` (`patch-agent demo --scenario eks-upgrade`): no
// AMI rollout, the version upgrade of a simulated EKS cluster.
const EKSUpgradeScenario = "eks-upgrade"

// The eks-upgrade demo's cluster: EKSCluster on UpgradeFrom, upgraded to UpgradeTo, with the add-ons vpc-cni,
// coredns and kube-proxy, managed node group UpgradeNodegroup, and self-managed node group EKSGroupName
// (patch-agent/ami-parameter=auto: it follows the control plane).
const (
	UpgradeFrom      = "1.30"
	UpgradeTo        = testworld.EKSVersion
	UpgradeNodegroup = "web"
	// UpgradeOperator is who runs and approves the demo's upgrade.
	UpgradeOperator = "operator"
)

// UpgradeStart is when the eks-upgrade demo's clock starts.
var UpgradeStart = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// UpgradeAddons are the demo's add-ons: for each, its version on UpgradeFrom (installed) and its default on
// UpgradeTo.
var UpgradeAddons = []struct{ Name, From, To string }{
	{"vpc-cni", "v1.18.3-eksbuild.1", "v1.19.0-eksbuild.1"},
	{"coredns", "v1.11.1-eksbuild.9", "v1.11.3-eksbuild.1"},
	{"kube-proxy", "v1.30.6-eksbuild.3", "v1.31.2-eksbuild.3"},
}

// EKSUpgradeDescription says what the eks-upgrade demo holds.
const EKSUpgradeDescription = "EKS cluster " + testworld.EKSCluster + " on Kubernetes " + UpgradeFrom + " with the managed add-ons vpc-cni, coredns and " +
	"kube-proxy, managed node group " + UpgradeNodegroup + " and self-managed node group " + testworld.EKSGroupName + " (AMI source auto), upgraded to " +
	UpgradeTo + ": preflight, approval, control plane, add-ons one at a time, node groups"

// The managed node group UpgradeNodegroup: its AMI type, its release on UpgradeFrom (its nodes on ImageA) and
// the release of UpgradeTo that its rollout moves it to (its image_id parameter is the one the self-managed node
// group's `auto` source resolves on UpgradeTo: UpgradeImage).
const (
	UpgradeNodegroupAMIType = "AL2023_ARM_64_STANDARD"
	UpgradeReleaseFrom      = "1.30.8-20261118"
	UpgradeReleaseTo        = "1.31.4-20261125"
)

// UpgradeImage is the AMI the Kubernetes UpgradeTo parameter of the self-managed node group names: its
// nodes are on it once the agent's rollout after the control plane's upgrade is Completed.
const UpgradeImage = testworld.ImageB

// EKSUpgradeWorld builds the eks-upgrade demo's world (clock at UpgradeStart): the agent's world of the
// self-managed node group EKSGroupName (3 nodes of cluster EKSCluster on UpgradeFrom, AMI source auto, a
// Deployment under a PodDisruptionBudget, the agent's launching and terminating hooks: rolled by instance
// refresh), the managed node group UpgradeNodegroup, and, on the account, the
// add-on catalog (each add-on's UpgradeFrom and UpgradeTo versions; kube-proxy's are each for one Kubernetes
// version only), the installed add-ons, upgrade insights that pass, and the public EKS-optimized AMI
// parameter of UpgradeTo (UpgradeImage), which the agent's `auto` source resolves once the control plane is
// there. Its store (World.Store) is store, or a new memory store when store is nil.
func EKSUpgradeWorld(store *state.Memory) (*testworld.World, error) {
	if store == nil {
		store = state.NewMemory()
	}
	w, err := testworld.Build(testworld.Spec{Policy: model.DefaultPolicy(), EKSVersion: UpgradeFrom, Store: store,
		Groups: []testworld.GroupSetup{{Name: testworld.EKSGroupName, Platform: model.PlatformEKS, Cluster: testworld.EKSCluster, Parameter: providers.ParameterAuto,
			Min: 3, Max: 4, Desired: 3}},
		KubeWorkload: kubesim.KubeWorkload{Replicas: 6, MinAvailable: 5},
		Nodegroups: []sim.EKSNodegroupSpec{{Cluster: testworld.EKSCluster, Name: UpgradeNodegroup, AMIType: UpgradeNodegroupAMIType,
			ReleaseVersion: UpgradeReleaseFrom, ImageID: testworld.ImageA, InstanceType: "m7g.large", Min: 2, Max: 4, Desired: 2,
			Tags: map[string]string{model.TagEnabled: "true"}}}})
	if err != nil {
		return nil, fmt.Errorf("building the eks-upgrade demo: %w", err)
	}
	a := w.Account
	for _, ad := range UpgradeAddons {
		from := sim.EKSAddonVersion{Addon: ad.Name, Version: ad.From, ClusterVersions: []string{"1.29", UpgradeFrom, UpgradeTo}, DefaultFor: []string{UpgradeFrom}}
		to := sim.EKSAddonVersion{Addon: ad.Name, Version: ad.To, ClusterVersions: []string{UpgradeFrom, UpgradeTo, "1.32"}, DefaultFor: []string{UpgradeTo}}
		if ad.Name == "kube-proxy" { // kube-proxy follows the Kubernetes minor version
			from.ClusterVersions, to.ClusterVersions = []string{UpgradeFrom}, []string{UpgradeTo}
		}
		a.PublishEKSAddonVersion(from)
		a.PublishEKSAddonVersion(to)
		if err := a.InstallEKSAddon(testworld.EKSCluster, ad.Name, ad.From); err != nil {
			return nil, fmt.Errorf("building the eks-upgrade demo: %w", err)
		}
	}
	for _, name := range []string{"Deprecated APIs removed in Kubernetes v" + UpgradeTo, "Kubelet version skew", "EKS add-on version compatibility",
		"Cluster health issues"} {
		a.AddEKSInsight(testworld.EKSCluster, sim.EKSInsightSpec{Name: name, KubernetesVersion: UpgradeTo, Status: ekstypes.InsightStatusValuePassing,
			Reason: "no issue found"})
	}
	// The EKS-optimized AMI releases of the managed node group's AMI type: its own on UpgradeFrom, and the one
	// of UpgradeTo that the agent's managed-node-group rollout moves it to once the control plane is there.
	for _, rel := range []sim.EKSRelease{
		{AMIType: UpgradeNodegroupAMIType, KubernetesVersion: UpgradeFrom, Release: UpgradeReleaseFrom, ImageID: testworld.ImageA},
		{AMIType: UpgradeNodegroupAMIType, KubernetesVersion: UpgradeTo, Release: UpgradeReleaseTo, ImageID: UpgradeImage},
	} {
		if !a.ImageRegistered(rel.ImageID) {
			a.RegisterImage(sim.ImageSpec{ID: rel.ImageID, Name: "amazon-eks-node-al2023-arm64-standard-" + rel.Release, Architecture: "arm64",
				Created: UpgradeStart.Add(-72 * time.Hour)})
		}
		a.PublishEKSRelease(withReleaseParams(rel))
	}
	param, err := UpgradeParameter(w)
	if err != nil {
		return nil, fmt.Errorf("building the eks-upgrade demo: %w", err)
	}
	w.RegisterImage(UpgradeImage, true)
	a.PutParameter(param, UpgradeImage)
	return w, nil
}

// UpgradeParameter is the public AMI parameter the self-managed node group's `auto` source resolves to once
// the control plane is on UpgradeTo.
func UpgradeParameter(w *testworld.World) (string, error) {
	return testworld.AutoParameter(context.Background(), w, UpgradeTo, "m7g.large", nil)
}

// EKSUpgradeAccount returns the account of a new EKSUpgradeWorld (without its agent: the self-managed node
// group's rollout then never happens).
func EKSUpgradeAccount() (*sim.Account, error) {
	w, err := EKSUpgradeWorld(nil)
	if err != nil {
		return nil, err
	}
	return w.Account, nil
}

// AgentUpgradeRunner returns UpgradeRunner on the world's account and store whose waits run the agent: each
// wait of d is agent iterations of at most agentTick each (World.Step), so the self-managed node group's
// rollout moves while the workflow waits for it, as the agent's service does beside `patch-agent eks upgrade`.
func AgentUpgradeRunner(w *testworld.World, owner string, out io.Writer) *eksupgrade.Runner {
	r := UpgradeRunner(w.Account, w.Store.(eksupgrade.Store), owner, out)
	r.Wait = w.RunFor
	return r
}

// UpgradeRunner returns a workflow runner on the account: its fake clock, waits that move the clock, a
// backoff without jitter and numbered ClientRequestTokens, so every run prints the same lines.
func UpgradeRunner(a *sim.Account, store eksupgrade.Store, owner string, out io.Writer) *eksupgrade.Runner {
	n := 0
	return &eksupgrade.Runner{
		EKS: a.EKSUpgrade(), AutoScaling: a.AutoScaling(), Store: store, Clock: a.Clock(),
		Wait: func(ctx context.Context, d time.Duration) error {
			a.Advance(d)
			return ctx.Err()
		},
		Backoff: eksdrain.Backoff{Base: 15 * time.Second, Cap: time.Minute}.Delay,
		Owner:   owner, Who: UpgradeOperator, Out: out,
		NewToken: func() string {
			n++
			return fmt.Sprintf("patch-agent-%s-%03d", owner, n)
		},
	}
}

// EKSUpgradeSummary is what `patch-agent demo --scenario eks-upgrade --json` prints: the workflow's summary,
// the EKS updates it started and how long it took in simulated time.
type EKSUpgradeSummary struct {
	Scenario string `json:"scenario"`
	eksupgrade.Summary
	// Updates counts the EKS updates started (control plane, add-ons, managed node groups).
	Updates          int     `json:"updates"`
	HistoryEntries   int     `json:"historyEntries"`
	SimulatedSeconds float64 `json:"simulatedSeconds"`
}

// RunEKSUpgrade plays the eks-upgrade demo with the real workflow: a first `patch-agent eks upgrade` runs the
// preflight and waits for its approval, `patch-agent approve eks:<cluster>` approves, and a second run carries
// the workflow to its end. Progress lines go to out (nil: none); store (nil: a new memory store) keeps the
// workflow and its history.
func RunEKSUpgrade(ctx context.Context, out io.Writer, store *state.Memory) (EKSUpgradeSummary, error) {
	if store == nil {
		store = state.NewMemory()
	}
	world, err := EKSUpgradeWorld(store)
	if err != nil {
		return EKSUpgradeSummary{}, err
	}
	a := world.Account
	say := func(format string, args ...any) {
		if out != nil {
			writeWrapped(out, a.Clock().Now().UTC().Format(time.RFC3339)+"  ", fmt.Sprintf(format, args...), "")
		}
	}
	say("demo: %s", EKSUpgradeDescription)
	req := eksupgrade.Request{Cluster: testworld.EKSCluster, To: UpgradeTo}
	say("operator: patch-agent eks upgrade --cluster %s --to %s", testworld.EKSCluster, UpgradeTo)
	w, err := AgentUpgradeRunner(world, "run-1", out).Run(ctx, req)
	if err != nil {
		return EKSUpgradeSummary{}, err
	}
	if w.Phase == state.WorkflowWaiting {
		a.Advance(10 * time.Minute) // the operator reads the plan
		say("operator: patch-agent approve %s", eksupgrade.Subject(testworld.EKSCluster))
		if _, err := eksupgrade.Approve(ctx, store, testworld.EKSCluster, UpgradeOperator, a.Clock().Now()); err != nil {
			return EKSUpgradeSummary{}, err
		}
		say("operator: patch-agent eks upgrade --cluster %s --to %s", testworld.EKSCluster, UpgradeTo)
		if w, err = AgentUpgradeRunner(world, "run-2", out).Run(ctx, req); err != nil {
			return EKSUpgradeSummary{}, err
		}
	}
	if ro, err := store.GetRollout(ctx, testworld.EKSGroupName); err == nil {
		say("agent: rollout of %s %s: %d/%d node(s) on %s", testworld.EKSGroupName, ro.Phase, ro.OnTarget, ro.Instances, ro.TargetImageID)
	}
	hist, err := store.History(ctx, eksupgrade.Subject(testworld.EKSCluster))
	if err != nil {
		return EKSUpgradeSummary{}, err
	}
	return EKSUpgradeSummary{Scenario: EKSUpgradeScenario, Summary: eksupgrade.NewSummary(w, a.Clock().Now()),
		Updates: len(a.EKSUpdates(testworld.EKSCluster)), HistoryEntries: len(hist),
		SimulatedSeconds: a.Clock().Since(UpgradeStart).Seconds()}, nil
}
