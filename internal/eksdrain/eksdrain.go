// Package eksdrain drains Kubernetes nodes of EKS clusters the way `kubectl drain` does — cordon, then evict
// every pod except DaemonSet and mirror pods through the Eviction API, so that PodDisruptionBudgets are
// honoured — but without blocking: the rollout orchestrator looks at a drain once per tick, so StartDrain
// cordons and asks once for the eviction of every evictable pod, and each DrainStatus asks again for the
// pods still there whose per-pod backoff has passed. A 429 answer (a PodDisruptionBudget allows no disruption
// now) is the normal way an eviction waits; it is retried with capped exponential backoff on an injected
// clock, never in a loop inside one call.
//
// Pods are selected and filtered by k8s.io/kubectl/pkg/drain (Helper.GetPodsForDeletion with
// IgnoreAllDaemonSets) and evicted one request each through policy/v1 Eviction (as Helper.EvictPod, without
// client-go's retries); cordon and uncordon are drain.RunCordonOrUncordon. Nodes are matched to EC2 instances by their provider ID
// (aws:///<availability-zone>/<instance-id>).
//
// The Kubernetes permissions this needs are in docs/eks-access.md.
package eksdrain

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/clock"
)

// ErrNotRegistered is returned by Find when no node carries the instance's provider ID: the instance has not
// joined the cluster (yet), or its node object was deleted.
var ErrNotRegistered = errors.New("no Kubernetes node for the instance")

// listChunk is the page size of node and pod listings (kubectl drain's default --chunk-size).
const listChunk = 500

// Options tune a Drainer. The zero value is usable: every field documents its default.
type Options struct {
	// NodeSelector is a label selector that narrows the nodes Observe and Find look at ("" = every node).
	NodeSelector string
	// DeleteEmptyDirData allows evicting pods with emptyDir volumes, whose data is lost (kubectl drain
	// --delete-emptydir-data). Without it such pods are not evicted and block the drain.
	DeleteEmptyDirData bool
	// Force allows evicting pods that no controller manages; nothing recreates them (kubectl drain --force).
	// Without it such pods are not evicted and block the drain.
	Force bool
	// GracePeriodSeconds is sent with every eviction; nil (the default) lets each pod use its own
	// terminationGracePeriodSeconds (kubectl drain --grace-period=-1).
	GracePeriodSeconds *int64
	// SkipWaitForDeleteTimeout, when positive, stops counting pods whose deletion began longer ago than this
	// (a node whose kubelet is gone never finishes them; kubectl drain --skip-wait-for-delete-timeout).
	SkipWaitForDeleteTimeout time.Duration
	// RequireDaemonSetsReady makes a node healthy only when every DaemonSet pod on it is Ready as well as
	// the node (costs one cluster-wide pod listing per Observe).
	RequireDaemonSetsReady bool
	// Backoff is the wait after the attempt-th refused eviction of one pod (attempt >= 1) before it is
	// asked again. Default DefaultBackoff: 5 s doubling to 2 min, ±20 % jitter.
	Backoff func(attempt int) time.Duration
	// Clock measures the backoff. Default: the real clock.
	Clock clock.PassiveClock
}

// Backoff is capped exponential backoff with jitter: Base after the first attempt, doubling up to Cap, each
// wait multiplied by a random factor in [1-Jitter, 1+Jitter].
type Backoff struct {
	Base, Cap time.Duration
	Jitter    float64 // fraction, 0..1
}

// Delay returns the wait after the attempt-th failure (attempt >= 1).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Base
	for i := 1; i < attempt && d < b.Cap; i++ {
		d *= 2
	}
	d = min(d, b.Cap)
	if b.Jitter > 0 {
		d = time.Duration(float64(d) * (1 - b.Jitter + 2*b.Jitter*rand.Float64()))
	}
	return d
}

// DefaultBackoff is the eviction retry backoff when Options.Backoff is nil: 5 s, 10 s, 20 s ... 2 min, ±20 %.
var DefaultBackoff = Backoff{Base: 5 * time.Second, Cap: 2 * time.Minute, Jitter: 0.2}.Delay

