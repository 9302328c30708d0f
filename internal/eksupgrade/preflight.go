package eksupgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// plan is what a preflight found: the control plane's version, the checks, and the steps after the preflight
// (approval, control plane, add-ons, node groups).
type plan struct {
	from   string
	checks []state.PreflightCheck
	steps  []state.WorkflowStep
}

func (p *plan) check(name, result, format string, args ...any) {
	p.checks = append(p.checks, state.PreflightCheck{Name: name, Result: result, Detail: fmt.Sprintf(format, args...)})
}

// failures returns the details of the failed checks, "name: detail" each.
func failures(checks []state.PreflightCheck) []string {
	var out []string
	for _, c := range checks {
		if c.Result == CheckFail {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return out
}

// addonOrder is the order add-ons are updated in (Amazon EKS User Guide, "Update existing cluster to new
// Kubernetes version": the Amazon VPC CNI plugin, CoreDNS, kube-proxy); other add-ons follow by name.
var addonOrder = map[string]int{"vpc-cni": 1, "coredns": 2, "kube-proxy": 3}

// preflight reads the cluster and checks that it may be upgraded to `to`: the target is exactly one minor
// version above the control plane; no upgrade insight for a version up to the target is in ERROR; every
// installed add-on has a version for the target; every node group (managed: its version; self-managed: the
// Kubernetes version of its AMI source) stays within the kubelet version skew once the control plane is at
// the target; every Fargate pod runs on a kubelet of the control plane's version (checkFargate); self-managed
// add-ons are reported with their recommended version (planSelfManagedAddons); and nothing is updating. It
// changes nothing. Errors are those of the reads (a cluster EKS does not know wraps eks.ErrClusterNotFound);
// failed checks are not errors.
func (r *Runner) preflight(ctx context.Context, cluster, to string, opts planOptions) (plan, error) {
	var p plan
	out, err := r.EKS.DescribeCluster(ctx, &awseks.DescribeClusterInput{Name: aws.String(cluster)})
	var notFound *ekstypes.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		return p, fmt.Errorf("describing EKS cluster %s: %w", cluster, eks.ErrClusterNotFound)
	case err != nil:
		return p, fmt.Errorf("describing EKS cluster %s: %w", cluster, err)
	case out.Cluster == nil:
		return p, fmt.Errorf("describing EKS cluster %s: empty response", cluster)
	}
	p.from = aws.ToString(out.Cluster.Version)
	toMinor, err := eks.ParseVersion(to)
	if err != nil {
		return p, fmt.Errorf("target version %w", err)
	}
	switch fromMinor, err := eks.ParseVersion(p.from); {
	case err != nil:
		p.check("version", CheckFail, "the control plane reports version %v", err)
	case toMinor != fromMinor+1:
		p.check("version", CheckFail, "the control plane is at %s: the target must be exactly one minor version above it (1.%d); EKS upgrades one minor version at a time",
			p.from, fromMinor+1)
	default:
		p.check("version", CheckPass, "%s -> %s", p.from, to)
	}
	if err := r.checkUpdating(ctx, &p, cluster, out.Cluster.Status); err != nil {
		return p, err
	}
	if err := r.checkInsights(ctx, &p, cluster, toMinor); err != nil {
		return p, err
	}
	p.steps = append(p.steps,
		state.WorkflowStep{Kind: KindApproval, Name: cluster, From: p.from, To: to, Status: state.StepStatusPending},
		state.WorkflowStep{Kind: KindControlPlane, Name: cluster, From: p.from, To: to, Status: state.StepStatusPending})
	if err := r.planAddons(ctx, &p, cluster, to); err != nil {
		return p, err
	}
	if err := r.planSelfManagedAddons(ctx, &p, to, opts); err != nil {
		return p, err
	}
	if err := r.checkFargate(ctx, &p, cluster, to, opts); err != nil {
		return p, err
	}
	if err := r.planManagedNodegroups(ctx, &p, cluster, to); err != nil {
		return p, err
	}
	if err := r.planSelfManaged(ctx, &p, cluster, to); err != nil {
		return p, err
	}
	return p, nil
}

// checkUpdating fails the preflight when the cluster is not ACTIVE or one of its updates is InProgress.
func (r *Runner) checkUpdating(ctx context.Context, p *plan, cluster string, status ekstypes.ClusterStatus) error {
	if status != ekstypes.ClusterStatusActive {
		p.check("cluster status", CheckFail, "the cluster is %s, not ACTIVE: wait until it is", status)
	}
	var busy []string
	pages := awseks.NewListUpdatesPaginator(r.EKS, &awseks.ListUpdatesInput{Name: aws.String(cluster)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the updates of EKS cluster %s: %w", cluster, err)
		}
		for _, id := range page.UpdateIds {
			u, err := r.EKS.DescribeUpdate(ctx, &awseks.DescribeUpdateInput{Name: aws.String(cluster), UpdateId: aws.String(id)})
			if err != nil {
				return fmt.Errorf("describing update %s of EKS cluster %s: %w", id, cluster, err)
			}
			if u.Update != nil && u.Update.Status == ekstypes.UpdateStatusInProgress {
				busy = append(busy, fmt.Sprintf("%s (%s)", id, u.Update.Type))
			}
		}
	}
	if len(busy) > 0 {
		p.check("updates in progress", CheckFail, "update(s) %s in progress: wait until they end", strings.Join(busy, ", "))
	} else if status == ekstypes.ClusterStatusActive {
		p.check("updates in progress", CheckPass, "cluster ACTIVE, no update in progress")
	}
	return nil
}

// checkInsights reads the UPGRADE_READINESS insights: those about a version up to the target must not be in
// ERROR (WARNING and UNKNOWN are reported); each one not PASSING is described for its recommendation.
func (r *Runner) checkInsights(ctx context.Context, p *plan, cluster string, toMinor int) error {
	in := &awseks.ListInsightsInput{ClusterName: aws.String(cluster),
		Filter: &ekstypes.InsightsFilter{Categories: []ekstypes.Category{ekstypes.CategoryUpgradeReadiness}}}
	seen := 0
	pages := awseks.NewListInsightsPaginator(r.EKS, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the upgrade insights of EKS cluster %s: %w", cluster, err)
		}
		for _, s := range page.Insights {
			if v := aws.ToString(s.KubernetesVersion); v != "" {
				if m, err := eks.ParseVersion(v); err == nil && m > toMinor {
					continue // about a later upgrade
				}
			}
			seen++
			name := "insight " + aws.ToString(s.Name)
			status := ekstypes.InsightStatusValueUnknown
			if s.InsightStatus != nil {
				status = s.InsightStatus.Status
			}
			if status == ekstypes.InsightStatusValuePassing {
				p.check(name, CheckPass, "PASSING")
				continue
			}
			d, err := r.EKS.DescribeInsight(ctx, &awseks.DescribeInsightInput{ClusterName: aws.String(cluster), Id: s.Id})
			if err != nil {
				return fmt.Errorf("describing insight %s of EKS cluster %s: %w", aws.ToString(s.Id), cluster, err)
			}
			detail := insightDetail(status, d.Insight)
			if status == ekstypes.InsightStatusValueError {
				p.check(name, CheckFail, "%s", detail)
			} else {
				p.check(name, CheckWarn, "%s", detail)
			}
		}
	}
	if seen == 0 {
		p.check("upgrade insights", CheckWarn, "EKS reports no upgrade insight for this upgrade (insights are refreshed about once a day)")
	}
	return nil
}

