package eksupgrade

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Kinds of the workflow's Kubernetes steps (state.WorkflowStep.Kind).
const (
	// KindSelfManagedAddon updates a self-managed add-on (aws-node, coredns or kube-proxy installed as a plain
	// DaemonSet or Deployment, not an EKS add-on) in place: its container image tag.
	KindSelfManagedAddon = "self-managed-addon"
	// KindFargateRestart restarts a Deployment or StatefulSet whose pods run on Fargate, so that Fargate starts
	// them again on a kubelet of the control plane's new version.
	KindFargateRestart = "fargate-restart"
)

// Kubernetes names the workflow reads.
const (
	// LabelComputeType is the label of the nodes Fargate runs pods on (value "fargate"): Amazon EKS User Guide,
	// "Simplify compute management with AWS Fargate".
	LabelComputeType = "eks.amazonaws.com/compute-type"
	// AnnotationRestartedAt is the pod template annotation `kubectl rollout restart` sets (to the time, RFC
	// 3339): changing it makes the controller replace every pod under the workload's update strategy.
	AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"
	kubeSystem            = "kube-system"
)

// selfManagedAddon is an add-on EKS also offers as an EKS add-on, which a cluster may run as a plain workload
// in kube-system instead (Amazon EKS User Guide, "Update existing cluster to new Kubernetes version": the
// Amazon VPC CNI plugin, CoreDNS and kube-proxy are updated after the control plane, self-managed or not).
type selfManagedAddon struct {
	workload, kind, addon string
}

// selfManagedAddons are in the order the User Guide updates them.
var selfManagedAddons = []selfManagedAddon{
	{workload: "aws-node", kind: "DaemonSet", addon: "vpc-cni"},
	{workload: "coredns", kind: "Deployment", addon: "coredns"},
	{workload: "kube-proxy", kind: "DaemonSet", addon: "kube-proxy"},
}

func selfManagedAddonOf(workload string) (selfManagedAddon, bool) {
	for _, s := range selfManagedAddons {
		if s.workload == workload {
			return s, true
		}
	}
	return selfManagedAddon{}, false
}

// planOptions are the opt-ins of a workflow (Request, kept in state.Workflow).
type planOptions struct {
	restartFargate, updateSelfManagedAddons bool
}

// imageTag splits an image reference into repository and tag ("" when it has none or is pinned by digest).
func imageTag(image string) (repo, tag string) {
	if strings.Contains(image, "@") {
		return image, ""
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return image, ""
	}
	return image[:i], image[i+1:]
}

// addonVersionOfTag returns the EKS add-on version an image tag of a self-managed add-on corresponds to:
// kube-proxy's "minimal" image is tagged vX.Y.Z-minimal-eksbuild.N for add-on version vX.Y.Z-eksbuild.N.
func addonVersionOfTag(tag string) string {
	return strings.Replace(tag, "-minimal-eksbuild.", "-eksbuild.", 1)
}

// tagOfAddonVersion is the image tag of add-on version v in the image variant of installedTag.
func tagOfAddonVersion(v, installedTag string) string {
	if strings.Contains(installedTag, "-minimal-eksbuild.") {
		return strings.Replace(v, "-eksbuild.", "-minimal-eksbuild.", 1)
	}
	return v
}

// podTemplate returns the pod template of a self-managed add-on's workload, or nil when it does not exist.
func (r *Runner) addonTemplate(ctx context.Context, s selfManagedAddon) (*corev1.PodTemplateSpec, error) {
	switch s.kind {
	case "DaemonSet":
		ds, err := r.Kube.AppsV1().DaemonSets(kubeSystem).Get(ctx, s.workload, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading DaemonSet %s/%s: %w", kubeSystem, s.workload, err)
		}
		return &ds.Spec.Template, nil
	default:
		d, err := r.Kube.AppsV1().Deployments(kubeSystem).Get(ctx, s.workload, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading Deployment %s/%s: %w", kubeSystem, s.workload, err)
		}
		return &d.Spec.Template, nil
	}
}

