package eksupgrade_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/eksupgrade"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

// kube is the cluster's Kubernetes API (client-go's fake clientset) with a minimal workload controller: an
// update that changes a Deployment's, DaemonSet's or StatefulSet's pod template starts a rollout (generation
// bumped, counted in rollouts), which finishes (status at the spec) only when the workflow waits. fuse, when
// set, kills every call of a crashed incarnation and counts updates as effects.
type kube struct {
	*fake.Clientset
	mu       sync.Mutex
	rollouts map[string]int // "Kind ns/name" -> rollouts started
	pending  map[string]schema.GroupVersionResource
	fuse     *fuse
}

var (
	deploymentsGVR  = appsv1.SchemeGroupVersion.WithResource("deployments")
	daemonSetsGVR   = appsv1.SchemeGroupVersion.WithResource("daemonsets")
	statefulSetsGVR = appsv1.SchemeGroupVersion.WithResource("statefulsets")
)

func newKube(objs ...runtime.Object) *kube {
	k := &kube{Clientset: fake.NewClientset(objs...), rollouts: map[string]int{}, pending: map[string]schema.GroupVersionResource{}}
	k.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		k.mu.Lock()
		f := k.fuse
		k.mu.Unlock()
		if f == nil {
			return false, nil, nil
		}
		if err := f.before(); err != nil {
			return true, nil, err
		}
		if a.GetVerb() != "update" {
			return false, nil, nil
		}
		obj, err := k.update(a.(k8stesting.UpdateAction))
		if err = f.after(err); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	k.PrependReactor("update", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		k.mu.Lock()
		f := k.fuse
		k.mu.Unlock()
		if f != nil {
			return false, nil, nil // the fuse's reactor updates
		}
		obj, err := k.update(a.(k8stesting.UpdateAction))
		return true, obj, err
	})
	return k
}

func template(obj runtime.Object) (*corev1.PodTemplateSpec, *metav1.ObjectMeta, string) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template, &o.ObjectMeta, "Deployment"
	case *appsv1.DaemonSet:
		return &o.Spec.Template, &o.ObjectMeta, "DaemonSet"
	case *appsv1.StatefulSet:
		return &o.Spec.Template, &o.ObjectMeta, "StatefulSet"
	}
	return nil, nil, ""
}

// update stores an update as the API server would, and starts a rollout when the pod template changed.
func (k *kube) update(a k8stesting.UpdateAction) (runtime.Object, error) {
	obj := a.GetObject().DeepCopyObject()
	gvr, ns := a.GetResource(), a.GetNamespace()
	if t, meta, kind := template(obj); t != nil {
		old, err := k.Tracker().Get(gvr, ns, meta.Name)
		if err != nil {
			return nil, err
		}
		ot, om, _ := template(old)
		meta.Generation = om.Generation
		if !reflect.DeepEqual(ot, t) {
			meta.Generation++
			key := kind + " " + ns + "/" + meta.Name
			k.mu.Lock()
			k.rollouts[key]++
			k.pending[ns+"/"+meta.Name] = gvr
			k.mu.Unlock()
		}
	}
	return obj, k.Tracker().Update(gvr, obj, ns)
}

// settle finishes every rollout under way: the controller has replaced the pods.
func (k *kube) settle() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, gvr := range k.pending {
		ns, name, _ := strings.Cut(key, "/")
		obj, err := k.Tracker().Get(gvr, ns, name)
		if err != nil {
			continue
		}
		obj = obj.DeepCopyObject()
		rolled(obj)
		_ = k.Tracker().Update(gvr, obj, ns)
		delete(k.pending, key)
	}
}

// rolled sets a workload's status to "every pod updated and available".
func rolled(obj runtime.Object) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		n := *o.Spec.Replicas
		o.Status = appsv1.DeploymentStatus{ObservedGeneration: o.Generation, Replicas: n, UpdatedReplicas: n, AvailableReplicas: n, ReadyReplicas: n}
	case *appsv1.DaemonSet:
		o.Status = appsv1.DaemonSetStatus{ObservedGeneration: o.Generation, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3, NumberReady: 3}
	case *appsv1.StatefulSet:
		n := *o.Spec.Replicas
		o.Status = appsv1.StatefulSetStatus{ObservedGeneration: o.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, CurrentRevision: "r1", UpdateRevision: "r1"}
	}
}

