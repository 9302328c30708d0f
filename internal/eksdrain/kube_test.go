package eksdrain_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/patch-agent/patch-agent/internal/testenv"
)

// The tests of this package run against a real kube-apiserver and etcd (internal/testenv: skipped without
// the binaries, failed under CI=true).
func TestMain(m *testing.M) { testenv.KubeMain(m) }

// kube is one test's view of the shared API server: a clientset that counts eviction requests, a namespace
// of its own, and a label that marks its nodes.
type kube struct {
	t     *testing.T
	cs    kubernetes.Interface
	ns    string
	label string // value of the "test" label on this test's nodes
	evict *evictionCounter
}

// evictionCounter counts POSTs to pods/eviction, with the time given by now at each.
type evictionCounter struct {
	next http.RoundTripper
	now  func() time.Time
	mu   sync.Mutex
	at   []time.Time
}

func (e *evictionCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction") {
		e.mu.Lock()
		at := time.Time{}
		if e.now != nil {
			at = e.now()
		}
		e.at = append(e.at, at)
		e.mu.Unlock()
	}
	return e.next.RoundTrip(r)
}

// Count returns the eviction requests so far.
func (e *evictionCounter) Count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.at)
}

// Times returns when each eviction request was sent.
func (e *evictionCounter) Times() []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Time(nil), e.at...)
}

// newKube returns a clientset on the shared API server whose eviction requests are counted at the times now
// returns, and a fresh namespace with its default ServiceAccount.
func newKube(t *testing.T, now func() time.Time) *kube {
	t.Helper()
	cfg := testenv.Kube(t)
	counter := &evictionCounter{now: now}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	ns := testenv.CreateNamespace(t, cs)
	return &kube{t: t, cs: cs, ns: ns, label: ns, evict: counter}
}

// addNode registers a node (as a kubelet would) for an instance, Ready or not.
func (k *kube) addNode(name, providerID string, ready bool) *corev1.Node {
	k.t.Helper()
	ctx := context.Background()
	n, err := k.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": k.label}},
		Spec: corev1.NodeSpec{ProviderID: providerID}}, metav1.CreateOptions{})
	require.NoError(k.t, err)
	status := corev1.ConditionTrue
	if !ready {
		status = corev1.ConditionFalse
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	n, err = k.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	require.NoError(k.t, err)
	return n
}

// nodeName returns a node name unique to this test.
func (k *kube) nodeName(s string) string { return fmt.Sprintf("%s-%s", s, k.ns[len(k.ns)-8:]) }

// podOpt changes a pod before it is created.
type podOpt func(*corev1.Pod)

func ownedBy(kind, name string, uid string) podOpt {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(uid),
			Controller: ptr(true)}}
	}
}

func labeled(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withEmptyDir() podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
}

func mirror() podOpt {
	return func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "mirror"} }
}

// addPod creates a Running, Ready pod on node (no scheduler runs: spec.nodeName is set directly).
func (k *kube) addPod(name, node string, opts ...podOpt) *corev1.Pod {
	k.t.Helper()
	ctx := context.Background()
	grace := int64(30)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "app", Image: "public.ecr.aws/docker/library/nginx:1.27"}}}}
	for _, o := range opts {
		o(p)
	}
	p, err := k.cs.CoreV1().Pods(k.ns).Create(ctx, p, metav1.CreateOptions{})
	require.NoError(k.t, err)
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	p, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	require.NoError(k.t, err)
	return p
}

// addDaemonSet creates a DaemonSet (its pods are created by the test: no controller runs) and returns its UID.
func (k *kube) addDaemonSet(name string) string {
	k.t.Helper()
	sel := map[string]string{"app": name}
	ds, err := k.cs.AppsV1().DaemonSets(k.ns).Create(context.Background(), &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "public.ecr.aws/docker/library/busybox:1.36"}}}}}},
		metav1.CreateOptions{})
	require.NoError(k.t, err)
	return string(ds.UID)
}

// addPDB creates a PodDisruptionBudget with minAvailable over pods labeled app=app. Without a disruption
// controller its status says no disruption is allowed until setPDBAllowed writes one.
func (k *kube) addPDB(app string, minAvailable int) {
	k.t.Helper()
	m := intstr.FromInt32(int32(minAvailable))
	_, err := k.cs.PolicyV1().PodDisruptionBudgets(k.ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &m, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}},
		metav1.CreateOptions{})
	require.NoError(k.t, err)
}

// setPDBAllowed writes the PodDisruptionBudget's status as the disruption controller would.
func (k *kube) setPDBAllowed(app string, healthy, desired, allowed int) {
	k.t.Helper()
	ctx := context.Background()
	pdb, err := k.cs.PolicyV1().PodDisruptionBudgets(k.ns).Get(ctx, app, metav1.GetOptions{})
	require.NoError(k.t, err)
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: int32(healthy),
		DesiredHealthy: int32(desired), ExpectedPods: int32(healthy), DisruptionsAllowed: int32(allowed)}
	_, err = k.cs.PolicyV1().PodDisruptionBudgets(k.ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
	require.NoError(k.t, err)
}

// pod returns a pod of the namespace, or nil when it is gone.
func (k *kube) pod(name string) *corev1.Pod {
	k.t.Helper()
	p, err := k.cs.CoreV1().Pods(k.ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return p
}

// finishTerminating does what the kubelet does for pods being deleted.
func (k *kube) finishTerminating() int {
	k.t.Helper()
	n, err := testenv.FinishTerminatingPods(context.Background(), k.cs, k.ns)
	require.NoError(k.t, err)
	return n
}

func ptr[T any](v T) *T { return &v }