// mainTag is the image tag of the add-on's own container (named like the workload; else the first).
func mainTag(s selfManagedAddon, t *corev1.PodTemplateSpec) string {
	for _, c := range t.Spec.Containers {
		if c.Name == s.workload {
			_, tag := imageTag(c.Image)
			return tag
		}
	}
	if len(t.Spec.Containers) > 0 {
		_, tag := imageTag(t.Spec.Containers[0].Image)
		return tag
	}
	return ""
}

// planSelfManagedAddons reports aws-node, coredns and kube-proxy when they run in kube-system as plain
// workloads that ListAddons does not name, with the version recommended for the target (chooseAddon: the
// DescribeAddonVersions default for it, never older than the installed version, the EKS add-on rule), and plans
// one step per add-on that must move: updated in place after the control plane moved when the workflow opted
// in (updateSelfManagedAddons), an action for the operator otherwise. The version is read from the image tag.
func (r *Runner) planSelfManagedAddons(ctx context.Context, p *plan, to string, opts planOptions) error {
	managed := map[string]bool{}
	for _, s := range p.steps {
		if s.Kind == KindAddon {
			managed[s.Name] = true
		}
	}
	if r.Kube == nil {
		p.check("self-managed add-ons", CheckWarn, "no Kubernetes access: aws-node, coredns and kube-proxy were not looked for outside the EKS add-ons")
		return nil
	}
	for _, s := range selfManagedAddons {
		if managed[s.addon] {
			continue
		}
		t, err := r.addonTemplate(ctx, s)
		if err != nil {
			return err
		}
		if t == nil {
			continue
		}
		check := "self-managed add-on " + s.workload
		tag := mainTag(s, t)
		installed := addonVersionOfTag(tag)
		choice, err := r.chooseAddon(ctx, s.addon, installed, to)
		if err != nil {
			return err
		}
		if choice.fail != "" {
			p.check(check, CheckFail, "%s %s/%s (not an EKS add-on), image tag %q: %s", s.kind, kubeSystem, s.workload, tag, choice.fail)
			continue
		}
		target := tagOfAddonVersion(choice.to, tag)
		st := state.WorkflowStep{Kind: KindSelfManagedAddon, Name: s.workload, From: tag, To: target, Status: state.StepStatusPending}
		switch {
		case choice.to == installed:
			st.Status, st.Detail = state.StepStatusSkipped, choice.reason
			p.check(check, CheckPass, "%s %s/%s (not an EKS add-on): %s", s.kind, kubeSystem, s.workload, choice.reason)
		case opts.updateSelfManagedAddons:
			p.check(check, CheckPass, "%s %s/%s (not an EKS add-on): %s; its image tag is updated in place after the control plane moved", s.kind, kubeSystem, s.workload, choice.reason)
		default:
			st.Action = fmt.Sprintf("%s %s/%s is not an EKS add-on: set its image tag to %s (recommended for Kubernetes %s), or run with --update-self-managed-addons",
				s.kind, kubeSystem, s.workload, target, to)
			p.check(check, CheckWarn, "%s %s/%s (not an EKS add-on): %s; not updated without --update-self-managed-addons", s.kind, kubeSystem, s.workload, choice.reason)
		}
		p.steps = append(p.steps, st)
	}
	return nil
}

// kubeletMinor reads the minor version of a kubelet version ("v1.30.4-eks-a737599" -> 30).
func kubeletMinor(v string) (string, error) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("kubelet version %q is not v1.MINOR.PATCH", v)
	}
	mm := parts[0] + "." + parts[1]
	if _, err := eks.ParseVersion(mm); err != nil {
		return "", err
	}
	return mm, nil
}

// fargatePod is a pod on a Fargate node with the node's kubelet version and the workload that owns it.
type fargatePod struct {
	namespace, name, node, kubelet string
	workload                       string // "namespace/Kind/name"; "" when no Deployment or StatefulSet owns it
}