// Drainer drains the nodes of one cluster. It keeps the eviction backoff of every pod it was refused for, so
// one Drainer per cluster lives as long as the agent. Safe for concurrent use.
type Drainer struct {
	client kubernetes.Interface
	opts   Options

	mu sync.Mutex
	// retries holds, per node name, the refused evictions by pod UID.
	retries map[string]map[types.UID]*retry
	// names remembers the node name of each instance id (Find gets it by name before listing every node).
	names map[string]string
}

// retry is the eviction backoff of one pod.
type retry struct {
	attempts int
	next     time.Time
	blocked  bool   // the last refusal was 429 (PodDisruptionBudget)
	last     string // the API's message
}

// New returns a Drainer that talks to one cluster through client.
func New(client kubernetes.Interface, opts Options) *Drainer {
	if opts.Backoff == nil {
		opts.Backoff = DefaultBackoff
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Drainer{client: client, opts: opts, retries: map[string]map[types.UID]*retry{}, names: map[string]string{}}
}

// Node is one Kubernetes node as the rollout sees it.
type Node struct {
	Name             string `json:"name"`
	InstanceID       string `json:"instanceId"`
	AvailabilityZone string `json:"availabilityZone"`
	// Ready is the node's Ready condition being True.
	Ready bool `json:"ready"`
	// Unschedulable is spec.unschedulable: the node is cordoned.
	Unschedulable bool `json:"unschedulable"`
	// DaemonSetsReady is false when Options.RequireDaemonSetsReady is set and a DaemonSet pod on the node is
	// not Ready; always true otherwise.
	DaemonSetsReady bool `json:"daemonSetsReady"`
}

// Healthy reports whether the node can take pods: Ready, and its DaemonSet pods Ready when required.
func (n Node) Healthy() bool { return n.Ready && n.DaemonSetsReady }

// Status is the node's status as kubectl prints it: Ready / NotReady, with ",SchedulingDisabled" when
// cordoned.
func (n Node) Status() string {
	s := "NotReady"
	if n.Ready {
		s = "Ready"
	}
	if n.Unschedulable {
		s += ",SchedulingDisabled"
	}
	return s
}

// ParseProviderID returns the instance id and Availability Zone of an AWS provider ID
// ("aws:///us-east-1a/i-0123456789abcdef0"); ok is false for any other form.
func ParseProviderID(providerID string) (instanceID, az string, ok bool) {
	rest, found := strings.CutPrefix(providerID, "aws://")
	if !found {
		return "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	if len(parts) != 2 || !strings.HasPrefix(parts[1], "i-") {
		return "", "", false
	}
	return parts[1], parts[0], true
}

// Nodes lists the cluster's nodes (Options.NodeSelector) that carry an AWS provider ID, keyed by instance id.
func (d *Drainer) Nodes(ctx context.Context) (map[string]Node, error) {
	nodes, err := d.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Node, len(nodes))
	byName := map[string]string{}
	for i := range nodes {
		n := &nodes[i]
		id, az, ok := ParseProviderID(n.Spec.ProviderID)
		if !ok {
			continue
		}
		out[id] = Node{Name: n.Name, InstanceID: id, AvailabilityZone: az, Ready: nodeReady(n),
			Unschedulable: n.Spec.Unschedulable, DaemonSetsReady: true}
		byName[n.Name] = id
	}
	d.mu.Lock()
	for id, n := range out {
		d.names[id] = n.Name
	}
	d.mu.Unlock()
	if d.opts.RequireDaemonSetsReady && len(out) > 0 {
		if err := d.markDaemonSetsReady(ctx, out, byName); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (d *Drainer) listNodes(ctx context.Context) ([]corev1.Node, error) {
	var all []corev1.Node
	opts := metav1.ListOptions{LabelSelector: d.opts.NodeSelector, Limit: listChunk}
	for {
		page, err := d.client.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing nodes: %w", err)
		}
		all = append(all, page.Items...)
		if page.Continue == "" {
			return all, nil
		}
		opts.Continue = page.Continue
	}
}

// markDaemonSetsReady clears DaemonSetsReady of every node with a DaemonSet pod that is not Ready.
func (d *Drainer) markDaemonSetsReady(ctx context.Context, nodes map[string]Node, byName map[string]string) error {
	opts := metav1.ListOptions{Limit: listChunk}
	for {
		page, err := d.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing pods for DaemonSet readiness: %w", err)
		}
		for i := range page.Items {
			p := &page.Items[i]
			id, ok := byName[p.Spec.NodeName]
			if !ok || !ownedByDaemonSet(p) || p.DeletionTimestamp != nil {
				continue
			}
			if !podReady(p) {
				n := nodes[id]
				n.DaemonSetsReady = false
				nodes[id] = n
			}
		}
		if page.Continue == "" {
			return nil
		}
		opts.Continue = page.Continue
	}
}

