package kubesim

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// KubeWorkload is what runs on the Kubernetes nodes of a world's EKS groups: a Deployment "web" under a
// PodDisruptionBudget, and a DaemonSet "node-agent" with one pod on every node.
type KubeWorkload struct {
	// Namespace of the workload. Default "default".
	Namespace string
	// Replicas of Deployment "web". 0: no Deployment.
	Replicas int
	// MinAvailable of PodDisruptionBudget "web" (selecting the Deployment's pods). 0: no PodDisruptionBudget.
	MinAvailable int
	// DaemonSet adds DaemonSet "node-agent".
	DaemonSet bool
}

// Names of the simulated Kubernetes objects.
const (
	kubeApp        = "web"
	kubeReplicaSet = "web-7c9d5b8f6d"
	kubeDaemonSet  = "node-agent"
	labelGroup     = "patch-agent.demo/group"
)

// KubeSim plays the Kubernetes side of the simulated EKS clusters through the Kubernetes API — client-go's fake
// clientset in the demo, or a real kube-apiserver (envtest) in tests — doing what the kubelet and the
// controllers would: a node registers (Ready, provider ID aws:///<az>/<instance-id>) once its EC2 instance runs
// and is deleted with its pods when the instance shuts down; the Deployment's pods are recreated on Ready,
// schedulable nodes (fewest first) and become Ready PodStartDelay later; DaemonSet pods follow the nodes; pods
// being deleted are finished; the PodDisruptionBudget's status is kept as the disruption controller keeps it.
// Instances of an image marked unhealthy (sim.Account.MarkImageUnhealthy) register NotReady.
//
// On the fake clientset it also answers evictions (which the fake does not implement) as the API server
// does: 429 when the pod's PodDisruptionBudget allows no disruption, else the pod is deleted; and it applies
// the spec.nodeName field selector to pod listings, which the fake ignores.
type KubeSim struct {
	Client   kubernetes.Interface
	Account  *sim.Account
	Workload KubeWorkload
	// PodStartDelay is the time from a pod's creation to Ready. Default 10 s.
	PodStartDelay time.Duration

	mu      sync.Mutex
	fake    *fake.Clientset   // set when the simulator made the fake clientset
	groups  map[string]string // EKS group -> cluster (one Kubernetes API serves them all)
	nodes   map[string]string // instance id -> node name
	readyAt map[types.UID]time.Time
	seq     int
	dsUID   types.UID
}

// NewKubeSim returns a simulator on client; nil client: a fake clientset with the eviction and field selector
// reactors.
func NewKubeSim(acct *sim.Account, client kubernetes.Interface, w KubeWorkload) *KubeSim {
	if w.Namespace == "" {
		w.Namespace = "default"
	}
	k := &KubeSim{Client: client, Account: acct, Workload: w, PodStartDelay: 10 * time.Second,
		groups: map[string]string{}, nodes: map[string]string{}, readyAt: map[types.UID]time.Time{}}
	if client == nil {
		// The simple fake: the field-managed one (NewClientset) makes the demo several times slower, and
		// nothing here uses server-side apply.
		k.fake = fake.NewSimpleClientset()
		installFakeReactors(k.fake)
		k.Client = k.fake
	}
	return k
}

// AddGroup makes the instances of an Auto Scaling group join the cluster as nodes.
func (k *KubeSim) AddGroup(group, cluster string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.groups[group] = cluster
}

// Setup creates the workload's namespace objects: ServiceAccount, DaemonSet and PodDisruptionBudget.
func (k *KubeSim) Setup(ctx context.Context) error {
	w, ns := k.Workload, k.Workload.Namespace
	if ns != "default" {
		if _, err := k.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	if _, err := k.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServiceAccount %s/default: %w", ns, err)
	}
	if w.DaemonSet {
		sel := map[string]string{"app": kubeDaemonSet}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: kubeDaemonSet, Namespace: ns, UID: types.UID("uid-" + kubeDaemonSet)},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: podSpec("")}}}
		created, err := k.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating DaemonSet %s: %w", kubeDaemonSet, err)
		}
		k.dsUID = created.UID
	}
	if w.Replicas > 0 && w.MinAvailable > 0 {
		minAvailable := intstr.FromInt32(int32(w.MinAvailable))
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: kubeApp, Namespace: ns},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": kubeApp}}}}
		if _, err := k.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating PodDisruptionBudget %s: %w", kubeApp, err)
		}
	}
	return nil
}