// insightDetail says what an insight found: its status and reason, its recommendation, and up to three of its
// resources.
func insightDetail(status ekstypes.InsightStatusValue, in *ekstypes.Insight) string {
	parts := []string{string(status)}
	if in == nil {
		return parts[0]
	}
	if in.InsightStatus != nil && aws.ToString(in.InsightStatus.Reason) != "" {
		parts[0] += ": " + aws.ToString(in.InsightStatus.Reason)
	}
	if rec := aws.ToString(in.Recommendation); rec != "" {
		parts = append(parts, "recommendation: "+rec)
	}
	var res []string
	for _, rd := range in.Resources {
		if len(res) == 3 {
			res = append(res, fmt.Sprintf("and %d more", len(in.Resources)-3))
			break
		}
		name := aws.ToString(rd.KubernetesResourceUri)
		if name == "" {
			name = aws.ToString(rd.Arn)
		}
		res = append(res, name)
	}
	if len(res) > 0 {
		parts = append(parts, "resources: "+strings.Join(res, ", "))
	}
	return strings.Join(parts, "; ")
}

// planAddons plans one step per installed managed add-on, to the version chooseAddon picks for the target
// Kubernetes version: an add-on is never planned to a version older than the one installed, and one with no
// version for the target that is at least the installed one fails the preflight. One kept at its version is
// skipped.
func (r *Runner) planAddons(ctx context.Context, p *plan, cluster, to string) error {
	var names []string
	pages := awseks.NewListAddonsPaginator(r.EKS, &awseks.ListAddonsInput{ClusterName: aws.String(cluster)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the add-ons of EKS cluster %s: %w", cluster, err)
		}
		names = append(names, page.Addons...)
	}
	sort.SliceStable(names, func(i, j int) bool {
		oi, oj := addonOrder[names[i]], addonOrder[names[j]]
		if oi == 0 {
			oi = len(addonOrder) + 1
		}
		if oj == 0 {
			oj = len(addonOrder) + 1
		}
		if oi != oj {
			return oi < oj
		}
		return names[i] < names[j]
	})
	for _, name := range names {
		d, err := r.EKS.DescribeAddon(ctx, &awseks.DescribeAddonInput{ClusterName: aws.String(cluster), AddonName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("describing add-on %s of EKS cluster %s: %w", name, cluster, err)
		}
		if d.Addon == nil {
			return fmt.Errorf("describing add-on %s of EKS cluster %s: empty response", name, cluster)
		}
		current, status := aws.ToString(d.Addon.AddonVersion), d.Addon.Status
		choice, err := r.chooseAddon(ctx, name, current, to)
		if err != nil {
			return err
		}
		check := "add-on " + name
		switch {
		case choice.fail != "":
			p.check(check, CheckFail, "%s", choice.fail)
		case status == ekstypes.AddonStatusUpdating || status == ekstypes.AddonStatusCreating || status == ekstypes.AddonStatusDeleting:
			p.check(check, CheckFail, "the add-on is %s: wait until it is ACTIVE", status)
		case status != ekstypes.AddonStatusActive:
			p.check(check, CheckWarn, "the add-on is %s (version %s): its update to %s may fail; look at its health issues", status, current, choice.to)
		default:
			p.check(check, CheckPass, "%s", choice.reason)
		}
		st := state.WorkflowStep{Kind: KindAddon, Name: name, From: current, To: choice.to, Status: state.StepStatusPending}
		if choice.to == current {
			st.Status, st.Detail = state.StepStatusSkipped, choice.reason
		}
		p.steps = append(p.steps, st)
	}
	return nil
}

// addonChoice is the version an add-on is planned to for a Kubernetes version, and why; fail (to "") says
// why none may be planned.
type addonChoice struct {
	to, reason, fail string
}

// chooseAddon picks the version of add-on name (installed at version installed) for Kubernetes version `to`
// from DescribeAddonVersions (Amazon EKS API Reference, "DescribeAddonVersions": each version's
// compatibilities, one of them the default for a Kubernetes version; Amazon EKS User Guide, "Update an Amazon
// EKS add-on": add-ons are updated, never downgraded):
//   - the installed version when it is compatible with `to` and not older than the default (kept);
//   - the default when it is not older than the installed version;
//   - else the oldest compatible version newer than the installed one;
//   - else none: fail says that no compatible version is at least the installed one.
//
// Versions compare as vX.Y.Z-eksbuild.N (CompareAddonVersions). Errors are those of DescribeAddonVersions.
func (r *Runner) chooseAddon(ctx context.Context, name, installed, to string) (addonChoice, error) {
	compatible, def, err := r.addonVersions(ctx, name, to)
	if err != nil {
		return addonChoice{}, err
	}
	if len(compatible) == 0 {
		return addonChoice{fail: fmt.Sprintf("no version of %s is compatible with Kubernetes %s (DescribeAddonVersions): remove the add-on or wait for a release", name, to)}, nil
	}
	inst, err := ParseAddonVersion(installed)
	if err != nil {
		return addonChoice{fail: fmt.Sprintf("the installed version cannot be compared: %v", err)}, nil
	}
	if def == "" {
		def = compatible[0] // DescribeAddonVersions lists the newest first
	}
	defV, err := ParseAddonVersion(def)
	if err != nil {
		return addonChoice{fail: fmt.Sprintf("the default version for Kubernetes %s cannot be compared: %v", to, err)}, nil
	}
	switch {
	case slices.Contains(compatible, installed) && inst.Compare(defV) >= 0:
		if installed == def {
			return addonChoice{to: installed, reason: fmt.Sprintf("%s: already at the default version for Kubernetes %s", installed, to)}, nil
		}
		return addonChoice{to: installed, reason: fmt.Sprintf("%s kept: compatible with Kubernetes %s and newer than its default %s (an add-on is never downgraded)",
			installed, to, def)}, nil
	case defV.Compare(inst) >= 0:
		return addonChoice{to: def, reason: fmt.Sprintf("%s -> %s (the default for Kubernetes %s)", installed, def, to)}, nil
	}
	var up string
	var upV AddonVersion
	for _, c := range compatible {
		v, err := ParseAddonVersion(c)
		if err != nil || v.Compare(inst) <= 0 {
			continue
		}
		if up == "" || v.Compare(upV) < 0 {
			up, upV = c, v
		}
	}
	if up == "" {
		return addonChoice{fail: fmt.Sprintf("installed %s is not compatible with Kubernetes %s and every compatible version is older (default %s, newest %s): an add-on is never downgraded; wait for a release of %s for Kubernetes %s",
			installed, to, def, compatible[0], name, to)}, nil
	}
	return addonChoice{to: up, reason: fmt.Sprintf("%s -> %s: the default %s is older than the installed version, which is not compatible with Kubernetes %s; the oldest compatible version newer than it",
		installed, up, def, to)}, nil
}

// addonVersions returns the versions of an add-on compatible with Kubernetes version `to` (newest first, as
// DescribeAddonVersions lists them) and the one marked default for it ("" when none is).
func (r *Runner) addonVersions(ctx context.Context, name, to string) (compatible []string, def string, err error) {
	pages := awseks.NewDescribeAddonVersionsPaginator(r.EKS, &awseks.DescribeAddonVersionsInput{AddonName: aws.String(name), KubernetesVersion: aws.String(to)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("reading the versions of add-on %s for Kubernetes %s: %w", name, to, err)
		}
		for _, info := range page.Addons {
			if aws.ToString(info.AddonName) != name {
				continue
			}
			for _, v := range info.AddonVersions {
				for _, c := range v.Compatibilities {
					if aws.ToString(c.ClusterVersion) != to {
						continue
					}
					compatible = append(compatible, aws.ToString(v.AddonVersion))
					if c.DefaultVersion && def == "" {
						def = aws.ToString(v.AddonVersion)
					}
				}
			}
		}
	}
	return compatible, def, nil
}

// planManagedNodegroups plans one step per managed node group (handed to the agent's managed-node-group rollout) and checks
// that each is ACTIVE and on the control plane's current version: "all of your node groups' Kubernetes
// versions must match the cluster's Kubernetes version in order to update the cluster" (Amazon EKS API
// Reference, UpdateClusterVersion; User Guide, "Update existing cluster to new Kubernetes version"). The
// upstream kubelet skew (CheckSkew) applies to self-managed nodes only.
func (r *Runner) planManagedNodegroups(ctx context.Context, p *plan, cluster, to string) error {
	pages := awseks.NewListNodegroupsPaginator(r.EKS, &awseks.ListNodegroupsInput{ClusterName: aws.String(cluster)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing the managed node groups of EKS cluster %s: %w", cluster, err)
		}
		for _, name := range page.Nodegroups {
			d, err := r.EKS.DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String(cluster), NodegroupName: aws.String(name)})
			if err != nil {
				return fmt.Errorf("describing managed node group %s of EKS cluster %s: %w", name, cluster, err)
			}
			if d.Nodegroup == nil {
				return fmt.Errorf("describing managed node group %s of EKS cluster %s: empty response", name, cluster)
			}
			version, status := aws.ToString(d.Nodegroup.Version), d.Nodegroup.Status
			check := "managed node group " + name
			switch {
			case version != p.from:
				p.check(check, CheckFail, "at %s, the control plane at %s: EKS moves the control plane only when every managed node group is on its version "+
					"(Amazon EKS API Reference, UpdateClusterVersion); update the node group to %s first (the managed-node-group rollout, or UpdateNodegroupVersion)",
					version, p.from, p.from)
			case status != ekstypes.NodegroupStatusActive:
				p.check(check, CheckFail, "the node group is %s, not ACTIVE: wait until it is", status)
			default:
				p.check(check, CheckPass, "at %s, the control plane's version (EKS requires it before UpdateClusterVersion)", version)
			}
			// The step follows the agent's managed-node-group rollout: one already Halted would halt the
			// workflow at this step, after the control plane and the add-ons moved (the agent does not detect
			// again from Halted). Found before anything changes instead.
			key := model.NodegroupKey(cluster, name)
			switch ro, err := r.Store.GetRollout(ctx, key); {
			case err != nil && !errors.Is(err, state.ErrNotFound):
				return fmt.Errorf("reading the agent's rollout of managed node group %s: %w", name, err)
			case err == nil && ro.Phase == state.PhaseHalted:
				p.check("rollout of "+key, CheckFail, "the agent's rollout of %s is Halted (%s): resolve it first (`patch-agent rollback %s` or `patch-agent resume`), "+
					"or the workflow would halt at this node group's step after the control plane moved", key, ro.Reason, key)
			}
			st := state.WorkflowStep{Kind: KindManagedNodegroup, Name: name, From: version, To: to, Status: state.StepStatusPending}
			if version == to {
				st.Status, st.Detail = state.StepStatusSkipped, "already at Kubernetes "+to
			}
			p.steps = append(p.steps, st)
		}
	}
	return nil
}

