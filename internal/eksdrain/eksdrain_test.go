package eksdrain_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// noJitter is the eviction backoff of these tests: 5 s doubling to 2 min.
var noJitter = eksdrain.Backoff{Base: 5 * time.Second, Cap: 2 * time.Minute}.Delay

type staticClients struct{ cs kubernetes.Interface }

func (s staticClients) ClientFor(context.Context, string) (kubernetes.Interface, error) {
	return s.cs, nil
}

// platform returns the EKS platform on the test's clientset, limited to the test's nodes.
func (k *kube) platform(clk *testingclock.FakeClock, opts eksdrain.Options) *providers.EKSPlatform {
	opts.NodeSelector, opts.Clock, opts.Backoff = "test="+k.label, clk, noJitter
	return providers.NewEKSPlatform(staticClients{k.cs}, opts)
}

const (
	idA = "i-0a1b2c3d4e5f60001"
	idB = "i-0a1b2c3d4e5f60002"
	idC = "i-0a1b2c3d4e5f60003"
	idD = "i-0a1b2c3d4e5f60004"
)

func TestParseProviderID(t *testing.T) {
	id, az, ok := eksdrain.ParseProviderID("aws:///us-west-2b/i-0123456789abcdef0")
	require.True(t, ok)
	require.Equal(t, "i-0123456789abcdef0", id)
	require.Equal(t, "us-west-2b", az)
	for _, bad := range []string{"", "gce://project/zone/name", "aws:///us-west-2b", "aws:///us-west-2b/fargate-ip-10-0-1-2", "eks-hybrid:///us-west-2/c/mi-0123"} {
		_, _, ok := eksdrain.ParseProviderID(bad)
		require.False(t, ok, bad)
	}
}

func TestBackoffDoublesUpToItsCap(t *testing.T) {
	b := eksdrain.Backoff{Base: 5 * time.Second, Cap: time.Minute}
	var got []time.Duration
	for i := 1; i <= 6; i++ {
		got = append(got, b.Delay(i))
	}
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, time.Minute}, got)
	j := eksdrain.Backoff{Base: 10 * time.Second, Cap: time.Minute, Jitter: 0.2}
	for range 50 {
		d := j.Delay(1)
		require.GreaterOrEqual(t, d, 8*time.Second)
		require.LessOrEqual(t, d, 12*time.Second)
	}
}

func TestObserveMapsProviderIDsToNodeStates(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	k := newKube(t, clk.Now)
	ctx := context.Background()
	ready := k.addNode(k.nodeName("ready"), "aws:///us-east-1a/"+idA, true)
	notReady := k.addNode(k.nodeName("notready"), "aws:///us-east-1b/"+idB, false)
	cordoned := k.addNode(k.nodeName("cordoned"), "aws:///us-east-1c/"+idC, true)
	k.addNode(k.nodeName("hybrid"), "eks-hybrid:///us-east-1/c/mi-0123456789abcdef0", true)
	require.NoError(t, eksdrain.New(k.cs, eksdrain.Options{}).Cordon(ctx, cordoned))

	nodes, err := k.platform(clk, eksdrain.Options{}).Observe(ctx, "c")
	require.NoError(t, err)
	require.Len(t, nodes, 3, "nodes without an AWS provider ID are not instances: %v", nodes)
	require.Equal(t, model.NodeState{Registered: true, Healthy: true, Name: ready.Name, Status: "Ready"}, nodes[idA])
	require.Equal(t, model.NodeState{Registered: true, Healthy: false, Name: notReady.Name, Status: "NotReady"}, nodes[idB])
	require.Equal(t, model.NodeState{Registered: true, Healthy: true, Draining: true, Name: cordoned.Name, Status: "Ready,SchedulingDisabled"}, nodes[idC])

	// With RequireDaemonSetsReady, a node whose DaemonSet pod is not Ready is not healthy yet.
	ds := k.addDaemonSet("node-agent")
	p := k.addPod("node-agent-a", ready.Name, ownedBy("DaemonSet", "node-agent", ds), labeled("app", "node-agent"))
	p.Status.Conditions[0].Status = "False"
	_, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(t, err)
	nodes, err = k.platform(clk, eksdrain.Options{RequireDaemonSetsReady: true}).Observe(ctx, "c")
	require.NoError(t, err)
	require.False(t, nodes[idA].Healthy, "DaemonSet pod not Ready")
	require.True(t, nodes[idC].Healthy)
}