func (k *kube) setFuse(f *fuse) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.fuse = f
}

// kubeRunner is w's runner with Kubernetes access; its waits also let the controller finish rollouts.
func (w *world) kubeRunner(owner string, k *kube) *eksupgrade.Runner {
	r := w.runner(owner)
	r.Kube = k
	wait := r.Wait
	r.Wait = func(ctx context.Context, d time.Duration) error {
		k.settle()
		return wait(ctx, d)
	}
	return r
}

const fargateNS = "apps"

// fargateWorkload is Deployment apps/web, whose one pod runs on Fargate node fargate-ip-10-0-1-1 with kubelet
// kubelet ("v1.30.7-eks-1234"), through its ReplicaSet.
func fargateWorkload(kubelet string) []runtime.Object {
	labels := map[string]string{"app": "web"}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: fargateNS, Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: aws.Int32(1), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "public.ecr.aws/nginx/nginx:1.27"}}}}}}
	rolled(d)
	yes := true
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f", Namespace: fargateNS,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Controller: &yes}}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "fargate-ip-10-0-1-1.ec2.internal", Labels: map[string]string{eksupgrade.LabelComputeType: "fargate"}},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: kubelet}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-7d9f-abcde", Namespace: fargateNS, Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node.Name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	ec2Node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "ip-10-0-2-2.ec2.internal"},
		Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.29.10-eks-1"}}} // not Fargate: not its check
	return []runtime.Object{d, rs, node, pod, ec2Node}
}

func fargateWorld(t *testing.T) *world {
	t.Helper()
	w := newWorld(t)
	require.NoError(t, w.a.AddEKSFargateProfile(sim.EKSFargateProfileSpec{Cluster: cluster, Name: "fp-apps", Selectors: map[string]map[string]string{fargateNS: nil}}))
	return w
}

func deploymentOf(t *testing.T, k *kube, ns, name string) *appsv1.Deployment {
	t.Helper()
	d, err := k.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return d
}

func TestFargatePodOnAKubeletBehindTheControlPlaneFailsThePreflightAndNothingMoves(t *testing.T) {
	w := fargateWorld(t)
	k := newKube(fargateWorkload("v1.29.10-eks-1234")...)
	wf, err := w.kubeRunner("run-1", k).Run(context.Background(), upgrade())
	require.NoError(t, err)

	require.Equal(t, state.WorkflowHalted, wf.Phase)
	c := checkOf(wf, "fargate pods")
	require.Equal(t, eksupgrade.CheckFail, c.Result, c.Detail)
	require.Contains(t, c.Detail, "apps/web-7d9f-abcde on fargate-ip-10-0-1-1.ec2.internal (kubelet 1.29, the control plane 1.30)")
	require.Contains(t, c.Detail, "Update existing cluster to new Kubernetes version")
	require.Equal(t, eksupgrade.CheckPass, checkOf(wf, "fargate profile fp-apps").Result, "the profile was described")
	require.Equal(t, "1.30", w.clusterVersion(t))
	require.Zero(t, w.updateCalls()["UpdateClusterVersion"])
	require.Equal(t, 1, w.a.Calls()["eks:DescribeFargateProfile"])
	require.Empty(t, k.rollouts)
}