// checkFargate reads the cluster's Fargate profiles (ListFargateProfiles, DescribeFargateProfile) and the pods
// on its Fargate nodes (nodes labelled eks.amazonaws.com/compute-type=fargate, one pod each; the kubelet version
// from the node's status). A Fargate kubelet older than the control plane fails the preflight: the Amazon EKS
// User Guide ("Update existing cluster to new Kubernetes version") requires the Fargate nodes, like the managed
// nodes, to be on the control plane's minor version before it is updated; and a Fargate pod keeps its kubelet
// until it is restarted ("AWS Fargate OS patching for Amazon EKS": a pod picks up a new kubelet only when
// Fargate starts it again). Once the control plane moved every Fargate pod is behind it: with restartFargate
// one step per Deployment or StatefulSet that owns one restarts it (AnnotationRestartedAt, as `kubectl rollout
// restart`); without, a warning says to.
func (r *Runner) checkFargate(ctx context.Context, p *plan, cluster, to string, opts planOptions) error {
	profiles := 0
	pages := awseks.NewListFargateProfilesPaginator(r.EKS, &awseks.ListFargateProfilesInput{ClusterName: aws.String(cluster)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the Fargate profiles of EKS cluster %s: %w", cluster, err)
		}
		for _, name := range page.FargateProfileNames {
			d, err := r.EKS.DescribeFargateProfile(ctx, &awseks.DescribeFargateProfileInput{ClusterName: aws.String(cluster), FargateProfileName: aws.String(name)})
			if err != nil {
				return fmt.Errorf("describing Fargate profile %s of EKS cluster %s: %w", name, cluster, err)
			}
			if d.FargateProfile == nil {
				return fmt.Errorf("describing Fargate profile %s of EKS cluster %s: empty response", name, cluster)
			}
			profiles++
			var ns []string
			for _, s := range d.FargateProfile.Selectors {
				ns = append(ns, aws.ToString(s.Namespace))
			}
			check := "fargate profile " + name
			if st := d.FargateProfile.Status; st != ekstypes.FargateProfileStatusActive {
				p.check(check, CheckWarn, "%s, not ACTIVE (namespaces %s)", st, strings.Join(ns, ", "))
			} else {
				p.check(check, CheckPass, "ACTIVE, namespaces %s", strings.Join(ns, ", "))
			}
		}
	}
	if r.Kube == nil {
		if profiles > 0 {
			p.check("fargate pods", CheckWarn, "no Kubernetes access: the kubelet versions of the Fargate nodes were not read")
		}
		return nil
	}
	pods, err := r.fargatePods(ctx)
	if err != nil {
		return err
	}
	if len(pods) == 0 {
		if profiles > 0 {
			p.check("fargate pods", CheckPass, "no pod runs on Fargate")
		}
		return nil
	}
	var behind, orphans []string
	workloads := map[string]string{} // workload -> kubelet
	for _, fp := range pods {
		if err := CheckSkew(fp.kubelet, p.from); err != nil || fp.kubelet != p.from {
			why := fmt.Sprintf("kubelet %s, the control plane %s", fp.kubelet, p.from)
			if err != nil {
				why = err.Error()
			}
			behind = append(behind, fmt.Sprintf("%s/%s on %s (%s)", fp.namespace, fp.name, fp.node, why))
		}
		if fp.workload == "" {
			orphans = append(orphans, fp.namespace+"/"+fp.name)
		} else if _, ok := workloads[fp.workload]; !ok {
			workloads[fp.workload] = fp.kubelet
		}
	}
	if len(behind) > 0 {
		p.check("fargate pods", CheckFail, "%s: Fargate nodes must be on the control plane's version before it moves (Amazon EKS User Guide, \"Update existing cluster to new Kubernetes version\"); "+
			"restart their workloads (kubectl rollout restart) so Fargate starts them on a kubelet %s", strings.Join(behind, ", "), p.from)
	} else {
		p.check("fargate pods", CheckPass, "%d pod(s) on Fargate, kubelet %s (the control plane's version)", len(pods), p.from)
	}
	names := make([]string, 0, len(workloads))
	for n := range workloads {
		names = append(names, n)
	}
	slices.Sort(names)
	switch {
	case opts.restartFargate:
		p.check("fargate restart", CheckPass, "%d workload(s) restarted one at a time after the control plane moved, each once its PodDisruptionBudget allows a disruption: %s",
			len(names), strings.Join(names, ", "))
	default:
		p.check("fargate restart", CheckWarn, "Fargate pods keep their kubelet until restarted: after the upgrade restart %s (kubectl rollout restart), or run with --restart-fargate",
			strings.Join(names, ", "))
	}
	if len(orphans) > 0 {
		p.check("fargate pods without a workload", CheckWarn, "%s: no Deployment or StatefulSet owns them; delete them once the control plane moved so that Fargate starts them on a new kubelet",
			strings.Join(orphans, ", "))
	}
	if opts.restartFargate {
		for _, n := range names {
			p.steps = append(p.steps, state.WorkflowStep{Kind: KindFargateRestart, Name: n, From: workloads[n], To: to, Status: state.StepStatusPending})
		}
	}
	return nil
}

