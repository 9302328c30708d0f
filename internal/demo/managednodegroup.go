package demo

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// ManagedNodegroupScenario is `patch-agent demo --scenario managed-node-group`: an EKS managed
// node group opted in by its tags follows a new EKS-optimized AMI release. The agent runs its gates, sends one
// UpdateNodegroupVersion with the new release and follows it through DescribeUpdate while EKS replaces the
// nodes; the node group's own Auto Scaling group is never touched by the agent.
const ManagedNodegroupScenario = "managed-node-group"

// ManagedNodegroupDescription says what the demo shows.
const ManagedNodegroupDescription = "an EKS managed node group (AL2023, 3 nodes) follows a new AMI release: one UpdateNodegroupVersion, EKS replaces the nodes"

// The demo's node group and releases.
const (
	MNGCluster    = "demo-eks"
	MNGName       = "workers"
	MNGVersion    = "1.31"
	MNGAMIType    = "AL2023_x86_64_STANDARD"
	MNGReleaseOld = "1.31.7-20261101"
	MNGReleaseNew = "1.31.7-20261129"
	MNGImageOld   = "ami-0e5a1b2c3d4e5f601"
	MNGImageNew   = "ami-0e5a1b2c3d4e5f602"
)

// ManagedNodegroupSummary is what the demo ends with.
type ManagedNodegroupSummary struct {
	Scenario       string `json:"scenario"`
	Phase          string `json:"phase"`
	Reason         string `json:"reason,omitempty"`
	ReleaseVersion string `json:"releaseVersion"`
	// Nodes are the AMIs of the node group's in-service nodes at the end.
	Nodes []string `json:"nodes"`
	// Updates counts UpdateNodegroupVersion updates; AgentGroupCalls the agent's mutating Auto Scaling calls (0).
	Updates          int     `json:"updates"`
	AgentGroupCalls  int     `json:"agentGroupCalls"`
	HistoryEntries   int     `json:"historyEntries"`
	SimulatedSeconds float64 `json:"simulatedSeconds"`
}

// RunManagedNodegroup plays the demo with the real agent (agent.Agent.Reconcile on a simulated clock) and returns
// its summary. Progress lines go to out (nil: none); store (nil: a new memory store) keeps the rollout.
func RunManagedNodegroup(ctx context.Context, out io.Writer, store *state.Memory) (ManagedNodegroupSummary, error) {
	if store == nil {
		store = state.NewMemory()
	}
	start := time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	a := sim.New(clk, sim.Options{})
	a.CreateEKSCluster(MNGCluster, MNGVersion)
	for _, id := range []string{MNGImageOld, MNGImageNew} {
		a.RegisterImage(sim.ImageSpec{ID: id, Name: "amazon-eks-node-al2023-x86_64-standard-1.31-" + id[len(id)-2:], Created: start.AddDate(0, 0, -3)})
	}
	a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: MNGAMIType, KubernetesVersion: MNGVersion, Release: MNGReleaseOld, ImageID: MNGImageOld}))
	group, err := a.CreateEKSNodegroup(sim.EKSNodegroupSpec{Cluster: MNGCluster, Name: MNGName, AMIType: MNGAMIType, ReleaseVersion: MNGReleaseOld,
		ImageID: MNGImageOld, InstanceType: "m5.large", Min: 3, Max: 6, Desired: 3, Tags: map[string]string{model.TagEnabled: "true"}})
	if err != nil {
		return ManagedNodegroupSummary{}, err
	}
	say := func(format string, args ...any) {
		if out != nil {
			writeWrapped(out, clk.Now().UTC().Format(time.RFC3339)+"  ", fmt.Sprintf(format, args...), "")
		}
	}
	say("demo: %s", ManagedNodegroupDescription)
	ag := agent.New(agent.Clients{AutoScaling: a.AutoScaling(), EC2: a.EC2(), ECS: a.ECS(), SSM: a.SSM(), SQS: a.SQS(),
		CloudWatch: a.CloudWatch(), InstanceTypes: a.EC2InstanceTypes(), EKSNodegroups: a.EKSNodegroups()},
		agent.Settings{ReconcileInterval: 15 * time.Second, PollInterval: time.Minute, Policy: model.DefaultPolicy(), AccountID: a.Options().AccountID},
		store, clk, zap.NewNop())
	key := model.NodegroupKey(MNGCluster, MNGName)
	var r state.Rollout
	last := ""
	published := false
	for range 400 {
		if err := ag.Reconcile(ctx); err != nil {
			return ManagedNodegroupSummary{}, err
		}
		if r, err = store.GetRollout(ctx, key); err != nil && err != state.ErrNotFound {
			return ManagedNodegroupSummary{}, err
		}
		if line := strings.TrimSpace(fmt.Sprintf("%s %s", state.PositionOf(r), r.Reason)); r.Group != "" && line != last {
			say("%s: %s", key, line)
			last = line
		}
		if !published && r.Phase == state.PhaseIdle {
			say("EKS publishes release %s (%s) for %s", MNGReleaseNew, MNGImageNew, MNGAMIType)
			a.PublishEKSRelease(withReleaseParams(sim.EKSRelease{AMIType: MNGAMIType, KubernetesVersion: MNGVersion, Release: MNGReleaseNew, ImageID: MNGImageNew}))
			published = true
		}
		if published && (r.Phase == state.PhaseCompleted || r.Phase == state.PhaseHalted || r.Phase == state.PhaseRolledBack) {
			break
		}
		a.Advance(15 * time.Second)
	}
	s := ManagedNodegroupSummary{Scenario: ManagedNodegroupScenario, Phase: string(r.Phase), Reason: r.Reason, SimulatedSeconds: clk.Since(start).Seconds()}
	if ng, ok := a.EKSNodegroup(MNGCluster, MNGName); ok {
		s.ReleaseVersion = ng.ReleaseVersion
	}
	for _, i := range a.Group(group).Instances {
		if i.LifecycleState == "InService" {
			s.Nodes = append(s.Nodes, i.ImageID)
		}
	}
	for _, u := range a.EKSUpdates(MNGCluster) {
		if u.Nodegroup == MNGName {
			s.Updates++
		}
	}
	c := a.Calls()
	for _, op := range []string{"autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup", "autoscaling:TerminateInstanceInAutoScalingGroup",
		"autoscaling:CompleteLifecycleAction", "autoscaling:SetInstanceProtection"} {
		s.AgentGroupCalls += c[op]
	}
	hist, err := store.History(ctx, key)
	if err != nil {
		return ManagedNodegroupSummary{}, err
	}
	s.HistoryEntries = len(hist)
	say("%s ended %s on release %s: %d node(s) on %v, %d EKS update(s), %d Auto Scaling change(s) by the agent",
		key, s.Phase, s.ReleaseVersion, len(s.Nodes), s.Nodes, s.Updates, s.AgentGroupCalls)
	return s, nil
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
