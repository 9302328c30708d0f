package sim

import (
	"strconv"
	"time"

	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// How a managed node group update replaces the nodes, after the Amazon EKS User Guide, "Understand
// each phase of node updates" and "Update a managed node group for your cluster", and the Amazon EKS API
// Reference, "UpdateNodegroupVersion":
//   - the update targets a release version (releaseVersion; default the latest release of the node group's
//     Kubernetes version and AMI type) or a launch template version (launchTemplate), never both; a CUSTOM node
//     group takes only a launch template version, and a release EKS does not publish for the node group's AMI
//     type and version is an InvalidParameterException;
//   - setup, scale up, upgrade, scale down: the node group's Auto Scaling group launches as many new nodes as it
//     has old ones (max and desired raised), then, once they have booted, the old ones are terminated and max and
//     desired go back; only then is the update Successful and the node group on its new version. EKS's own
//     cordon and eviction of the old nodes are not modelled here (no Kubernetes API in the account);
//   - a PodDisruptionBudget that keeps pods from being evicted fails the update with PodEvictionFailure unless
//     force is set (EKSUpdateFailure.UnlessForce). A failed update leaves the node group on its release and its
//     nodes as they were (the simulation models the failure before any old node is removed).

// EKSRelease is one published release of an EKS-optimized AMI for node groups of AMIType at KubernetesVersion.
// ReleaseParameter and ImageParameter are the public parameters that name it (eks.ReleaseParameters gives
// them; "" puts none): the caller names them, so the account does not depend on the agent's path rules.
type EKSRelease struct {
	AMIType, KubernetesVersion, Release, ImageID string
	ReleaseParameter, ImageParameter             string
}

type eksReleaseKey struct{ amiType, version string }

// PublishEKSRelease publishes a release as EKS does: the release and its AMI become what UpdateNodegroupVersion
// accepts for the AMI type and version, and the release's public parameters (Amazon EKS User Guide, "Retrieve
// recommended Amazon Linux AMI IDs": release_version and image_id) name it from now on. Setup helper: not
// counted.
func (s *eksService) PublishEKSRelease(r EKSRelease) {
	if r.ReleaseParameter != "" {
		s.ssm.PutParameter(r.ReleaseParameter, r.Release)
	}
	if r.ImageParameter != "" {
		s.ssm.PutParameter(r.ImageParameter, r.ImageID)
	}
	defer s.lock()()
	w := s.eksUpgrades
	if w.releases == nil {
		w.releases = map[eksReleaseKey][]EKSRelease{}
	}
	k := eksReleaseKey{r.AMIType, r.KubernetesVersion}
	w.releases[k] = append(w.releases[k], r)
}

// releaseLocked returns the published release of the AMI type and version ("" = the latest one), and whether
// any release of them is published at all. Callers hold the lock.
func (s *eksService) releaseLocked(amiType, version, release string) (r EKSRelease, found, catalog bool) {
	list := s.eksUpgrades.releases[eksReleaseKey{amiType, version}]
	if len(list) == 0 {
		return EKSRelease{}, false, false
	}
	if release == "" {
		return list[len(list)-1], true, true
	}
	for _, r := range list {
		if r.Release == release {
			return r, true, true
		}
	}
	return EKSRelease{}, false, true
}

// EKSNodegroupView is a managed node group as tests observe it.
type EKSNodegroupView struct {
	Version, ReleaseVersion string
	// LaunchTemplateVersion is the version of the node group's launch template (CUSTOM), "" without one.
	LaunchTemplateVersion string
	Group                 string
}

// EKSNodegroup returns a managed node group's versions and Auto Scaling group.
func (s *eksService) EKSNodegroup(cluster, name string) (EKSNodegroupView, bool) {
	defer s.lock()()
	ng := s.nodegroups[cluster][name]
	if ng == nil {
		return EKSNodegroupView{}, false
	}
	return EKSNodegroupView{Version: ng.spec.Version, ReleaseVersion: ng.spec.ReleaseVersion, LaunchTemplateVersion: ng.spec.LaunchTemplateVersion,
		Group: ng.groupName}, true
}

// EKSNodegroups returns the account's Amazon EKS API as the managed node group rollouts use it.
func (a *Account) EKSNodegroups() awsapi.EKSNodegroups { return &EKSClient{s: a.eks} }

var _ awsapi.EKSNodegroups = (*EKSClient)(nil)

// replaceNodesLocked is the scale up, upgrade and scale down of a node group update: the group launches from
// its launch template at version (its image imageID), every node on another AMI is replaced, and end runs once
// the old nodes are terminating. Callers hold the lock.
func (s *eksService) replaceNodesLocked(ng *nodegroup, version int64, end func()) {
	g := s.autoScaling.group(ng.groupName)
	if g == nil {
		end()
		return
	}
	g.ltID, g.ltVersion = ng.ltID, strconv.FormatInt(version, 10)
	t := s.ec2.template(ng.ltID)
	var image string
	if t != nil && version >= 1 && version <= t.latest() {
		image = s.ec2.launchImageID(t.versions[version-1].imageID)
	}
	var old []*instance
	for _, inst := range s.autoScaling.running(g) {
		if inst.imageID != image {
			old = append(old, inst)
		}
	}
	if len(old) == 0 {
		end()
		return
	}
	n := int32(len(old))
	from := g.desired
	g.max, g.desired = g.max+n, g.desired+n
	s.autoScaling.recordDesired(g, from, CallerEKS)
	s.settle()
	s.after(s.opts.BootDelay+time.Minute, func() {
		for _, inst := range old {
			s.autoScaling.beginTerminate(inst, CauseEKSUpdate)
		}
		from := g.desired
		g.max, g.desired = g.max-n, g.desired-n
		s.autoScaling.recordDesired(g, from, CallerEKS)
		end()
	})
}

// CallerEKS records desired capacity changes made by a managed node group update; CauseEKSUpdate the
// terminations of its old nodes.
const (
	CallerEKS      = "eks"
	CauseEKSUpdate = "eks-update"
)

// podEvictionFailure is the error of an update that a PodDisruptionBudget blocked.
func podEvictionFailure(name string) []ekstypes.ErrorDetail {
	return []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodePodEvictionFailure,
		ErrorMessage: ptr("Reached max retries while trying to evict pods from nodes in node group " + name), ResourceIds: []string{name}}}
}