// fargatePods lists the pods on Fargate nodes (not yet finished), with their kubelet and owning workload.
func (r *Runner) fargatePods(ctx context.Context) ([]fargatePod, error) {
	nodes, err := r.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelComputeType + "=fargate"})
	if err != nil {
		return nil, fmt.Errorf("listing the Fargate nodes: %w", err)
	}
	var out []fargatePod
	for _, n := range nodes.Items {
		kubelet, err := kubeletMinor(n.Status.NodeInfo.KubeletVersion)
		if err != nil {
			return nil, fmt.Errorf("Fargate node %s: %w", n.Name, err)
		}
		pods, err := r.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return nil, fmt.Errorf("listing the pods of Fargate node %s: %w", n.Name, err)
		}
		for _, pod := range pods.Items {
			if pod.Spec.NodeName != n.Name || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			w, err := r.ownerWorkload(ctx, &pod)
			if err != nil {
				return nil, err
			}
			out = append(out, fargatePod{namespace: pod.Namespace, name: pod.Name, node: n.Name, kubelet: kubelet, workload: w})
		}
	}
	return out, nil
}

// ownerWorkload names the Deployment (through its ReplicaSet) or StatefulSet that controls a pod,
// "namespace/Kind/name", or "" when none does.
func (r *Runner) ownerWorkload(ctx context.Context, pod *corev1.Pod) (string, error) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return "", nil
	}
	switch ref.Kind {
	case "StatefulSet":
		return pod.Namespace + "/StatefulSet/" + ref.Name, nil
	case "ReplicaSet":
		rs, err := r.Kube.AppsV1().ReplicaSets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("reading ReplicaSet %s/%s of pod %s: %w", pod.Namespace, ref.Name, pod.Name, err)
		}
		if d := metav1.GetControllerOf(rs); d != nil && d.Kind == "Deployment" {
			return pod.Namespace + "/Deployment/" + d.Name, nil
		}
	}
	return "", nil
}

// splitWorkload parses "namespace/Kind/name".
func splitWorkload(s string) (ns, kind, name string, err error) {
	parts := strings.Split(s, "/")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" || (parts[1] != "Deployment" && parts[1] != "StatefulSet") {
		return "", "", "", fmt.Errorf("workload %q is not namespace/Deployment|StatefulSet/name", s)
	}
	return parts[0], parts[1], parts[2], nil
}

// kubeStep is how one Kubernetes step of the workflow changes and watches its workload.
type kubeStep struct {
	what string
	// precheck reads the workload before the change: proceed, skip (nothing to do), action (the operator's:
	// not opted in), refuse (halt), or hold (wait: the run stops with detail as its reason).
	precheck func(ctx context.Context) (outcome int, detail string, err error)
	// apply makes the change, idempotently: a workload that already shows it is left alone.
	apply func(ctx context.Context) error
	// rolled reports whether the workload's controller finished replacing its pods.
	rolled func(ctx context.Context) (bool, string, error)
}

// hold is a precheck outcome of a Kubernetes step: not now (a PodDisruptionBudget allows no disruption).
const hold = refuse + 1