// Sync brings the Kubernetes API in line with the account now. instant makes new pods Ready at once (setup).
func (k *KubeSim) Sync(ctx context.Context, instant bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fake != nil {
		k.fake.ClearActions() // the fake records every call; nothing reads them
	}
	now := k.Account.Clock().Now()
	if err := k.syncNodes(ctx); err != nil {
		return err
	}
	nodes, pods, err := k.list(ctx)
	if err != nil {
		return err
	}
	zero := int64(0)
	var live []corev1.Pod
	for _, p := range pods {
		_, onNode := nodes[p.Spec.NodeName]
		switch {
		case p.DeletionTimestamp != nil || (p.Spec.NodeName != "" && !onNode):
			// The kubelet finished it, or its node is gone (the pod garbage collector deletes it).
			err := k.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("finishing pod %s: %w", p.Name, err)
			}
			delete(k.readyAt, p.UID)
		default:
			live = append(live, p)
		}
	}
	if err := k.syncDaemonSet(ctx, nodes, live, now, instant); err != nil {
		return err
	}
	if err := k.syncDeployment(ctx, nodes, live, now, instant); err != nil {
		return err
	}
	if err := k.syncReadiness(ctx, now); err != nil {
		return err
	}
	return k.syncPDB(ctx)
}

// syncNodes registers the nodes of running instances and deletes those of instances shutting down.
func (k *KubeSim) syncNodes(ctx context.Context) error {
	want := map[string]sim.InstanceView{}
	for group := range k.groups {
		for _, i := range k.Account.Group(group).Instances {
			if i.EC2State == "running" {
				want[i.ID] = i
			}
		}
	}
	existing, err := k.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	have := map[string]bool{}
	for _, n := range existing.Items {
		id, _, ok := eksdrain.ParseProviderID(n.Spec.ProviderID)
		if !ok || k.nodes[id] != n.Name {
			continue // not one of ours
		}
		if _, running := want[id]; !running {
			if err := k.Client.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting node %s: %w", n.Name, err)
			}
			continue
		}
		have[id] = true
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if have[id] {
			continue
		}
		if _, known := k.nodes[id]; known {
			continue // its node was deleted while the instance still ran: it does not come back
		}
		if err := k.register(ctx, want[id]); err != nil {
			return err
		}
	}
	return nil
}

// register creates the node of an instance, as the kubelet does when it starts.
func (k *KubeSim) register(ctx context.Context, i sim.InstanceView) error {
	// Resource-name hostnames, as EKS nodes launched with hostname type "resource-name" have: unique per
	// instance, so several simulated accounts can share one API server in tests.
	name := fmt.Sprintf("%s.%s.compute.internal", i.ID, k.Account.Options().Region)
	k.nodes[i.ID] = name
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": i.AvailabilityZone,
			"kubernetes.io/os": "linux", labelGroup: i.Group}},
		Spec: corev1.NodeSpec{ProviderID: fmt.Sprintf("aws:///%s/%s", i.AvailabilityZone, i.ID)},
	}
	created, err := k.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("registering node %s of %s: %w", name, i.ID, err)
	}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	if k.Account.ImageUnhealthy(i.ImageID) {
		ready.Status, ready.Reason, ready.Message = corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready: cni plugin not initialized"
	}
	created.Status.Conditions = []corev1.NodeCondition{ready}
	if _, err := k.Client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting status of node %s: %w", name, err)
	}
	return nil
}

// list returns the simulator's nodes by name and every pod of the workload namespace.
func (k *KubeSim) list(ctx context.Context) (map[string]*corev1.Node, []corev1.Pod, error) {
	nl, err := k.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	nodes := map[string]*corev1.Node{}
	for i := range nl.Items {
		n := &nl.Items[i]
		if id, _, ok := eksdrain.ParseProviderID(n.Spec.ProviderID); ok && k.nodes[id] == n.Name {
			nodes[n.Name] = n
		}
	}
	pl, err := k.Client.CoreV1().Pods(k.Workload.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing pods: %w", err)
	}
	return nodes, pl.Items, nil
}