// How a self-managed node group's AMI source names its Kubernetes version.
const (
	sourceFollows   = "follows"   // patch-agent/ami-parameter=auto without a pin: the control plane's version
	sourcePinned    = "pinned"    // auto with patch-agent/kubernetes-version
	sourceParameter = "parameter" // an explicit public EKS AMI parameter, whose path names the version
	sourceGolden    = "golden"    // the account's own parameter: the version is not known
)

// selfManaged is a self-managed node group of the cluster that the agent manages.
type selfManaged struct {
	group, parameter, version, how string
}

// planSelfManaged plans one step per self-managed node group the agent manages for the cluster (Auto Scaling
// groups tagged patch-agent/enabled=true, platform eks, this cluster): the workflow does not replace their
// nodes, it records what must move so that the agent's normal rollout does.
func (r *Runner) planSelfManaged(ctx context.Context, p *plan, cluster, to string) error {
	groups, misconfigured, err := r.selfManagedGroups(ctx, cluster, p.from)
	if err != nil {
		return err
	}
	for _, m := range misconfigured {
		p.check("self-managed node group", CheckWarn, "%s", m)
	}
	for _, g := range groups {
		check := "self-managed node group " + g.group
		st := state.WorkflowStep{Kind: KindSelfManagedNodegroup, Name: g.group, From: g.version, To: to, Status: state.StepStatusPending}
		switch err := CheckSkew(g.version, to); {
		case g.version == "":
			p.check(check, CheckWarn, "its AMI parameter %s names no Kubernetes version: make sure its nodes are within %d minor versions of %s",
				g.parameter, MaxKubeletSkew(mustMinor(to)), to)
		case err != nil:
			p.check(check, CheckFail, "AMI for Kubernetes %s (%s): %v once the control plane is at %s; move its AMI source first", g.version, g.how, err, to)
		default:
			p.check(check, CheckPass, "AMI for Kubernetes %s (%s), within the kubelet version skew of %s", g.version, g.how, to)
		}
		// The step waits for the agent's rollout of the group: one already Halted would halt the workflow at its
		// last step, after the control plane and the add-ons moved. Found before anything changes instead.
		switch ro, err := r.Store.GetRollout(ctx, g.group); {
		case err != nil && !errors.Is(err, state.ErrNotFound):
			return fmt.Errorf("reading the agent's rollout of self-managed node group %s: %w", g.group, err)
		case err == nil && ro.Phase == state.PhaseHalted:
			p.check("rollout of "+g.group, CheckFail, "the agent's rollout of %s is Halted (%s): resolve it first (`patch-agent rollback %s` or `patch-agent resume`), "+
				"or the workflow would halt at this group's step after the control plane moved", g.group, ro.Reason, g.group)
		}
		if g.how == sourceFollows {
			st.Detail = selfManagedAction(g, to)
		} else {
			st.Action = selfManagedAction(g, to)
		}
		if g.version == to {
			st.Status, st.Detail, st.Action = state.StepStatusSkipped, selfManagedAction(g, to), ""
		}
		p.steps = append(p.steps, st)
	}
	return nil
}

