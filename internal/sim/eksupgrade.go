package sim

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// The calls of an EKS cluster version upgrade: UpdateClusterVersion, UpdateAddon and UpdateNodegroupVersion
// start updates that DescribeUpdate / ListUpdates track; upgrade insights (ListInsights, DescribeInsight); the
// managed add-ons and the add-on version catalog (ListAddons, DescribeAddon, DescribeAddonVersions).
//
// Behaviour follows the Amazon EKS API Reference and User Guide ("Update existing cluster to new Kubernetes
// version", "Update an Amazon EKS add-on", "Update a managed node group for your cluster", "Prepare for
// Kubernetes version upgrades with cluster insights"):
//   - an update is InProgress when accepted and ends Successful (or Failed, with errors) after a duration;
//     while a cluster version update runs the cluster is UPDATING, while a node group update runs the node
//     group is UPDATING, while an add-on update runs the add-on is UPDATING;
//   - a ClientRequestToken makes a call idempotent: the same token returns the update it started first;
//   - UpdateClusterVersion moves one minor version at a time, refuses while another cluster update is in
//     progress, refuses while a managed node group is not on the cluster's version (even with force), and
//     refuses when an UPGRADE_READINESS insight for the target version is in ERROR unless force;
//   - UpdateAddon accepts only a version compatible with the cluster's current Kubernetes version;
//   - UpdateNodegroupVersion never goes beyond the control plane's version, and refuses a Kubernetes version
//     for node groups of AMI type CUSTOM (their AMI comes from the launch template).
// The node group's instances are not replaced here: only its version and release version change.

// Durations of the simulated updates, from acceptance to Successful or Failed.
const (
	EKSControlPlaneUpdateDuration = 12 * time.Minute
	EKSAddonUpdateDuration        = 90 * time.Second
	EKSNodegroupUpdateDuration    = 8 * time.Minute
)

// EKSAddonVersion is one version of a managed add-on in the catalog DescribeAddonVersions reads.
type EKSAddonVersion struct {
	Addon, Version string
	// ClusterVersions are the Kubernetes versions it is compatible with; DefaultFor those of them for which it
	// is the default version.
	ClusterVersions, DefaultFor []string
}

// EKSInsightSpec is an upgrade insight of a cluster (AddEKSInsight).
type EKSInsightSpec struct {
	Name string
	// Category defaults to UPGRADE_READINESS.
	Category ekstypes.Category
	// KubernetesVersion is the version the insight is about (the upgrade's target).
	KubernetesVersion string
	Status            ekstypes.InsightStatusValue
	Reason            string
	Description       string
	Recommendation    string
	// Resources are the Kubernetes resource URIs the insight found (e.g. deprecated API users).
	Resources []string
}

// EKSUpdateFailure makes the next update of a resource fail: the cluster's version update (Addon and Nodegroup
// empty), one add-on's update, or one node group's update. The update reports Errors (none when empty).
type EKSUpdateFailure struct {
	Cluster, Addon, Nodegroup string
	Errors                    []ekstypes.ErrorDetail
	// PodEviction makes a node group's update fail with PodEvictionFailure (Errors ignored) as a
	// PodDisruptionBudget that never lets a pod go would, unless the update is sent with force, which replaces
	// the nodes anyway (Amazon EKS API Reference, UpdateNodegroupVersion: force). The failure stays until an
	// update without force consumes it.
	PodEviction bool
}

// EKSUpdateView is an update as the account holds it (EKSUpdates).
type EKSUpdateView struct {
	ID, Cluster, Addon, Nodegroup string
	Type                          ekstypes.UpdateType
	Status                        ekstypes.UpdateStatus
	// Params by type: Version, PlatformVersion, ReleaseVersion, AddonVersion, ResolveConflicts.
	Params    map[string]string
	Token     string
	CreatedAt time.Time
}

type eksUpdate struct {
	id, cluster, addon, nodegroup, token string
	typ                                  ekstypes.UpdateType
	status                               ekstypes.UpdateStatus
	params                               []ekstypes.UpdateParam
	errors                               []ekstypes.ErrorDetail
	fails                                bool // ends Failed (with errors, when any were given)
	createdAt                            time.Time
	// force: a node group update sent with force (a PodEviction failure does not apply); phases, when set,
	// runs the update's work at its end and calls its argument once the update may be Successful.
	force  bool
	phases func(end func())
}

type eksAddon struct {
	name, version, arn  string
	status              ekstypes.AddonStatus
	createdAt, modified time.Time
	issues              []ekstypes.AddonIssue // health issues while DEGRADED
}