func (k *KubeSim) syncDaemonSet(ctx context.Context, nodes map[string]*corev1.Node, pods []corev1.Pod, now time.Time, instant bool) error {
	if !k.Workload.DaemonSet {
		return nil
	}
	covered := map[string]bool{}
	for _, p := range pods {
		if p.Labels["app"] == kubeDaemonSet {
			covered[p.Spec.NodeName] = true
		}
	}
	for _, name := range sortedNodeNames(nodes) {
		if covered[name] {
			continue
		}
		owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: kubeDaemonSet, UID: k.dsUID,
			Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}
		if err := k.createPod(ctx, kubeDaemonSet, name, owner, now, instant); err != nil {
			return err
		}
	}
	return nil
}

// syncDeployment recreates missing Deployment pods on Ready, schedulable nodes with the fewest of them.
func (k *KubeSim) syncDeployment(ctx context.Context, nodes map[string]*corev1.Node, pods []corev1.Pod, now time.Time, instant bool) error {
	count := map[string]int{}
	total := 0
	for _, p := range pods {
		if p.Labels["app"] == kubeApp {
			count[p.Spec.NodeName]++
			total++
		}
	}
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: kubeReplicaSet, UID: types.UID("uid-" + kubeReplicaSet),
		Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}
	for ; total < k.Workload.Replicas; total++ {
		best := ""
		for _, name := range sortedNodeNames(nodes) {
			n := nodes[name]
			if n.Spec.Unschedulable || !nodeIsReady(n) {
				continue
			}
			if best == "" || count[name] < count[best] {
				best = name
			}
		}
		if best == "" {
			return nil // Pending: no node can take it now
		}
		if err := k.createPod(ctx, kubeApp, best, owner, now, instant); err != nil {
			return err
		}
		count[best]++
	}
	return nil
}

// createPod creates a pod bound to node; it becomes Ready at once (instant) or PodStartDelay later.
func (k *KubeSim) createPod(ctx context.Context, app, node string, owner metav1.OwnerReference, now time.Time, instant bool) error {
	k.seq++
	name := fmt.Sprintf("%s-%05d", app, k.seq)
	pod := &corev1.Pod{
		// The fake clientset keeps the UID given here; an API server assigns its own.
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Workload.Namespace, UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": app}, OwnerReferences: []metav1.OwnerReference{owner}},
		Spec: podSpec(node),
	}
	created, err := k.Client.CoreV1().Pods(k.Workload.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s on %s: %w", pod.Name, node, err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
	if _, err := k.Client.CoreV1().Pods(k.Workload.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("setting status of pod %s: %w", pod.Name, err)
	}
	at := now.Add(k.PodStartDelay)
	if instant {
		at = now
	}
	k.readyAt[created.UID] = at
	return nil
}

// syncReadiness makes pods Ready once their start delay passed.
func (k *KubeSim) syncReadiness(ctx context.Context, now time.Time) error {
	_, pods, err := k.list(ctx)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		at, ok := k.readyAt[p.UID]
		if !ok || now.Before(at) || p.DeletionTimestamp != nil {
			continue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
		if _, err := k.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("making pod %s Ready: %w", p.Name, err)
		}
		delete(k.readyAt, p.UID)
	}
	return nil
}

// syncPDB writes the PodDisruptionBudget's status as the disruption controller does; a real API server
// refuses evictions from it.
func (k *KubeSim) syncPDB(ctx context.Context) error {
	w := k.Workload
	if w.Replicas == 0 || w.MinAvailable == 0 {
		return nil
	}
	pdb, err := k.Client.PolicyV1().PodDisruptionBudgets(w.Namespace).Get(ctx, kubeApp, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading PodDisruptionBudget %s: %w", kubeApp, err)
	}
	_, pods, err := k.list(ctx)
	if err != nil {
		return err
	}
	healthy := healthyPods(pods, labels.SelectorFromSet(map[string]string{"app": kubeApp}))
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, CurrentHealthy: int32(healthy),
		DesiredHealthy: int32(w.MinAvailable), ExpectedPods: int32(w.Replicas), DisruptionsAllowed: int32(max(0, healthy-w.MinAvailable)),
		Conditions: []metav1.Condition{{Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue, Reason: policyv1.SufficientPodsReason,
			LastTransitionTime: metav1.Now(), ObservedGeneration: pdb.Generation}}}
	if healthy <= w.MinAvailable {
		pdb.Status.Conditions[0].Status, pdb.Status.Conditions[0].Reason = metav1.ConditionFalse, policyv1.InsufficientPodsReason
	}
	if _, err := k.Client.PolicyV1().PodDisruptionBudgets(w.Namespace).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing status of PodDisruptionBudget %s: %w", kubeApp, err)
	}
	return nil
}