// Find returns the node of an instance, or ErrNotRegistered.
func (d *Drainer) Find(ctx context.Context, instanceID string) (*corev1.Node, error) {
	d.mu.Lock()
	name := d.names[instanceID]
	d.mu.Unlock()
	if name != "" {
		n, err := d.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			if id, _, ok := ParseProviderID(n.Spec.ProviderID); ok && id == instanceID {
				return n, nil
			}
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("reading node %s of instance %s: %w", name, instanceID, err)
		}
	}
	nodes, err := d.listNodes(ctx)
	if err != nil {
		return nil, err
	}
	for i := range nodes {
		if id, _, ok := ParseProviderID(nodes[i].Spec.ProviderID); ok && id == instanceID {
			d.mu.Lock()
			d.names[instanceID] = nodes[i].Name
			d.mu.Unlock()
			return &nodes[i], nil
		}
	}
	return nil, fmt.Errorf("instance %s: %w", instanceID, ErrNotRegistered)
}

// helper returns the kubectl drain settings of this Drainer.
func (d *Drainer) helper(ctx context.Context) *drain.Helper {
	grace := -1
	if g := d.opts.GracePeriodSeconds; g != nil {
		grace = int(*g)
	}
	return &drain.Helper{
		Ctx:                             ctx,
		Client:                          d.client,
		Force:                           d.opts.Force,
		GracePeriodSeconds:              grace,
		IgnoreAllDaemonSets:             true,
		DeleteEmptyDirData:              d.opts.DeleteEmptyDirData,
		DisableEviction:                 false,
		SkipWaitForDeleteTimeoutSeconds: int(d.opts.SkipWaitForDeleteTimeout / time.Second),
		ChunkSize:                       listChunk,
		Out:                             io.Discard,
		ErrOut:                          io.Discard,
	}
}

// Cordon marks the node unschedulable (idempotent).
func (d *Drainer) Cordon(ctx context.Context, node *corev1.Node) error {
	if err := drain.RunCordonOrUncordon(d.helper(ctx), node, true); err != nil {
		return fmt.Errorf("cordoning node %s: %w", node.Name, err)
	}
	return nil
}

// Uncordon marks the node schedulable again (idempotent) and forgets its eviction backoffs.
func (d *Drainer) Uncordon(ctx context.Context, node *corev1.Node) error {
	if err := drain.RunCordonOrUncordon(d.helper(ctx), node, false); err != nil {
		return fmt.Errorf("uncordoning node %s: %w", node.Name, err)
	}
	d.mu.Lock()
	delete(d.retries, node.Name)
	d.mu.Unlock()
	return nil
}

// Status is the result of one look at a node's drain.
type Status struct {
	// Drained is true when no pod that the drain must move is left on the node (DaemonSet and mirror pods,
	// and finished pods, do not count).
	Drained bool `json:"drained"`
	// Remaining counts the pods still blocking the drain: evictable pods not gone yet (shutting down ones
	// included) and pods the options forbid evicting.
	Remaining int `json:"remaining"`
	// Evicted counts evictions the API accepted in this look.
	Evicted int `json:"evicted"`
	// Terminating counts remaining pods that are shutting down (their eviction was accepted).
	Terminating int `json:"terminating"`
	// Blocked counts remaining pods whose last eviction was refused with 429: a PodDisruptionBudget allows
	// no disruption now. They are asked again after their backoff.
	Blocked int `json:"blocked"`
	// Failed counts remaining pods whose last eviction failed otherwise (retried after their backoff).
	Failed int `json:"failed"`
	// NotEvictable counts pods the options forbid evicting (no controller without Force, emptyDir without
	// DeleteEmptyDirData, a DaemonSet pod whose DaemonSet is gone).
	NotEvictable int `json:"notEvictable"`
	// Detail says what blocks the drain, for status and logs.
	Detail string `json:"detail"`
}