func TestFargateWorkloadsAreRestartedAfterTheControlPlaneMovedOnlyWithTheOptIn(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"without --restart-fargate", false}, {"with --restart-fargate", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := fargateWorld(t)
			k := newKube(fargateWorkload("v1.30.7-eks-1234")...)
			req := upgrade()
			req.RestartFargate = tc.restart
			wf, err := w.kubeRunner("run-1", k).Run(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
			require.Equal(t, eksupgrade.CheckPass, checkOf(wf, "fargate pods").Result)
			d := deploymentOf(t, k, fargateNS, "web")
			if !tc.restart {
				require.Equal(t, eksupgrade.CheckWarn, checkOf(wf, "fargate restart").Result)
				require.Contains(t, checkOf(wf, "fargate restart").Detail, "apps/Deployment/web")
				require.Empty(t, k.rollouts)
				require.NotContains(t, d.Spec.Template.Annotations, eksupgrade.AnnotationRestartedAt)
				return
			}
			st := stepOf(t, wf, eksupgrade.KindFargateRestart, "apps/Deployment/web")
			require.Equal(t, state.StepStatusCompleted, st.Status)
			require.Equal(t, map[string]int{"Deployment apps/web": 1}, k.rollouts)
			require.Equal(t, st.Token, d.Spec.Template.Annotations[eksupgrade.AnnotationRestartedAt], "restartedAt is the step's recorded token")
			cp := stepOf(t, wf, eksupgrade.KindControlPlane, cluster)
			require.False(t, st.StartedAt.Before(cp.CompletedAt), "restarted only after the control plane moved")
			require.True(t, st.CompletedAt.After(st.StartedAt), "the step waited for the rollout")
			require.Equal(t, "public.ecr.aws/nginx/nginx:1.27", d.Spec.Template.Spec.Containers[0].Image, "the rest of the template is kept")
		})
	}
}

func TestFargateRestartWaitsWhileItsPodDisruptionBudgetAllowsNoDisruption(t *testing.T) {
	w := fargateWorld(t)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: fargateNS},
		Spec:   policyv1.PodDisruptionBudgetSpec{MinAvailable: &intstr.IntOrString{IntVal: 1}, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}}
	k := newKube(append(fargateWorkload("v1.30.7-eks-1234"), pdb)...)
	req := upgrade()
	req.RestartFargate = true
	wf, err := w.kubeRunner("run-1", k).Run(context.Background(), req)
	require.NoError(t, err)

	require.Equal(t, state.WorkflowWaiting, wf.Phase)
	require.Contains(t, wf.Reason, "PodDisruptionBudget apps/web (1 healthy, 1 desired healthy) allows no disruption now")
	require.Equal(t, "1.31", w.clusterVersion(t), "the control plane moved first")
	require.Empty(t, k.rollouts, "nothing restarted while the budget allows no disruption")
	require.Equal(t, state.StepStatusPending, stepOf(t, wf, eksupgrade.KindFargateRestart, "apps/Deployment/web").Status)

	pdb.Status.DisruptionsAllowed = 1
	_, err = k.PolicyV1().PodDisruptionBudgets(fargateNS).UpdateStatus(context.Background(), pdb, metav1.UpdateOptions{})
	require.NoError(t, err)
	wf, err = w.kubeRunner("run-2", k).Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	require.Equal(t, map[string]int{"Deployment apps/web": 1}, k.rollouts)
}

// selfManagedWorld is a cluster on 1.30 whose vpc-cni, coredns and kube-proxy are in the EKS add-on catalog
// (DescribeAddonVersions, as the demo's) but not installed as EKS add-ons: they run as plain workloads.
func selfManagedWorld(t *testing.T) *world {
	t.Helper()
	a := sim.New(testingclock.NewFakeClock(demo.UpgradeStart), sim.Options{})
	a.CreateEKSCluster(cluster, demo.UpgradeFrom)
	for _, ad := range demo.UpgradeAddons {
		a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: ad.Name, Version: ad.From, ClusterVersions: []string{demo.UpgradeFrom}, DefaultFor: []string{demo.UpgradeFrom}})
		a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: ad.Name, Version: ad.To, ClusterVersions: []string{demo.UpgradeFrom, demo.UpgradeTo}, DefaultFor: []string{demo.UpgradeTo}})
	}
	return &world{a: a, store: state.NewMemory()}
}

const ecr = "602401143452.dkr.ecr.us-west-2.amazonaws.com/"