type eksInsight struct {
	id   string
	spec EKSInsightSpec
	at   time.Time
}

// eksUpgradeState holds what the upgrade calls see: updates, add-ons, the add-on catalog and insights.
type eksUpgradeState struct {
	updates  map[string]*eksUpdate
	tokens   map[string]string                 // cluster|addon|nodegroup|token -> update id
	addons   map[string]map[string]*eksAddon   // cluster -> add-on name -> add-on
	catalog  map[string][]EKSAddonVersion      // add-on name -> versions, newest first
	insights map[string]map[string]*eksInsight // cluster -> id -> insight
	failures []EKSUpdateFailure
	degrade  map[string]time.Duration       // cluster|addon -> how long the add-on is DEGRADED after its next update
	releases map[eksReleaseKey][]EKSRelease // published node AMI releases (eksnodegroupupdate.go)
}

// EKSUpgrade returns the account's Amazon EKS API as `patch-agent eks upgrade` uses it.
func (a *Account) EKSUpgrade() awsapi.EKSUpgrade { return &EKSClient{s: a.eks} }

var _ awsapi.EKSUpgrade = (*EKSClient)(nil)

// eksClusterStatusLocked is the status DescribeCluster reports: UPDATING while a version update of the cluster
// is in progress, else ACTIVE. Callers hold the lock.
func (s *eksService) eksClusterStatusLocked(cluster string) ekstypes.ClusterStatus {
	if s.inProgressLocked(cluster, "", "") != nil {
		return ekstypes.ClusterStatusUpdating
	}
	return ekstypes.ClusterStatusActive
}

// eksNodegroupStatusLocked is the status DescribeNodegroup reports: UPDATING while an update of the node group
// is in progress, else ACTIVE. Callers hold the lock.
func (s *eksService) eksNodegroupStatusLocked(cluster, nodegroup string) ekstypes.NodegroupStatus {
	if s.inProgressLocked(cluster, "", nodegroup) != nil {
		return ekstypes.NodegroupStatusUpdating
	}
	return ekstypes.NodegroupStatusActive
}

// inProgressLocked returns the resource's update in progress, or nil. Callers hold the lock.
func (s *eksService) inProgressLocked(cluster, addon, nodegroup string) *eksUpdate {
	for _, u := range s.eksUpgrades.updates {
		if u.cluster == cluster && u.addon == addon && u.nodegroup == nodegroup && u.status == ekstypes.UpdateStatusInProgress {
			return u
		}
	}
	return nil
}

// PublishEKSAddonVersion adds an add-on version to the catalog (newest first: publish older versions first).
// Setup helper: not counted.
func (s *eksService) PublishEKSAddonVersion(v EKSAddonVersion) {
	defer s.lock()()
	w := s.eksUpgrades
	w.catalog[v.Addon] = append([]EKSAddonVersion{v}, w.catalog[v.Addon]...)
}

// InstallEKSAddon installs a managed add-on at version on a cluster, ACTIVE. Setup helper: not counted.
// Errors: ResourceNotFoundException (no such cluster).
func (s *eksService) InstallEKSAddon(cluster, name, version string) error {
	defer s.lock()()
	if s.eksClusters[cluster] == nil {
		return clusterNotFound(cluster)
	}
	w := s.eksUpgrades
	if w.addons[cluster] == nil {
		w.addons[cluster] = map[string]*eksAddon{}
	}
	w.addons[cluster][name] = &eksAddon{name: name, version: version, status: ekstypes.AddonStatusActive,
		arn:       fmt.Sprintf("arn:aws:eks:%s:%s:addon/%s/%s/%s", s.opts.Region, s.opts.AccountID, cluster, name, s.uuid()),
		createdAt: s.now(), modified: s.now()}
	return nil
}

// EKSAddon returns an installed add-on's version and status.
func (s *eksService) EKSAddon(cluster, name string) (version string, status ekstypes.AddonStatus, ok bool) {
	defer s.lock()()
	ad := s.eksUpgrades.addons[cluster][name]
	if ad == nil {
		return "", "", false
	}
	return ad.version, ad.status, true
}

// AddEKSInsight adds an insight to a cluster and returns its id. Setup helper: not counted.
func (s *eksService) AddEKSInsight(cluster string, spec EKSInsightSpec) string {
	defer s.lock()()
	if spec.Category == "" {
		spec.Category = ekstypes.CategoryUpgradeReadiness
	}
	w := s.eksUpgrades
	if w.insights[cluster] == nil {
		w.insights[cluster] = map[string]*eksInsight{}
	}
	id := s.uuid()
	w.insights[cluster][id] = &eksInsight{id: id, spec: spec, at: s.now()}
	return id
}