// StartDrain cordons the node and asks once for the eviction of every evictable pod on it; refused or
// failed evictions are left to DrainStatus (and named in Status.Detail). It returns the errors of cordoning
// and of listing the node's pods.
func (d *Drainer) StartDrain(ctx context.Context, node *corev1.Node) (Status, error) {
	if err := d.Cordon(ctx, node); err != nil {
		return Status{}, err
	}
	return d.Evict(ctx, node.Name)
}

// DrainStatus reports the drain of a node: a node that is not cordoned is not draining; otherwise it asks
// again for the eviction of every remaining pod whose backoff has passed, and reports what is left.
func (d *Drainer) DrainStatus(ctx context.Context, node *corev1.Node) (Status, error) {
	if !node.Spec.Unschedulable {
		return Status{Detail: fmt.Sprintf("node %s is not cordoned", node.Name)}, nil
	}
	return d.Evict(ctx, node.Name)
}

// Evict takes one pass over the pods on the node: each evictable pod that is not shutting down and whose
// backoff has passed is asked for eviction once. It never waits.
func (d *Drainer) Evict(ctx context.Context, nodeName string) (Status, error) {
	h := d.helper(ctx)
	list, errs := h.GetPodsForDeletion(nodeName)
	if list == nil {
		return Status{}, fmt.Errorf("listing pods of node %s: %w", nodeName, errors.Join(errs...))
	}
	var st Status
	var notes []string
	for _, e := range errs {
		st.NotEvictable += countPodsInFilterError(e)
		notes = append(notes, "not evictable: "+e.Error())
	}
	now := d.opts.Clock.Now()
	seen := map[types.UID]bool{}
	var blockedMsg string
	var nextRetry time.Time
	for _, pod := range list.Pods() {
		seen[pod.UID] = true
		if pod.DeletionTimestamp != nil {
			st.Remaining++
			st.Terminating++
			continue
		}
		d.mu.Lock()
		var r *retry
		if prev := d.retries[nodeName][pod.UID]; prev != nil {
			cp := *prev
			r = &cp
		}
		d.mu.Unlock()
		if r != nil && now.Before(r.next) {
			st.Remaining++
			if r.blocked {
				st.Blocked++
				blockedMsg = r.last
			} else {
				st.Failed++
			}
			if nextRetry.IsZero() || r.next.Before(nextRetry) {
				nextRetry = r.next
			}
			continue
		}
		err := d.evict(ctx, pod)
		switch {
		case err == nil:
			st.Evicted++
			st.Remaining++ // still on the node until it has shut down; the next look sees it gone
			d.forget(nodeName, pod.UID)
		case apierrors.IsNotFound(err):
			d.forget(nodeName, pod.UID) // gone already
		default:
			// 429 from a PodDisruptionBudget, and also 403 (RBAC missing pods/eviction, or a
			// PodDisruptionBudget the API server refuses to use) and 5xx: the pod waits for its backoff and the
			// message goes into Detail, so the drain deadline still ends the wait with a reason that names it.
			st.Remaining++
			r := d.refused(nodeName, pod.UID, now, err)
			if r.blocked {
				st.Blocked++
				blockedMsg = r.last
			} else {
				st.Failed++
				notes = append(notes, fmt.Sprintf("eviction of %s/%s failed: %s", pod.Namespace, pod.Name, r.last))
			}
			if nextRetry.IsZero() || r.next.Before(nextRetry) {
				nextRetry = r.next
			}
		}
	}
	d.mu.Lock()
	for uid := range d.retries[nodeName] {
		if !seen[uid] {
			delete(d.retries[nodeName], uid)
		}
	}
	if len(d.retries[nodeName]) == 0 {
		delete(d.retries, nodeName)
	}
	d.mu.Unlock()
	st.Remaining += st.NotEvictable
	st.Drained = st.Remaining == 0
	st.Detail = describe(st, blockedMsg, nextRetry, now, notes)
	return st, nil
}