func mustMinor(v string) int {
	m, _ := eks.ParseVersion(v)
	return m
}

// selfManagedGroups lists the opted-in EKS groups of the cluster (100 per DescribeAutoScalingGroups call) with
// the Kubernetes version of their AMI source; opted-in groups of the cluster whose tags are invalid are
// returned as messages.
func (r *Runner) selfManagedGroups(ctx context.Context, cluster, clusterVersion string) ([]selfManaged, []string, error) {
	if r.AutoScaling == nil {
		return nil, nil, nil
	}
	in := &autoscaling.DescribeAutoScalingGroupsInput{MaxRecords: aws.Int32(100),
		Filters: []astypes.Filter{{Name: aws.String("tag-key"), Values: []string{model.TagEnabled}}}} // model.OptedIn decides on the value
	var out []selfManaged
	var misconfigured []string
	pages := autoscaling.NewDescribeAutoScalingGroupsPaginator(r.AutoScaling, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("listing the Auto Scaling groups patch-agent manages: %w", err)
		}
		for _, g := range page.AutoScalingGroups {
			name, tags := aws.ToString(g.AutoScalingGroupName), map[string]string{}
			for _, t := range g.Tags {
				tags[aws.ToString(t.Key)] = aws.ToString(t.Value)
			}
			if tags[model.TagCluster] != cluster || !strings.EqualFold(tags[model.TagPlatform], model.PlatformEKS) {
				continue
			}
			t, err := model.TargetFromTags(name, tags)
			if err != nil {
				misconfigured = append(misconfigured, err.Error())
				continue
			}
			if t == nil {
				continue
			}
			sm := selfManaged{group: name, parameter: t.Parameter}
			pinned, hasPin := tags[providers.TagKubernetesVersion]
			pathVersion, isPath := eks.VersionInParameter(t.Parameter)
			switch {
			case t.Parameter == providers.ParameterAuto && hasPin:
				sm.how, sm.version = sourcePinned, pinned
			case t.Parameter == providers.ParameterAuto:
				sm.how, sm.version = sourceFollows, clusterVersion
				// The AMI the group runs came from the parameter of its last rollout, which names its version.
				if ro, err := r.Store.GetRollout(ctx, name); err == nil {
					if v, ok := eks.VersionInParameter(ro.Source); ok {
						sm.version = v
					}
				} else if !errors.Is(err, state.ErrNotFound) {
					return nil, nil, fmt.Errorf("reading the rollout of %s: %w", name, err)
				}
			case isPath:
				sm.how, sm.version = sourceParameter, pathVersion
			default:
				sm.how = sourceGolden
			}
			out = append(out, sm)
		}
	}
	slices.SortFunc(out, func(a, b selfManaged) int { return strings.Compare(a.group, b.group) })
	return out, misconfigured, nil
}