// NodeObservation is the Kubernetes view of one instance for the invariant checks.
type NodeObservation struct {
	Name      string
	Ready     bool
	Cordoned  bool
	Evictable int // pods on the node that a drain must move (not DaemonSet pods, not being deleted)
}

// drained reports whether terminating the node's instance loses no pod: nothing left to evict, and no new
// pod can land on it (cordoned, or never Ready).
func (o NodeObservation) Drained() bool { return o.Evictable == 0 && (o.Cordoned || !o.Ready) }

// Observe returns the node of every instance that has one, by instance id.
func (k *KubeSim) Observe(ctx context.Context) (map[string]NodeObservation, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	nodes, pods, err := k.list(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]NodeObservation{}
	byName := map[string]string{}
	for name, n := range nodes {
		id, _, _ := eksdrain.ParseProviderID(n.Spec.ProviderID)
		out[id] = NodeObservation{Name: name, Ready: nodeIsReady(n), Cordoned: n.Spec.Unschedulable}
		byName[name] = id
	}
	for _, p := range pods {
		id, ok := byName[p.Spec.NodeName]
		if !ok || p.DeletionTimestamp != nil || p.Labels["app"] == kubeDaemonSet {
			continue
		}
		o := out[id]
		o.Evictable++
		out[id] = o
	}
	return out, nil
}

// ReadyPods counts the Deployment's Ready pods that are not being deleted.
func (k *KubeSim) ReadyPods(ctx context.Context) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, pods, err := k.list(ctx)
	if err != nil {
		return 0, err
	}
	return healthyPods(pods, labels.SelectorFromSet(map[string]string{"app": kubeApp})), nil
}

func healthyPods(pods []corev1.Pod, sel labels.Selector) int {
	n := 0
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && sel.Matches(labels.Set(p.Labels)) && podIsReady(p) {
			n++
		}
	}
	return n
}

func podSpec(node string) corev1.PodSpec {
	grace := int64(30)
	return corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptrTo(false), TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: "app", Image: "public.ecr.aws/docker/library/nginx:1.27"}}}
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func sortedNodeNames(nodes map[string]*corev1.Node) []string {
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func ptrTo[T any](v T) *T { return &v }

// installFakeReactors makes the fake clientset answer evictions as the API server does (PodDisruptionBudgets
// enforced) and honour the spec.nodeName field selector of pod listings. Reactors run under the fake's lock,
// so they use its object tracker, never the clientset.
func installFakeReactors(cs *fake.Clientset) {
	tracker := cs.Tracker()
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	pdbGVR := policyv1.SchemeGroupVersion.WithResource("poddisruptionbudgets")
	cs.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		la := action.(k8stesting.ListAction)
		obj, err := tracker.List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		r := la.GetListRestrictions()
		out := &corev1.PodList{ListMeta: list.ListMeta}
		for _, p := range list.Items {
			set := fields.Set{"spec.nodeName": p.Spec.NodeName, "metadata.name": p.Name, "metadata.namespace": p.Namespace,
				"status.phase": string(p.Status.Phase)}
			if (r.Labels == nil || r.Labels.Matches(labels.Set(p.Labels))) && (r.Fields == nil || r.Fields.Matches(set)) {
				out.Items = append(out.Items, p)
			}
		}
		return true, out, nil
	})
	cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev, ok := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if !ok {
			return true, nil, apierrors.NewBadRequest("not a policy/v1 Eviction")
		}
		ns := action.GetNamespace()
		obj, err := tracker.Get(podsGVR, ns, ev.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod)
		if podIsReady(pod) {
			pdbs, err := tracker.List(pdbGVR, policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"), ns)
			if err != nil {
				return true, nil, err
			}
			all, err := tracker.List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), ns)
			if err != nil {
				return true, nil, err
			}
			for _, pdb := range pdbs.(*policyv1.PodDisruptionBudgetList).Items {
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if err != nil || !sel.Matches(labels.Set(pod.Labels)) || pdb.Spec.MinAvailable == nil {
					continue
				}
				if healthyPods(all.(*corev1.PodList).Items, sel)-1 < pdb.Spec.MinAvailable.IntValue() {
					return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
				}
			}
		}
		return true, nil, tracker.Delete(podsGVR, ns, ev.Name)
	})
}