func TestDrainEvictsDeploymentPodsIgnoresDaemonSetAndMirrorPodsAndLeavesOtherNodesAlone(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	k := newKube(t, clk.Now)
	ctx := context.Background()
	old := k.addNode(k.nodeName("old"), "aws:///us-east-1a/"+idA, true)
	other := k.addNode(k.nodeName("other"), "aws:///us-east-1b/"+idB, true)
	ds := k.addDaemonSet("node-agent")
	rs := ownedBy("ReplicaSet", "web-7c9d5b8f6d", "3f0c7c2e-0000-4000-8000-000000000001")
	k.addPod("web-1", old.Name, rs, labeled("app", "web"))
	k.addPod("web-2", old.Name, rs, labeled("app", "web"))
	k.addPod("web-3", other.Name, rs, labeled("app", "web"))
	k.addPod("node-agent-old", old.Name, ownedBy("DaemonSet", "node-agent", ds), labeled("app", "node-agent"))
	k.addPod("kube-proxy-old", old.Name, mirror())

	p := k.platform(clk, eksdrain.Options{})
	prog, err := p.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.False(t, prog.Drained, "a node that is not cordoned is not drained")

	require.NoError(t, p.StartDrain(ctx, "c", idA))
	require.Equal(t, 2, k.evict.Count(), "one eviction per Deployment pod, none for DaemonSet or mirror pods")
	nodes, err := p.Observe(ctx, "c")
	require.NoError(t, err)
	require.True(t, nodes[idA].Draining, "cordoned")
	require.False(t, nodes[idB].Draining)

	prog, err = p.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.False(t, prog.Drained)
	require.Equal(t, 2, prog.Remaining, "evicted pods still shutting down: %s", prog.Detail)
	require.Contains(t, prog.Detail, "2 shutting down")
	require.Equal(t, 2, k.evict.Count(), "pods already shutting down are not evicted again")

	require.Equal(t, 2, k.finishTerminating())
	prog, err = p.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.True(t, prog.Drained, prog.Detail)
	require.Zero(t, prog.Remaining)

	require.Nil(t, k.pod("web-1"))
	require.Nil(t, k.pod("web-2"))
	require.NotNil(t, k.pod("node-agent-old"), "DaemonSet pod stays")
	require.NotNil(t, k.pod("kube-proxy-old"), "mirror pod stays")
	web3 := k.pod("web-3")
	require.NotNil(t, web3, "pods on other nodes untouched")
	require.Nil(t, web3.DeletionTimestamp)
}