// selfManagedAddons returns aws-node (with its init container and the network policy agent of another tag),
// kube-proxy (minimal image) and coredns in kube-system at the given image tags.
func selfManagedAddons(cni, proxy, dns string) []runtime.Object {
	sel := func(app string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": app}}
	}
	tpl := func(app string, init []corev1.Container, cs ...corev1.Container) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"k8s-app": app}},
			Spec: corev1.PodSpec{InitContainers: init, Containers: cs}}
	}
	awsNode := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "aws-node", Namespace: "kube-system", Generation: 1},
		Spec: appsv1.DaemonSetSpec{Selector: sel("aws-node"), Template: tpl("aws-node",
			[]corev1.Container{{Name: "aws-vpc-cni-init", Image: ecr + "amazon-k8s-cni-init:" + cni}},
			corev1.Container{Name: "aws-node", Image: ecr + "amazon-k8s-cni:" + cni, Env: []corev1.EnvVar{{Name: "ENABLE_PREFIX_DELEGATION", Value: "true"}}},
			corev1.Container{Name: "aws-eks-nodeagent", Image: ecr + "amazon/aws-network-policy-agent:v1.1.5-eksbuild.1"})}}
	proxyDS := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", Generation: 1},
		Spec: appsv1.DaemonSetSpec{Selector: sel("kube-proxy"), Template: tpl("kube-proxy", nil,
			corev1.Container{Name: "kube-proxy", Image: ecr + "eks/kube-proxy:" + proxy})}}
	dnsD := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: "kube-system", Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: aws.Int32(2), Selector: sel("kube-dns"), Template: tpl("kube-dns", nil,
			corev1.Container{Name: "coredns", Image: ecr + "eks/coredns:" + dns})}}
	for _, o := range []runtime.Object{awsNode, proxyDS, dnsD} {
		rolled(o)
	}
	return []runtime.Object{awsNode, proxyDS, dnsD}
}

func images(t *testing.T, k *kube, kind, name string) []string {
	t.Helper()
	ctx := context.Background()
	var tpl corev1.PodTemplateSpec
	if kind == "DaemonSet" {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		tpl = ds.Spec.Template
	} else {
		tpl = deploymentOf(t, k, "kube-system", name).Spec.Template
	}
	var out []string
	for _, c := range append(tpl.Spec.InitContainers, tpl.Spec.Containers...) {
		out = append(out, strings.TrimPrefix(c.Image, ecr))
	}
	return out
}