// SetEKSInsightStatus changes an insight's status, as EKS does when it refreshes the insight after the
// problem was fixed. It panics when the insight does not exist. Setup helper.
func (s *eksService) SetEKSInsightStatus(cluster, id string, status ekstypes.InsightStatusValue, reason string) {
	defer s.lock()()
	in := s.eksUpgrades.insights[cluster][id]
	if in == nil {
		panic("sim: no EKS insight " + id)
	}
	in.spec.Status, in.spec.Reason, in.at = status, reason, s.now()
}

// FailNextEKSUpdate makes the next update of the resource f names end Failed with f.Errors. Setup helper.
func (s *eksService) FailNextEKSUpdate(f EKSUpdateFailure) {
	defer s.lock()()
	w := s.eksUpgrades
	w.failures = append(w.failures, f)
}

// DegradeEKSAddonAfterUpdate makes the next Successful update of an add-on leave it DEGRADED (health issue
// InsufficientNumberOfReplicas, as while its pods roll) for d, then ACTIVE; d <= 0 leaves it DEGRADED. Amazon
// EKS API Reference, "Addon" (status DEGRADED) and "AddonHealth": an add-on's status reflects the health of
// its Kubernetes resources, which an update rolls after EKS applied it.
func (s *eksService) DegradeEKSAddonAfterUpdate(cluster, addon string, d time.Duration) {
	defer s.hold()()
	w := s.eksUpgrades
	if w.degrade == nil {
		w.degrade = map[string]time.Duration{}
	}
	w.degrade[cluster+"|"+addon] = d
}