// evict asks once for the eviction of pod through policy/v1 Eviction, as drain.Helper.EvictPod does, but
// without client-go's own retries: on a 429 with Retry-After (what a PodDisruptionBudget answers) client-go
// would sleep and retry up to 10 times inside the call, blocking the orchestrator's tick for minutes. The
// retry belongs to the pod's backoff instead. Clients without a REST client (the fake clientset) take the
// typed call.
func (d *Drainer) evict(ctx context.Context, pod corev1.Pod) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
	if g := d.opts.GracePeriodSeconds; g != nil {
		grace := *g
		ev.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: &grace}
	}
	if rc, ok := d.client.PolicyV1().RESTClient().(*rest.RESTClient); ok && rc != nil {
		return rc.Post().AbsPath("/api/v1").Namespace(pod.Namespace).Resource("pods").Name(pod.Name).
			SubResource("eviction").Body(ev).MaxRetries(0).Do(ctx).Error()
	}
	return d.client.PolicyV1().Evictions(pod.Namespace).Evict(ctx, ev)
}

// refused records a refused eviction and returns the pod's backoff.
func (d *Drainer) refused(nodeName string, uid types.UID, now time.Time, err error) retry {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.retries[nodeName] == nil {
		d.retries[nodeName] = map[types.UID]*retry{}
	}
	r := d.retries[nodeName][uid]
	if r == nil {
		r = &retry{}
		d.retries[nodeName][uid] = r
	}
	r.attempts++
	r.blocked = apierrors.IsTooManyRequests(err)
	r.last = apiMessage(err)
	r.next = now.Add(d.opts.Backoff(r.attempts))
	return *r
}

func (d *Drainer) forget(nodeName string, uid types.UID) {
	d.mu.Lock()
	delete(d.retries[nodeName], uid)
	d.mu.Unlock()
}

// RefusedEvictions returns how many evictions of the pods still on the node were refused since their last
// success, summed over the pods (for tests and status).
func (d *Drainer) RefusedEvictions(nodeName string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, r := range d.retries[nodeName] {
		n += r.attempts
	}
	return n
}

func describe(st Status, blockedMsg string, nextRetry, now time.Time, notes []string) string {
	if st.Drained {
		return "no pod left to evict (DaemonSet and mirror pods stay)"
	}
	parts := []string{fmt.Sprintf("%d pod(s) left", st.Remaining)}
	if st.Evicted > 0 {
		parts = append(parts, fmt.Sprintf("%d eviction(s) accepted now", st.Evicted))
	}
	if st.Terminating > 0 {
		parts = append(parts, fmt.Sprintf("%d shutting down", st.Terminating))
	}
	if st.Blocked > 0 {
		msg := fmt.Sprintf("%d refused by a PodDisruptionBudget (429", st.Blocked)
		if blockedMsg != "" {
			msg += ": " + blockedMsg
		}
		parts = append(parts, msg+")")
	}
	if st.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d eviction(s) failed", st.Failed))
	}
	if !nextRetry.IsZero() {
		parts = append(parts, "next eviction retry in "+nextRetry.Sub(now).Round(time.Second).String())
	}
	sort.Strings(notes)
	return strings.Join(append(parts, notes...), "; ")
}

// countPodsInFilterError counts the pods named in one of kubectl drain's filter errors ("cannot delete
// <reason>: ns/a, ns/b").
func countPodsInFilterError(err error) int {
	msg := err.Error()
	i := strings.LastIndex(msg, ": ")
	if i < 0 {
		return 1
	}
	return len(strings.Split(msg[i+2:], ", "))
}

// apiMessage returns the Kubernetes API's message of err (without the client's decoration).
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func ownedByDaemonSet(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet"
}