func TestEvictionRefusedWith429IsRetriedWithBackoffAndNeverInALoop(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	k := newKube(t, clk.Now)
	ctx := context.Background()
	old := k.addNode(k.nodeName("old"), "aws:///us-east-1a/"+idA, true)
	rs := ownedBy("ReplicaSet", "web-7c9d5b8f6d", "3f0c7c2e-0000-4000-8000-000000000002")
	k.addPod("web-1", old.Name, rs, labeled("app", "web"))
	k.addPod("web-2", old.Name, rs, labeled("app", "web"))
	k.addPDB("web", 2) // minAvailable == replicas: no disruption allowed

	p := k.platform(clk, eksdrain.Options{})
	require.NoError(t, p.StartDrain(ctx, "c", idA))
	require.Equal(t, 2, k.evict.Count(), "each pod asked once")

	look := func() model.DrainProgress {
		t.Helper()
		prog, err := p.DrainStatus(ctx, "c", idA)
		require.NoError(t, err)
		require.False(t, prog.Drained)
		return prog
	}
	prog := look()
	require.Equal(t, 2, k.evict.Count(), "no retry before the backoff passed")
	require.Contains(t, prog.Detail, "2 refused by a PodDisruptionBudget (429: Cannot evict pod as it would violate the pod's disruption budget.")
	require.Contains(t, prog.Detail, "next eviction retry in 5s")

	// The orchestrator looks every 5 s; retries come after 5 s, 10 s, 20 s ... per pod.
	var counts []int
	for range 12 {
		clk.Step(5 * time.Second)
		look()
		counts = append(counts, k.evict.Count())
	}
	require.Equal(t, []int{4, 4, 6, 6, 6, 6, 8, 8, 8, 8, 8, 8}, counts, "retried at +5s, +15s, +35s; next at +75s")
	times := k.evict.Times()
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second},
		[]time.Duration{times[2].Sub(times[0]), times[4].Sub(times[2]), times[6].Sub(times[4])}, "backoff doubles")

	// The disruption controller now allows one disruption: the next retry evicts one pod, the other waits.
	k.setPDBAllowed("web", 2, 1, 1)
	clk.Step(40 * time.Second)
	prog = look()
	require.Equal(t, 10, k.evict.Count())
	require.Contains(t, prog.Detail, "1 eviction(s) accepted now")
	require.Contains(t, prog.Detail, "1 refused by a PodDisruptionBudget")

	// Undrain (the deadline): the node serves again and the backoffs are forgotten.
	require.NoError(t, p.Undrain(ctx, "c", idA))
	d, err := p.Drainer(ctx, "c")
	require.NoError(t, err)
	require.Zero(t, d.RefusedEvictions(old.Name))
	nodes, err := p.Observe(ctx, "c")
	require.NoError(t, err)
	require.False(t, nodes[idA].Draining)
}

func TestPodsTheOptionsForbidEvictingBlockTheDrain(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	k := newKube(t, clk.Now)
	ctx := context.Background()
	old := k.addNode(k.nodeName("old"), "aws:///us-east-1a/"+idA, true)
	k.addPod("standalone", old.Name, labeled("app", "standalone"))
	k.addPod("cache", old.Name, ownedBy("ReplicaSet", "cache-5d8f", "3f0c7c2e-0000-4000-8000-000000000003"), withEmptyDir())

	p := k.platform(clk, eksdrain.Options{})
	require.NoError(t, p.StartDrain(ctx, "c", idA))
	prog, err := p.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.False(t, prog.Drained)
	require.Equal(t, 2, prog.Remaining)
	require.Zero(t, k.evict.Count())
	require.Contains(t, prog.Detail, "cannot delete Pods that declare no controller")
	require.Contains(t, prog.Detail, "cannot delete Pods with local storage")

	forced := k.platform(clk, eksdrain.Options{Force: true, DeleteEmptyDirData: true})
	prog, err = forced.DrainStatus(ctx, "c", idA)
	require.NoError(t, err)
	require.Equal(t, 2, k.evict.Count(), "evicted with --force and --delete-emptydir-data")
	require.Equal(t, 2, prog.Remaining)
}

func TestInstanceWithoutANodeHasNothingToDrain(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	k := newKube(t, clk.Now)
	ctx := context.Background()
	p := k.platform(clk, eksdrain.Options{})
	require.NoError(t, p.StartDrain(ctx, "c", idD))
	prog, err := p.DrainStatus(ctx, "c", idD)
	require.NoError(t, err)
	require.True(t, prog.Drained)
	require.Contains(t, prog.Detail, "no Kubernetes node")
	require.NoError(t, p.Undrain(ctx, "c", idD))
	d, err := p.Drainer(ctx, "c")
	require.NoError(t, err)
	_, err = d.Find(ctx, idD)
	require.ErrorIs(t, err, eksdrain.ErrNotRegistered)
}