// kubeUpdate runs one Kubernetes step in the same three writes as an EKS update: Requested (written before the
// change, with the restartedAt value as its token), the change, InProgress, then Completed once the workload's
// rollout finished (at most MaxWait; else an error, and a new run keeps waiting). A run that resumes a Requested
// step applies the change again, which changes nothing when it was made: a crash never makes a second rollout.
func (r *Runner) kubeUpdate(ctx context.Context, w state.Workflow, c kubeStep) (state.Workflow, error) {
	if r.Kube == nil {
		return w, fmt.Errorf("%s: no Kubernetes access (the workflow planned a Kubernetes step; run with a kubeconfig)", c.what)
	}
	st := &w.Steps[w.Current]
	now := r.now()
	if st.Status == state.StepStatusPending {
		outcome, detail, err := c.precheck(ctx)
		if err != nil {
			return w, err
		}
		if w, ended, err := r.endByPrecheck(ctx, w, outcome, detail); ended {
			return w, err
		}
		reason, err := r.pauseReason(ctx, w, c.what)
		if err != nil {
			return w, err
		}
		if reason != "" {
			return r.hold(ctx, w, reason)
		}
		st.Status, st.Token, st.By, st.StartedAt, st.Detail = state.StepStatusRequested, now.UTC().Format(time.RFC3339), r.Who, now, ""
		w.Phase, w.Reason = state.WorkflowRunning, ""
		if w, err = r.save(ctx, w, c.what+": requested", r.entry(w, st.Kind+"-requested", *st, "")); err != nil {
			return w, err
		}
		st = &w.Steps[w.Current]
	}
	if st.Status == state.StepStatusRequested {
		if err := c.apply(ctx); err != nil {
			return w, fmt.Errorf("%s: %w", c.what, err)
		}
		st.Status = state.StepStatusInProgress
		w.Phase, w.Reason = state.WorkflowRunning, ""
		return r.save(ctx, w, c.what+": rolling", r.entry(w, st.Kind+"-started", *st, ""))
	}
	began := r.now()
	for attempt := 1; ; attempt++ {
		done, progress, err := c.rolled(ctx)
		if err != nil {
			return w, fmt.Errorf("%s: %w", c.what, err)
		}
		if done {
			cur := &w.Steps[w.Current]
			cur.Status, cur.CompletedAt = state.StepStatusCompleted, r.now()
			completed := *cur
			w.Current++
			return r.save(ctx, w, c.what+": rolled out", r.entry(w, completed.Kind+"-completed", completed, ""))
		}
		now := r.now()
		if now.Sub(began) > r.maxWait() {
			return w, fmt.Errorf("%s: rollout not finished after %s (%s): run again to keep waiting", c.what, r.maxWait(), progress)
		}
		d := r.backoff(attempt)
		if w.LeaseExpires.Sub(now) < d+r.leaseTTL()/2 {
			if w, err = r.save(ctx, w, leaseRenewed); err != nil {
				return w, err
			}
		}
		if err := r.wait(ctx, d); err != nil {
			return w, err
		}
	}
}