func TestSelfManagedAddonsAreReportedWithTheRecommendedVersionAndUpdatedInPlaceOnlyWithTheOptIn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		update bool
	}{{"reported only", false}, {"with --update-self-managed-addons", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := selfManagedWorld(t)
			k := newKube(selfManagedAddons("v1.18.3-eksbuild.1", "v1.30.6-minimal-eksbuild.3", "v1.11.1-eksbuild.9")...)
			req := upgrade()
			req.UpdateSelfManagedAddons = tc.update
			wf, err := w.kubeRunner("run-1", k).Run(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
			c := checkOf(wf, "self-managed add-on aws-node")
			require.Contains(t, c.Detail, "DaemonSet kube-system/aws-node (not an EKS add-on): v1.18.3-eksbuild.1 -> v1.19.0-eksbuild.1 (the default for Kubernetes 1.31)")
			proxy := stepOf(t, wf, eksupgrade.KindSelfManagedAddon, "kube-proxy")
			require.Equal(t, "v1.31.2-minimal-eksbuild.3", proxy.To, "the minimal image variant is kept")
			var order []string
			for _, s := range wf.Steps {
				if s.Kind == eksupgrade.KindSelfManagedAddon {
					order = append(order, s.Name)
				}
			}
			require.Equal(t, []string{"aws-node", "coredns", "kube-proxy"}, order, "the User Guide's order")
			require.Zero(t, w.a.Calls()["eks:UpdateAddon"], "self-managed add-ons are not EKS add-ons")
			if !tc.update {
				require.Equal(t, eksupgrade.CheckWarn, c.Result)
				require.Equal(t, state.StepStatusActionRequired, stepOf(t, wf, eksupgrade.KindSelfManagedAddon, "aws-node").Status)
				require.Contains(t, strings.Join(eksupgrade.Actions(wf), "\n"), "set its image tag to v1.19.0-eksbuild.1")
				require.Empty(t, k.rollouts)
				return
			}
			require.Equal(t, eksupgrade.CheckPass, c.Result)
			require.Equal(t, []string{"amazon-k8s-cni-init:v1.19.0-eksbuild.1", "amazon-k8s-cni:v1.19.0-eksbuild.1", "amazon/aws-network-policy-agent:v1.1.5-eksbuild.1"},
				images(t, k, "DaemonSet", "aws-node"), "the add-on's images move, the network policy agent of another tag stays")
			require.Equal(t, []string{"eks/kube-proxy:v1.31.2-minimal-eksbuild.3"}, images(t, k, "DaemonSet", "kube-proxy"))
			require.Equal(t, []string{"eks/coredns:v1.11.3-eksbuild.1"}, images(t, k, "Deployment", "coredns"))
			ds, err := k.AppsV1().DaemonSets("kube-system").Get(context.Background(), "aws-node", metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, []corev1.EnvVar{{Name: "ENABLE_PREFIX_DELEGATION", Value: "true"}}, ds.Spec.Template.Spec.Containers[0].Env, "the rest of the spec is kept")
			require.Equal(t, map[string]int{"DaemonSet kube-system/aws-node": 1, "DaemonSet kube-system/kube-proxy": 1, "Deployment kube-system/coredns": 1}, k.rollouts)
			cp := stepOf(t, wf, eksupgrade.KindControlPlane, cluster)
			prev := cp.CompletedAt
			for _, name := range order {
				st := stepOf(t, wf, eksupgrade.KindSelfManagedAddon, name)
				require.Equal(t, state.StepStatusCompleted, st.Status)
				require.False(t, st.StartedAt.Before(prev), "%s starts after the control plane and the add-on before it rolled out", name)
				require.True(t, st.CompletedAt.After(st.StartedAt), "%s waited for its rollout", name)
				prev = st.CompletedAt
			}
		})
	}
}

func TestSelfManagedAddonNewerThanTheTargetsDefaultIsNeverDowngraded(t *testing.T) {
	w := selfManagedWorld(t)
	w.a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: "vpc-cni", Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{demo.UpgradeFrom, demo.UpgradeTo}})
	k := newKube(selfManagedAddons("v1.19.2-eksbuild.1", "v1.31.2-minimal-eksbuild.3", "v1.11.3-eksbuild.1")...)
	req := upgrade()
	req.UpdateSelfManagedAddons = true
	wf, err := w.kubeRunner("run-1", k).Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	st := stepOf(t, wf, eksupgrade.KindSelfManagedAddon, "aws-node")
	require.Equal(t, state.StepStatusSkipped, st.Status)
	require.Equal(t, "v1.19.2-eksbuild.1", st.To)
	require.Contains(t, checkOf(wf, "self-managed add-on aws-node").Detail, "never downgraded")
	require.Equal(t, []string{"amazon-k8s-cni-init:v1.19.2-eksbuild.1", "amazon-k8s-cni:v1.19.2-eksbuild.1", "amazon/aws-network-policy-agent:v1.1.5-eksbuild.1"},
		images(t, k, "DaemonSet", "aws-node"))
	require.Empty(t, k.rollouts, "nothing was already behind the target")
}