// EKSUpdates returns the updates of a cluster (its own, its add-ons' and its node groups'), oldest first.
func (s *eksService) EKSUpdates(cluster string) []EKSUpdateView {
	defer s.lock()()
	var out []EKSUpdateView
	for _, u := range s.eksUpgrades.updates {
		if u.cluster != cluster {
			continue
		}
		params := map[string]string{}
		for _, p := range u.params {
			params[string(p.Type)] = deref(p.Value)
		}
		out = append(out, EKSUpdateView{ID: u.id, Cluster: u.cluster, Addon: u.addon, Nodegroup: u.nodegroup, Type: u.typ,
			Status: u.status, Params: params, Token: u.token, CreatedAt: u.createdAt})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

func clusterNotFound(name string) error {
	return &ekstypes.ResourceNotFoundException{Message: ptr("No cluster found for name: " + name + "."), ClusterName: ptr(name)}
}

var simMinor = regexp.MustCompile(`^1\.(\d{1,3})$`)

// minorOf returns the minor of "1.<minor>", or -1.
func minorOf(v string) int {
	m := simMinor.FindStringSubmatch(v)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// startUpdateLocked records a new update (consuming a failure injected for its resource) and schedules its
// end after d: done runs on success. Callers hold the lock.
func (s *eksService) startUpdateLocked(u *eksUpdate, d time.Duration, done func(), failed func()) *eksUpdate {
	w := s.eksUpgrades
	u.id, u.status, u.createdAt = s.uuid(), ekstypes.UpdateStatusInProgress, s.now()
	for i, f := range w.failures {
		if f.Cluster == u.cluster && f.Addon == u.addon && f.Nodegroup == u.nodegroup {
			if f.PodEviction && u.force {
				continue // force replaces the nodes whatever the PodDisruptionBudgets say
			}
			u.errors, u.fails = f.Errors, true
			if f.PodEviction {
				u.errors = podEvictionFailure(u.nodegroup)
			}
			w.failures = slices.Delete(w.failures, i, i+1)
			break
		}
	}
	w.updates[u.id] = u
	if u.token != "" {
		w.tokens[tokenKey(u.cluster, u.addon, u.nodegroup, u.token)] = u.id
	}
	s.after(d, func() {
		if u.fails {
			u.status = ekstypes.UpdateStatusFailed
			if failed != nil {
				failed()
			}
			return
		}
		end := func() {
			u.status = ekstypes.UpdateStatusSuccessful
			done()
		}
		if u.phases != nil {
			u.phases(end)
			return
		}
		end()
	})
	return u
}

func tokenKey(cluster, addon, nodegroup, token string) string {
	return cluster + "|" + addon + "|" + nodegroup + "|" + token
}

// byTokenLocked returns the update a ClientRequestToken already started, or nil. Callers hold the lock.
func (s *eksService) byTokenLocked(cluster, addon, nodegroup string, token *string) *eksUpdate {
	if deref(token) == "" {
		return nil
	}
	w := s.eksUpgrades
	return w.updates[w.tokens[tokenKey(cluster, addon, nodegroup, *token)]]
}

func (u *eksUpdate) describe() *ekstypes.Update {
	return &ekstypes.Update{Id: ptr(u.id), Status: u.status, Type: u.typ, Params: slices.Clone(u.params),
		Errors: slices.Clone(errorsIf(u.status == ekstypes.UpdateStatusFailed, u.errors)), CreatedAt: ptr(u.createdAt)}
}

func errorsIf(ok bool, errs []ekstypes.ErrorDetail) []ekstypes.ErrorDetail {
	if !ok {
		return []ekstypes.ErrorDetail{}
	}
	return errs
}

// UpdateClusterVersion starts the update of a cluster's control plane to the next Kubernetes minor version.
// Amazon EKS API Reference, "UpdateClusterVersion". Errors: ResourceNotFoundException, ResourceInUseException
// (an update of the cluster is in progress), InvalidParameterException (not exactly one minor version up, or
// a managed node group whose version does not match the cluster's),
// InvalidRequestException (an UPGRADE_READINESS insight for the version is in ERROR and force is not set).
func (c *EKSClient) UpdateClusterVersion(ctx context.Context, in *awseks.UpdateClusterVersionInput, _ ...func(*awseks.Options)) (*awseks.UpdateClusterVersionOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:UpdateClusterVersion")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name, to := deref(in.Name), deref(in.Version)
	cl := s.eksClusters[name]
	if cl == nil {
		return nil, clusterNotFound(name)
	}
	if u := s.byTokenLocked(name, "", "", in.ClientRequestToken); u != nil {
		return &awseks.UpdateClusterVersionOutput{Update: u.describe()}, nil
	}
	if s.inProgressLocked(name, "", "") != nil {
		return nil, &ekstypes.ResourceInUseException{Message: ptr("Cluster " + name + " has an update in progress"), ClusterName: ptr(name)}
	}
	if cur, want := minorOf(cl.version), minorOf(to); cur < 0 || want != cur+1 {
		return nil, &ekstypes.InvalidParameterException{Message: ptr(fmt.Sprintf("Unsupported Kubernetes minor version update from %s to %s", cl.version, to)),
			ClusterName: ptr(name)}
	}
	// "If your cluster has managed node groups attached to it, all of your node groups' Kubernetes versions
	// must match the cluster's Kubernetes version" (Amazon EKS API Reference, UpdateClusterVersion; User Guide,
	// "Update existing cluster to new Kubernetes version"). force overrides only readiness insights.
	var behind []string
	for _, ngName := range sortedKeys(s.nodegroups[name]) {
		if v := s.nodegroups[name][ngName].spec.Version; v != cl.version {
			behind = append(behind, fmt.Sprintf("%s (%s)", ngName, v))
		}
	}
	if len(behind) > 0 {
		return nil, &ekstypes.InvalidParameterException{Message: ptr(fmt.Sprintf(
			"Nodegroups %s must be updated to match cluster version %s before updating cluster version", strings.Join(behind, ", "), cl.version)),
			ClusterName: ptr(name)}
	}
	if !in.Force {
		var blocking []string
		for _, ins := range s.eksUpgrades.insights[name] {
			if ins.spec.Category == ekstypes.CategoryUpgradeReadiness && ins.spec.Status == ekstypes.InsightStatusValueError &&
				(ins.spec.KubernetesVersion == "" || ins.spec.KubernetesVersion == to) {
				blocking = append(blocking, ins.spec.Name)
			}
		}
		if len(blocking) > 0 {
			sort.Strings(blocking)
			return nil, &ekstypes.InvalidRequestException{Message: ptr(fmt.Sprintf(
				"Cluster upgrade is blocked by upgrade readiness insights in ERROR: %s. Resolve them or use force", strings.Join(blocking, "; "))),
				ClusterName: ptr(name)}
		}
	}
	u := s.startUpdateLocked(&eksUpdate{cluster: name, token: deref(in.ClientRequestToken), typ: ekstypes.UpdateTypeVersionUpdate,
		params: []ekstypes.UpdateParam{{Type: ekstypes.UpdateParamTypeVersion, Value: ptr(to)}, {Type: ekstypes.UpdateParamTypePlatformVersion, Value: ptr("eks.1")}}},
		EKSControlPlaneUpdateDuration, func() { cl.version = to }, nil)
	return &awseks.UpdateClusterVersionOutput{Update: u.describe()}, nil
}

// DescribeUpdate describes an update of a cluster, or of one of its add-ons (AddonName) or node groups
// (NodegroupName). Amazon EKS API Reference, "DescribeUpdate". Errors: ResourceNotFoundException.
func (c *EKSClient) DescribeUpdate(ctx context.Context, in *awseks.DescribeUpdateInput, _ ...func(*awseks.Options)) (*awseks.DescribeUpdateOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeUpdate")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := deref(in.Name)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	u := s.eksUpgrades.updates[deref(in.UpdateId)]
	if u == nil || u.cluster != name || u.addon != deref(in.AddonName) || u.nodegroup != deref(in.NodegroupName) {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No update found for ID: " + deref(in.UpdateId)), ClusterName: ptr(name)}
	}
	return &awseks.DescribeUpdateOutput{Update: u.describe()}, nil
}

// ListUpdates lists the update ids of a cluster, or of one of its add-ons (AddonName) or node groups
// (NodegroupName), paged by MaxResults (1-100) and NextToken.
// Amazon EKS API Reference, "ListUpdates". Errors: ResourceNotFoundException, InvalidParameterException.
func (c *EKSClient) ListUpdates(ctx context.Context, in *awseks.ListUpdatesInput, _ ...func(*awseks.Options)) (*awseks.ListUpdatesOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:ListUpdates")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name, addon, ng := deref(in.Name), deref(in.AddonName), deref(in.NodegroupName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	var ids []string
	for _, u := range s.eksUpgrades.updates {
		if u.cluster == name && u.addon == addon && u.nodegroup == ng {
			ids = append(ids, u.id)
		}
	}
	sort.Strings(ids)
	page, next, err := eksListPage(ids, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &awseks.ListUpdatesOutput{UpdateIds: page, NextToken: next}, nil
}

// ListInsights lists a cluster's insights matching Filter (categories, Kubernetes versions, statuses), paged
// by MaxResults (1-100) and NextToken. Amazon EKS API Reference, "ListInsights". Errors:
// ResourceNotFoundException, InvalidParameterException.
func (c *EKSClient) ListInsights(ctx context.Context, in *awseks.ListInsightsInput, _ ...func(*awseks.Options)) (*awseks.ListInsightsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:ListInsights")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := deref(in.ClusterName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	byID := s.eksUpgrades.insights[name]
	var ids []string
	for id, ins := range byID {
		if f := in.Filter; f != nil {
			if len(f.Categories) > 0 && !slices.Contains(f.Categories, ins.spec.Category) ||
				len(f.KubernetesVersions) > 0 && !slices.Contains(f.KubernetesVersions, ins.spec.KubernetesVersion) ||
				len(f.Statuses) > 0 && !slices.Contains(f.Statuses, ins.spec.Status) {
				continue
			}
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	page, next, err := eksListPage(ids, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	out := &awseks.ListInsightsOutput{Insights: []ekstypes.InsightSummary{}, NextToken: next}
	for _, id := range page {
		ins := byID[id]
		out.Insights = append(out.Insights, ekstypes.InsightSummary{Id: ptr(id), Name: ptr(ins.spec.Name), Category: ins.spec.Category,
			KubernetesVersion: nilIfEmpty(ins.spec.KubernetesVersion), Description: nilIfEmpty(ins.spec.Description),
			InsightStatus:   &ekstypes.InsightStatus{Status: ins.spec.Status, Reason: nilIfEmpty(ins.spec.Reason)},
			LastRefreshTime: ptr(s.now()), LastTransitionTime: ptr(ins.at)})
	}
	return out, nil
}

// DescribeInsight describes one insight: its status, recommendation and the resources it found.
// Amazon EKS API Reference, "DescribeInsight". Errors: ResourceNotFoundException.
func (c *EKSClient) DescribeInsight(ctx context.Context, in *awseks.DescribeInsightInput, _ ...func(*awseks.Options)) (*awseks.DescribeInsightOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeInsight")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := deref(in.ClusterName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	ins := s.eksUpgrades.insights[name][deref(in.Id)]
	if ins == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No insight found for id: " + deref(in.Id)), ClusterName: ptr(name)}
	}
	out := &ekstypes.Insight{Id: ptr(ins.id), Name: ptr(ins.spec.Name), Category: ins.spec.Category,
		KubernetesVersion: nilIfEmpty(ins.spec.KubernetesVersion), Description: nilIfEmpty(ins.spec.Description),
		Recommendation:  nilIfEmpty(ins.spec.Recommendation),
		InsightStatus:   &ekstypes.InsightStatus{Status: ins.spec.Status, Reason: nilIfEmpty(ins.spec.Reason)},
		LastRefreshTime: ptr(s.now()), LastTransitionTime: ptr(ins.at), AdditionalInfo: map[string]string{}}
	for _, r := range ins.spec.Resources {
		out.Resources = append(out.Resources, ekstypes.InsightResourceDetail{KubernetesResourceUri: ptr(r),
			InsightStatus: &ekstypes.InsightStatus{Status: ins.spec.Status}})
	}
	return &awseks.DescribeInsightOutput{Insight: out}, nil
}

// ListAddons lists the names of a cluster's installed managed add-ons, paged by MaxResults (1-100) and
// NextToken. Amazon EKS API Reference, "ListAddons". Errors: ResourceNotFoundException, InvalidParameterException.
func (c *EKSClient) ListAddons(ctx context.Context, in *awseks.ListAddonsInput, _ ...func(*awseks.Options)) (*awseks.ListAddonsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:ListAddons")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name := deref(in.ClusterName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	page, next, err := eksListPage(sortedKeys(s.eksUpgrades.addons[name]), in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &awseks.ListAddonsOutput{Addons: page, NextToken: next}, nil
}

// DescribeAddon describes an installed add-on: version, status, ARN. Amazon EKS API Reference,
// "DescribeAddon". Errors: ResourceNotFoundException.
func (c *EKSClient) DescribeAddon(ctx context.Context, in *awseks.DescribeAddonInput, _ ...func(*awseks.Options)) (*awseks.DescribeAddonOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeAddon")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name, addon := deref(in.ClusterName), deref(in.AddonName)
	if s.eksClusters[name] == nil {
		return nil, clusterNotFound(name)
	}
	ad := s.eksUpgrades.addons[name][addon]
	if ad == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No addon: " + addon + " found in cluster: " + name), ClusterName: ptr(name), AddonName: ptr(addon)}
	}
	return &awseks.DescribeAddonOutput{Addon: &ekstypes.Addon{AddonName: ptr(ad.name), AddonArn: ptr(ad.arn), AddonVersion: ptr(ad.version),
		ClusterName: ptr(name), Status: ad.status, CreatedAt: ptr(ad.createdAt), ModifiedAt: ptr(ad.modified),
		Health: &ekstypes.AddonHealth{Issues: append([]ekstypes.AddonIssue{}, ad.issues...)}, Owner: ptr("aws"), Publisher: ptr("eks"), Tags: map[string]string{}}}, nil
}

// DescribeAddonVersions lists the catalog's add-on versions: of AddonName (default: every add-on), those
// compatible with KubernetesVersion (default: all), newest first, each add-on one AddonInfo; paged by add-on
// (MaxResults 1-100, NextToken). Amazon EKS API Reference, "DescribeAddonVersions". Errors:
// InvalidParameterException, ResourceNotFoundException (an unknown add-on name).
func (c *EKSClient) DescribeAddonVersions(ctx context.Context, in *awseks.DescribeAddonVersionsInput, _ ...func(*awseks.Options)) (*awseks.DescribeAddonVersionsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeAddonVersions")
	if err != nil {
		return nil, err
	}
	defer unlock()
	catalog := s.eksUpgrades.catalog
	names := sortedKeys(catalog)
	if n := deref(in.AddonName); n != "" {
		if catalog[n] == nil {
			return nil, &ekstypes.ResourceNotFoundException{Message: ptr("Addon " + n + " not found"), AddonName: ptr(n)}
		}
		names = []string{n}
	}
	page, next, err := eksListPage(names, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	kv := deref(in.KubernetesVersion)
	out := &awseks.DescribeAddonVersionsOutput{Addons: []ekstypes.AddonInfo{}, NextToken: next}
	for _, n := range page {
		info := ekstypes.AddonInfo{AddonName: ptr(n), Type: ptr("networking"), Owner: ptr("aws"), Publisher: ptr("eks"),
			DefaultNamespace: ptr("kube-system"), AddonVersions: []ekstypes.AddonVersionInfo{}}
		for _, v := range catalog[n] {
			var compat []ekstypes.Compatibility
			for _, cv := range v.ClusterVersions {
				if kv == "" || cv == kv {
					compat = append(compat, ekstypes.Compatibility{ClusterVersion: ptr(cv), DefaultVersion: slices.Contains(v.DefaultFor, cv),
						PlatformVersions: []string{"*"}})
				}
			}
			if len(compat) == 0 {
				continue
			}
			info.AddonVersions = append(info.AddonVersions, ekstypes.AddonVersionInfo{AddonVersion: ptr(v.Version),
				Architecture: []string{"amd64", "arm64"}, Compatibilities: compat})
		}
		out.Addons = append(out.Addons, info)
	}
	return out, nil
}

// UpdateAddon starts the update of an installed add-on to AddonVersion, which must be compatible with the
// cluster's current Kubernetes version; the add-on is UPDATING until the update ends.
// Amazon EKS API Reference, "UpdateAddon". Errors: ResourceNotFoundException, ResourceInUseException (an
// update of the add-on is in progress), InvalidParameterException (version not supported).
func (c *EKSClient) UpdateAddon(ctx context.Context, in *awseks.UpdateAddonInput, _ ...func(*awseks.Options)) (*awseks.UpdateAddonOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:UpdateAddon")
	if err != nil {
		return nil, err
	}
	defer unlock()
	name, addon := deref(in.ClusterName), deref(in.AddonName)
	cl := s.eksClusters[name]
	if cl == nil {
		return nil, clusterNotFound(name)
	}
	w := s.eksUpgrades
	ad := w.addons[name][addon]
	if ad == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No addon: " + addon + " found in cluster: " + name), ClusterName: ptr(name), AddonName: ptr(addon)}
	}
	if u := s.byTokenLocked(name, addon, "", in.ClientRequestToken); u != nil {
		return &awseks.UpdateAddonOutput{Update: u.describe()}, nil
	}
	if s.inProgressLocked(name, addon, "") != nil {
		return nil, &ekstypes.ResourceInUseException{Message: ptr("Addon " + addon + " has an update in progress"), ClusterName: ptr(name), AddonName: ptr(addon)}
	}
	to := deref(in.AddonVersion)
	if to == "" {
		to = ad.version
	}
	supported := false
	for _, v := range w.catalog[addon] {
		if v.Version == to && slices.Contains(v.ClusterVersions, cl.version) {
			supported = true
		}
	}
	if !supported {
		return nil, &ekstypes.InvalidParameterException{Message: ptr(fmt.Sprintf("Addon version specified (%s) is not supported for Kubernetes version %s", to, cl.version)),
			ClusterName: ptr(name), AddonName: ptr(addon)}
	}
	params := []ekstypes.UpdateParam{{Type: ekstypes.UpdateParamTypeAddonVersion, Value: ptr(to)}}
	if in.ResolveConflicts != "" {
		params = append(params, ekstypes.UpdateParam{Type: ekstypes.UpdateParamTypeResolveConflicts, Value: ptr(string(in.ResolveConflicts))})
	}
	ad.status, ad.modified = ekstypes.AddonStatusUpdating, s.now()
	u := s.startUpdateLocked(&eksUpdate{cluster: name, addon: addon, token: deref(in.ClientRequestToken), typ: ekstypes.UpdateTypeAddonUpdate, params: params},
		EKSAddonUpdateDuration,
		func() {
			ad.version, ad.status, ad.modified = to, ekstypes.AddonStatusActive, s.now()
			if d, ok := w.degrade[name+"|"+addon]; ok {
				delete(w.degrade, name+"|"+addon)
				ad.status, ad.issues = ekstypes.AddonStatusDegraded, []ekstypes.AddonIssue{{Code: ekstypes.AddonIssueCodeInsufficientNumberOfReplicas,
					Message: ptr("The add-on is unhealthy because it doesn't have the desired number of replicas.")}}
				if d > 0 {
					s.after(d, func() { ad.status, ad.issues, ad.modified = ekstypes.AddonStatusActive, nil, s.now() })
				}
			}
		},
		func() { ad.status, ad.modified = ekstypes.AddonStatusUpdateFailed, s.now() })
	return &awseks.UpdateAddonOutput{Update: u.describe()}, nil
}

// UpdateNodegroupVersion starts the update of a managed node group to Version (default: its own) and the
// latest AMI release of it; the node group is UPDATING until the update ends.
// Amazon EKS API Reference, "UpdateNodegroupVersion". Errors: ResourceNotFoundException, ResourceInUseException
// (an update of the node group is in progress), InvalidParameterException (a version newer than the control
// plane, or a version for a CUSTOM AMI type).
func (c *EKSClient) UpdateNodegroupVersion(ctx context.Context, in *awseks.UpdateNodegroupVersionInput, _ ...func(*awseks.Options)) (*awseks.UpdateNodegroupVersionOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:UpdateNodegroupVersion")
	if err != nil {
		return nil, err
	}
	defer unlock()
	cluster, name := deref(in.ClusterName), deref(in.NodegroupName)
	cl := s.eksClusters[cluster]
	ng := s.nodegroups[cluster][name]
	if cl == nil || ng == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No node group found for name: " + name + "."), ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	}
	if u := s.byTokenLocked(cluster, "", name, in.ClientRequestToken); u != nil {
		return &awseks.UpdateNodegroupVersionOutput{Update: u.describe()}, nil
	}
	if s.inProgressLocked(cluster, "", name) != nil {
		return nil, &ekstypes.ResourceInUseException{Message: ptr("Nodegroup " + name + " has an update in progress"), ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	}
	to, custom := deref(in.Version), ng.spec.AMIType == string(ekstypes.AMITypesCustom)
	switch {
	case in.LaunchTemplate != nil && deref(in.ReleaseVersion) != "":
		return nil, &ekstypes.InvalidParameterException{Message: ptr("You cannot specify both a release version and a launch template"),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	case in.LaunchTemplate != nil && (ng.spec.LaunchTemplateID == "" || deref(in.LaunchTemplate.Id) != ng.spec.LaunchTemplateID):
		return nil, &ekstypes.InvalidParameterException{Message: ptr("The launch template must be the one the node group was created with"),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	case custom && deref(in.ReleaseVersion) != "":
		return nil, &ekstypes.InvalidParameterException{Message: ptr("You cannot specify a release version for a node group with a custom AMI: update its launch template instead"),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	case to != "" && custom:
		return nil, &ekstypes.InvalidParameterException{Message: ptr("You cannot specify a Kubernetes version for a node group with a custom AMI: update its launch template instead"),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	case to == "":
		to = ng.spec.Version
	case minorOf(to) < 0 || minorOf(to) > minorOf(cl.version):
		return nil, &ekstypes.InvalidParameterException{Message: ptr(fmt.Sprintf("Requested Nodegroup Kubernetes Version %s is not supported with cluster version %s", to, cl.version)),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	}
	u := &eksUpdate{cluster: cluster, nodegroup: name, token: deref(in.ClientRequestToken), typ: ekstypes.UpdateTypeVersionUpdate, force: in.Force}
	if lt := in.LaunchTemplate; lt != nil {
		t := s.ec2.template(ng.spec.LaunchTemplateID)
		version, err := strconv.ParseInt(deref(lt.Version), 10, 64)
		if t == nil || err != nil || version < 1 || version > t.latest() {
			return nil, &ekstypes.InvalidParameterException{Message: ptr("Launch template version " + deref(lt.Version) + " does not exist"),
				ClusterName: ptr(cluster), NodegroupName: ptr(name)}
		}
		u.params = []ekstypes.UpdateParam{{Type: ekstypes.UpdateParamTypeLaunchTemplateVersion, Value: lt.Version}}
		u.phases = func(end func()) {
			s.replaceNodesLocked(ng, version, func() { ng.spec.LaunchTemplateVersion = deref(lt.Version); end() })
		}
		u = s.startUpdateLocked(u, EKSNodegroupUpdateDuration, func() {}, nil)
		return &awseks.UpdateNodegroupVersionOutput{Update: u.describe()}, nil
	}
	release, image := deref(in.ReleaseVersion), ""
	switch r, found, catalog := s.releaseLocked(ng.spec.AMIType, to, release); {
	case found:
		release, image = r.Release, r.ImageID
	case catalog && release != "":
		return nil, &ekstypes.InvalidParameterException{Message: ptr(fmt.Sprintf("Requested release version %s is not valid for kubernetes version %s", release, to)),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	case release == "":
		release = fmt.Sprintf("%s.0-%s", to, s.now().Format("20060102"))
	}
	u.params = []ekstypes.UpdateParam{{Type: ekstypes.UpdateParamTypeVersion, Value: ptr(to)}, {Type: ekstypes.UpdateParamTypeReleaseVersion, Value: ptr(release)}}
	if image != "" && s.ec2.template(ng.ltID) != nil && !custom {
		u.phases = func(end func()) {
			s.replaceNodesLocked(ng, s.ec2.addVersionFromLatest(ng.ltID, image, "eks"), end)
		}
	}
	u = s.startUpdateLocked(u, EKSNodegroupUpdateDuration, func() { ng.spec.Version, ng.spec.ReleaseVersion = to, release }, nil)
	return &awseks.UpdateNodegroupVersionOutput{Update: u.describe()}, nil
}