// updateSelfManagedAddon updates a self-managed add-on's image tag in place (every container and init
// container of its pod template on the installed tag; the rest of the spec is kept), after the control plane
// moved, and waits for its rollout (DaemonSet: updatedNumberScheduled and numberAvailable at
// desiredNumberScheduled; Deployment: updated and available replicas at the desired count). An add-on found at
// a newer version than planned halts the step: it is never downgraded.
func (r *Runner) updateSelfManagedAddon(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	st := w.Steps[w.Current]
	s, ok := selfManagedAddonOf(st.Name)
	if !ok {
		return w, fmt.Errorf("step %s %s: not a self-managed add-on", st.Kind, st.Name)
	}
	what := fmt.Sprintf("%s %s/%s image %s -> %s", s.kind, kubeSystem, s.workload, st.From, st.To)
	retag := func(t *corev1.PodTemplateSpec) bool {
		changed := false
		for _, cs := range [][]corev1.Container{t.Spec.InitContainers, t.Spec.Containers} {
			for i := range cs {
				if repo, tag := imageTag(cs[i].Image); tag == st.From {
					cs[i].Image, changed = repo+":"+st.To, true
				}
			}
		}
		return changed
	}
	return r.kubeUpdate(ctx, w, kubeStep{what: what,
		precheck: func(ctx context.Context) (int, string, error) {
			if !w.UpdateSelfManagedAddons {
				return action, st.Action, nil
			}
			t, err := r.addonTemplate(ctx, s)
			if err != nil || t == nil {
				return refuse, fmt.Sprintf("%s %s/%s no longer exists", s.kind, kubeSystem, s.workload), err
			}
			cur := mainTag(s, t)
			c, cerr := ParseAddonVersion(addonVersionOfTag(cur))
			target, terr := ParseAddonVersion(addonVersionOfTag(st.To))
			switch {
			case cur == st.To:
				return skip, "already at " + st.To, nil
			case cerr != nil || terr != nil:
				return refuse, fmt.Sprintf("image tag %s cannot be compared with %s: never updated blindly", cur, st.To), nil
			case c.Compare(target) > 0:
				return refuse, fmt.Sprintf("found at %s, newer than the planned %s: a self-managed add-on is never downgraded (run again with --retry to plan it again)", cur, st.To), nil
			}
			return proceed, "", nil
		},
		apply: func(ctx context.Context) error {
			if s.kind == "DaemonSet" {
				ds, err := r.Kube.AppsV1().DaemonSets(kubeSystem).Get(ctx, s.workload, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if retag(&ds.Spec.Template) {
					_, err = r.Kube.AppsV1().DaemonSets(kubeSystem).Update(ctx, ds, metav1.UpdateOptions{})
				}
				return err
			}
			d, err := r.Kube.AppsV1().Deployments(kubeSystem).Get(ctx, s.workload, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if retag(&d.Spec.Template) {
				_, err = r.Kube.AppsV1().Deployments(kubeSystem).Update(ctx, d, metav1.UpdateOptions{})
			}
			return err
		},
		rolled: func(ctx context.Context) (bool, string, error) {
			if s.kind == "DaemonSet" {
				ds, err := r.Kube.AppsV1().DaemonSets(kubeSystem).Get(ctx, s.workload, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				return daemonSetRolled(ds)
			}
			d, err := r.Kube.AppsV1().Deployments(kubeSystem).Get(ctx, s.workload, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return deploymentRolled(d)
		},
	})
}

func daemonSetRolled(ds *appsv1.DaemonSet) (bool, string, error) {
	s := ds.Status
	progress := fmt.Sprintf("%d of %d updated, %d available", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberAvailable)
	return s.ObservedGeneration >= ds.Generation && s.UpdatedNumberScheduled == s.DesiredNumberScheduled && s.NumberAvailable == s.DesiredNumberScheduled, progress, nil
}

func deploymentRolled(d *appsv1.Deployment) (bool, string, error) {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	progress := fmt.Sprintf("%d of %d updated, %d available, %d in all", s.UpdatedReplicas, want, s.AvailableReplicas, s.Replicas)
	return s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want, progress, nil
}

func statefulSetRolled(ss *appsv1.StatefulSet) (bool, string, error) {
	want := int32(1)
	if ss.Spec.Replicas != nil {
		want = *ss.Spec.Replicas
	}
	s := ss.Status
	progress := fmt.Sprintf("%d of %d updated, %d ready", s.UpdatedReplicas, want, s.ReadyReplicas)
	return s.ObservedGeneration >= ss.Generation && s.UpdatedReplicas == want && s.ReadyReplicas == want && s.CurrentRevision == s.UpdateRevision, progress, nil
}

// restartFargate restarts one Deployment or StatefulSet with pods on Fargate after the control plane moved
// (AnnotationRestartedAt on its pod template, to the step's token: the same value on a resumed run), once no
// PodDisruptionBudget selecting its pods is at zero allowed disruptions (else the workflow waits, naming the
// budget, and a new run looks again), and waits for its rollout.
func (r *Runner) restartFargate(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	st := w.Steps[w.Current]
	ns, kind, name, err := splitWorkload(st.Name)
	if err != nil {
		return r.halt(ctx, w, err.Error())
	}
	what := fmt.Sprintf("restart of %s %s/%s (Fargate)", kind, ns, name)
	template := func(ctx context.Context) (*corev1.PodTemplateSpec, error) {
		if kind == "StatefulSet" {
			ss, err := r.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return &ss.Spec.Template, nil
		}
		d, err := r.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return &d.Spec.Template, nil
	}
	stamp := func(t *corev1.PodTemplateSpec, token string) bool {
		if t.Annotations[AnnotationRestartedAt] == token {
			return false
		}
		if t.Annotations == nil {
			t.Annotations = map[string]string{}
		}
		t.Annotations[AnnotationRestartedAt] = token
		return true
	}
	return r.kubeUpdate(ctx, w, kubeStep{what: what,
		precheck: func(ctx context.Context) (int, string, error) {
			t, err := template(ctx)
			if apierrors.IsNotFound(err) {
				return skip, fmt.Sprintf("%s %s/%s no longer exists", kind, ns, name), nil
			}
			if err != nil {
				return 0, "", fmt.Errorf("%s: %w", what, err)
			}
			blocked, err := r.blockingBudgets(ctx, ns, t.Labels)
			if err != nil {
				return 0, "", fmt.Errorf("%s: %w", what, err)
			}
			if len(blocked) > 0 {
				return hold, fmt.Sprintf("%s waits: PodDisruptionBudget %s allows no disruption now; run again once it does", what, strings.Join(blocked, ", ")), nil
			}
			return proceed, "", nil
		},
		apply: func(ctx context.Context) error {
			token := w.Steps[w.Current].Token
			if kind == "StatefulSet" {
				ss, err := r.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if stamp(&ss.Spec.Template, token) {
					_, err = r.Kube.AppsV1().StatefulSets(ns).Update(ctx, ss, metav1.UpdateOptions{})
				}
				return err
			}
			d, err := r.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if stamp(&d.Spec.Template, token) {
				_, err = r.Kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
			}
			return err
		},
		rolled: func(ctx context.Context) (bool, string, error) {
			if kind == "StatefulSet" {
				ss, err := r.Kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return false, "", err
				}
				return statefulSetRolled(ss)
			}
			d, err := r.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return deploymentRolled(d)
		},
	})
}

// blockingBudgets names the PodDisruptionBudgets of namespace ns that select pods with labels podLabels and
// allow no disruption now (status.disruptionsAllowed 0): restarting the workload would take a pod the budget
// protects (Kubernetes documentation, "Specifying a Disruption Budget for your Application").
func (r *Runner) blockingBudgets(ctx context.Context, ns string, podLabels map[string]string) ([]string, error) {
	pdbs, err := r.Kube.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the PodDisruptionBudgets of %s: %w", ns, err)
	}
	var out []string
	for _, pdb := range pdbs.Items {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(podLabels)) {
			continue
		}
		if pdb.Status.DisruptionsAllowed < 1 {
			out = append(out, fmt.Sprintf("%s/%s (%d healthy, %d desired healthy)", ns, pdb.Name, pdb.Status.CurrentHealthy, pdb.Status.DesiredHealthy))
		}
	}
	return out, nil
}

// options are the opt-ins of a plan: the request's, and those of the unfinished upgrade it replans (a run never
// drops them, as it never lifts the two-person rule).
func (r *Runner) options(prev state.Workflow, req Request) planOptions {
	same := prev.To == req.To && prev.Phase != state.WorkflowCompleted
	return planOptions{restartFargate: req.RestartFargate || (same && prev.RestartFargate),
		updateSelfManagedAddons: req.UpdateSelfManagedAddons || (same && prev.UpdateSelfManagedAddons)}
}

// replanSelfManagedAddon plans a retried self-managed add-on step again from the image tag it has now (by the
// rule of planSelfManagedAddons): found newer than planned, it is kept there, never downgraded.
func (r *Runner) replanSelfManagedAddon(ctx context.Context, to string, st *state.WorkflowStep) error {
	s, ok := selfManagedAddonOf(st.Name)
	if !ok || r.Kube == nil {
		return nil
	}
	t, err := r.addonTemplate(ctx, s)
	if err != nil || t == nil {
		return err
	}
	tag := mainTag(s, t)
	choice, err := r.chooseAddon(ctx, s.addon, addonVersionOfTag(tag), to)
	if err != nil {
		return err
	}
	if choice.to != "" {
		st.From, st.To = tag, tagOfAddonVersion(choice.to, tag)
	}
	return nil
}