func TestSelfManagedAddonFoundNewerThanPlannedAtItsStepHaltsInsteadOfDowngrading(t *testing.T) {
	w := selfManagedWorld(t)
	w.a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: "vpc-cni", Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{demo.UpgradeFrom, demo.UpgradeTo}})
	k := newKube(selfManagedAddons("v1.18.3-eksbuild.1", "v1.30.6-minimal-eksbuild.3", "v1.11.1-eksbuild.9")...)
	req := upgrade()
	req.UpdateSelfManagedAddons = true
	r := w.kubeRunner("run-1", k)
	// Someone updates aws-node by hand while the control plane's update runs (after the second preflight).
	wait := r.Wait
	r.Wait = func(ctx context.Context, d time.Duration) error {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "aws-node", metav1.GetOptions{})
		require.NoError(t, err)
		if strings.HasSuffix(ds.Spec.Template.Spec.Containers[0].Image, "v1.18.3-eksbuild.1") {
			ds.Spec.Template.Spec.Containers[0].Image = ecr + "amazon-k8s-cni:v1.19.2-eksbuild.1"
			_, err = k.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		return wait(ctx, d)
	}
	wf, err := r.Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowHalted, wf.Phase)
	require.Contains(t, wf.Reason, "found at v1.19.2-eksbuild.1, newer than the planned v1.19.0-eksbuild.1: a self-managed add-on is never downgraded")
	require.Equal(t, "amazon-k8s-cni:v1.19.2-eksbuild.1", images(t, k, "DaemonSet", "aws-node")[1])

	// --retry plans the step again from the tag it has now: kept at v1.19.2-eksbuild.1.
	retry := req
	retry.Retry = true
	wf, err = w.kubeRunner("run-2", k).Run(context.Background(), retry)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	st := stepOf(t, wf, eksupgrade.KindSelfManagedAddon, "aws-node")
	require.Equal(t, state.StepStatusSkipped, st.Status)
	require.Equal(t, "v1.19.2-eksbuild.1", st.To)
	require.Equal(t, "amazon-k8s-cni:v1.19.2-eksbuild.1", images(t, k, "DaemonSet", "aws-node")[1])
	require.Equal(t, 1, k.rollouts["DaemonSet kube-system/aws-node"], "only the operator's own update rolled it")
}