// selfManagedAction says what must happen for a self-managed node group to reach Kubernetes `to`.
func selfManagedAction(g selfManaged, to string) string {
	switch g.how {
	case sourceFollows:
		return fmt.Sprintf("AMI source auto follows the control plane: at its next tick the agent resolves the Kubernetes %s AMI and rolls the group by instance refresh (each new node held until Ready, each old one cordoned and drained), through its gates", to)
	case sourcePinned:
		if g.version == to {
			return fmt.Sprintf("tag %s=%s already names the target", providers.TagKubernetesVersion, to)
		}
		return fmt.Sprintf("tag %s=%s pins the AMI: set it to %s (or remove it to follow the control plane); the agent then rolls the group",
			providers.TagKubernetesVersion, g.version, to)
	case sourceParameter:
		if g.version == to {
			return fmt.Sprintf("tag %s already names the Kubernetes %s AMI", model.TagParameter, to)
		}
		return fmt.Sprintf("tag %s=%s names the Kubernetes %s AMI: set it to %s (or to %s); the agent then rolls the group",
			model.TagParameter, g.parameter, g.version, strings.Replace(g.parameter, g.version, to, 1), providers.ParameterAuto)
	}
	return fmt.Sprintf("AMI parameter %s is the account's own: publish a node AMI built for Kubernetes %s to it; the agent then rolls the group", g.parameter, to)
}