// TestCrashMatrixEKSUpgradeWorkflowKubernetesSteps extends TestCrashMatrixEKSUpgradeWorkflow to the Kubernetes
// effects: with both opt-ins, every store write, history entry, EKS update call and Kubernetes update
// (a self-managed add-on's image, a Fargate workload's restartedAt) is a crash point, in both modes; the
// resumed run completes with one EKS update each, one rollout per workload and the uncrashed run's audit trail.
func TestCrashMatrixEKSUpgradeWorkflowKubernetesSteps(t *testing.T) {
	start := time.Now()
	newKubeWorld := func(t *testing.T) (*world, *kube) {
		w := selfManagedWorld(t)
		require.NoError(t, w.a.AddEKSFargateProfile(sim.EKSFargateProfileSpec{Cluster: cluster, Name: "fp-apps", Selectors: map[string]map[string]string{fargateNS: nil}}))
		return w, newKube(append(selfManagedAddons("v1.18.3-eksbuild.1", "v1.30.6-minimal-eksbuild.3", "v1.11.1-eksbuild.9"), fargateWorkload("v1.30.7-eks-1234")...)...)
	}
	req := upgrade()
	req.RestartFargate, req.UpdateSelfManagedAddons = true, true
	incarnation := func(w *world, k *kube, owner string, f *fuse) *eksupgrade.Runner {
		r := w.kubeRunner(owner, k)
		r.Store = fusedStore{Store: w.store, f: f}
		r.EKS = fusedEKS{EKSUpgrade: r.EKS, f: f}
		k.setFuse(f)
		return r
	}
	wantRollouts := map[string]int{"DaemonSet kube-system/aws-node": 1, "DaemonSet kube-system/kube-proxy": 1, "Deployment kube-system/coredns": 1, "Deployment apps/web": 1}
	clean, ck := newKubeWorld(t)
	f := &fuse{}
	wf, err := incarnation(clean, ck, "clean", f).Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	require.Equal(t, wantRollouts, ck.rollouts)
	total := f.effects
	runs := 0
	for at := 1; at <= total; at++ {
		for _, mode := range crash.CrashModes {
			t.Run(fmt.Sprintf("%s effect %d of %d", mode, at, total), func(t *testing.T) {
				w, k := newKubeWorld(t)
				first := &fuse{At: at, loseResponse: mode == crash.CrashResponseLost}
				_, err := incarnation(w, k, "first", first).Run(context.Background(), req)
				require.True(t, first.blown, "the fuse fired")
				if at < total || err != nil {
					require.True(t, errors.Is(err, errCrashed) || errors.Is(err, errResponseLost), "%v", err)
				}
				k.setFuse(nil)
				w.a.Advance(eksupgrade.DefaultLeaseTTL + state.LeaseRule{}.Margin())
				wf, err := w.kubeRunner("second", k).Run(context.Background(), req)
				require.NoError(t, err, "resume after effect %d", at)
				require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
				require.Equal(t, map[string]int{"UpdateClusterVersion": 1, "UpdateAddon": 0, "UpdateNodegroupVersion": 0}, w.updateCalls())
				require.Equal(t, wantRollouts, k.rollouts, "no Kubernetes change repeated with effect")
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
	t.Logf("crash matrix EKS upgrade workflow, Kubernetes steps: N = %d effects, %d runs, %v wall", total, runs, time.Since(start).Round(time.Millisecond))
}

// TestRetryThatReplansASelfManagedAddonNeedsANewApproval: a --retry that plans a self-managed add-on at another
// tag than the approved plan (aws-node found by hand at v1.19.1, which the catalog does not list for the target,
// so the plan moves it up to v1.19.2 instead of the approved v1.19.0) waits for a new approval, as an EKS
// add-on's re-plan does; once approved, the new tag is set.
func TestRetryThatReplansASelfManagedAddonNeedsANewApproval(t *testing.T) {
	w := selfManagedWorld(t)
	w.a.PublishEKSAddonVersion(sim.EKSAddonVersion{Addon: "vpc-cni", Version: "v1.19.2-eksbuild.1", ClusterVersions: []string{demo.UpgradeFrom, demo.UpgradeTo}})
	k := newKube(selfManagedAddons("v1.18.3-eksbuild.1", "v1.30.6-minimal-eksbuild.3", "v1.11.1-eksbuild.9")...)
	req := upgrade()
	req.UpdateSelfManagedAddons = true
	r := w.kubeRunner("run-1", k)
	wait := r.Wait
	r.Wait = func(ctx context.Context, d time.Duration) error {
		ds, err := k.AppsV1().DaemonSets("kube-system").Get(ctx, "aws-node", metav1.GetOptions{})
		require.NoError(t, err)
		if strings.HasSuffix(ds.Spec.Template.Spec.Containers[0].Image, "v1.18.3-eksbuild.1") {
			ds.Spec.Template.Spec.Containers[0].Image = ecr + "amazon-k8s-cni:v1.19.1-eksbuild.1"
			_, err = k.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{})
			require.NoError(t, err)
		}
		return wait(ctx, d)
	}
	wf, err := r.Run(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowHalted, wf.Phase, wf.Reason)

	retry := req
	retry.Retry = true
	wf, err = w.kubeRunner("run-2", k).Run(context.Background(), retry)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowWaiting, wf.Phase, wf.Reason)
	require.Contains(t, wf.Reason, "the plan changed at the retry")
	require.Empty(t, wf.ApprovedBy, "the old approval does not cover the new tag")
	require.Equal(t, "amazon-k8s-cni:v1.19.1-eksbuild.1", images(t, k, "DaemonSet", "aws-node")[1], "nothing set on the old approval")

	_, err = eksupgrade.Approve(context.Background(), w.store, cluster, "bob", w.a.Clock().Now())
	require.NoError(t, err)
	resume := req
	resume.Approve = false
	wf, err = w.kubeRunner("run-3", k).Run(context.Background(), resume)
	require.NoError(t, err)
	require.Equal(t, state.WorkflowCompleted, wf.Phase, wf.Reason)
	require.Equal(t, "amazon-k8s-cni:v1.19.2-eksbuild.1", images(t, k, "DaemonSet", "aws-node")[1])
}
