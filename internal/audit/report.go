package audit

import (
	"sort"
	"time"
)

// How a group chooses the AMI its instances launch from (Group.AMISource).
const (
	// SourceHardCoded: the launch template version the group launches names an AMI id.
	SourceHardCoded = "hard-coded"
	// SourceSSMResolve: the launch template version's ImageId is "resolve:ssm:<parameter>"; EC2 resolves the
	// parameter at every launch, so running instances keep the AMI they launched with.
	SourceSSMResolve = "resolve:ssm"
	// SourcePatchAgent: the group is opted in to patch-agent (tag patch-agent/enabled=true), which moves its
	// launch template to the AMI its parameter names and replaces the instances.
	SourcePatchAgent = "patch-agent"
	// SourceLaunchConfiguration: the group launches from a launch configuration, which must be migrated to a
	// launch template (patch-agent manages only groups on launch templates).
	SourceLaunchConfiguration = "launch-configuration"
	// SourceEKSManaged: an EKS managed node group whose AMI EKS chooses from the node group's AMI type and
	// release version (UpdateNodegroupVersion moves it).
	SourceEKSManaged = "eks-managed"
	// SourceUnknown: the group's launch template could not be read.
	SourceUnknown = "unknown"
)

// Platforms (Group.Platform).
const (
	PlatformECS     = "ecs"
	PlatformEKS     = "eks"
	PlatformUnknown = "unknown"
)

// How the platform and cluster of a group were found (Group.ClusterFrom).
const (
	FromEKSNodegroup        = "eks-nodegroup"         // DescribeNodegroup lists the group in resources.autoScalingGroups
	FromECSCapacityProvider = "ecs-capacity-provider" // a capacity provider of the cluster names the group's ARN
	FromPatchAgentTag       = "tag:patch-agent/cluster"
	FromEKSClusterNameTag   = "tag:eks:cluster-name"
	FromKubernetesTag       = "tag:kubernetes.io/cluster/" // followed by the cluster's name
)

// Group statuses (Group.Status).
const (
	StatusCurrent = "current" // every instance runs the recommended AMI (or a newer one)
	StatusBehind  = "behind"  // at least one instance runs an older AMI
	StatusEmpty   = "empty"   // no instances
	StatusUnknown = "unknown" // no recommended AMI could be found for the group
)

// Unknown is the value of DaysBehind and ReleasesBehind when they cannot be told: an AMI's creation date is
// unknown (DescribeImages no longer knows it), or the recommended parameter's history cannot be read. The
// table and the CSV write it "unknown", the JSON null (never -1): one meaning, one spelling per format.
const Unknown = -1

// Report is the audit of every Auto Scaling group of one account and region.
type Report struct {
	Region      string    `json:"region"`
	GeneratedAt time.Time `json:"generatedAt"`
	Summary     Summary   `json:"summary"`
	Groups      []Group   `json:"groups"`
	// Warnings are the reads that failed without stopping the audit (a missing permission, a service not
	// offered in the region); the fields they would have filled are unknown.
	Warnings []string `json:"warnings"`
}

// Group is the audit of one Auto Scaling group.
type Group struct {
	Name string `json:"group"`
	// Platform is ecs, eks or unknown; Cluster the ECS or EKS cluster; ClusterFrom how they were found
	// (FromEKSNodegroup, FromECSCapacityProvider, or a tag).
	Platform    string `json:"platform"`
	Cluster     string `json:"cluster"`
	ClusterFrom string `json:"clusterFrom"`
	// Nodegroup, AMIType and ReleaseVersion are set for the groups of EKS managed node groups.
	Nodegroup      string `json:"nodegroup"`
	AMIType        string `json:"amiType"`
	ReleaseVersion string `json:"releaseVersion"`
	// AMISource is how the group chooses its AMI: one of the Source constants.
	AMISource string `json:"amiSource"`
	// LaunchTemplate is "<id or name>:<version as referenced>=<version number>"; LaunchConfiguration the
	// launch configuration's name. One of them is set.
	LaunchTemplate      string `json:"launchTemplate"`
	LaunchConfiguration string `json:"launchConfiguration"`
	// ConfiguredImage is the ImageId as the launch template version or launch configuration writes it (an AMI
	// id or "resolve:ssm:<parameter>"); LaunchImageID the AMI a new instance would get now.
	ConfiguredImage string `json:"configuredImage"`
	LaunchImageID   string `json:"launchImageId"`
	// AMIFamily is the ECS-optimized AMI family of an ECS group (ECSFamilyAL2023 ...; ECSParameterPath), ""
	// for other platforms.
	AMIFamily string `json:"amiFamily"`
	// Architecture (x86_64 or arm64) of InstanceTypes, from EC2 DescribeInstanceTypes.
	Architecture  string   `json:"architecture"`
	InstanceTypes []string `json:"instanceTypes"`
	// Instances counts the group's instances (not yet terminated); OutdatedInstances those on an AMI older
	// than the recommended one (or not the recommended one, when their AMI's date is unknown).
	Instances         int `json:"instances"`
	OutdatedInstances int `json:"outdatedInstances"`
	// InUse lists the AMIs the instances run, oldest first.
	InUse []AMIUse `json:"inUse"`
	// OldestImageID is the oldest outdated AMI in use ("" when none is outdated).
	OldestImageID string `json:"oldestImageId"`
	// RecommendedParameter is the SSM parameter naming the recommended AMI: the group's
	// patch-agent/ami-parameter, else the public parameter of its platform and architecture.
	RecommendedParameter string     `json:"recommendedParameter"`
	RecommendedImageID   string     `json:"recommendedImageId"`
	RecommendedReleased  *time.Time `json:"recommendedReleased"`
	// DaysBehind is whole days from the oldest outdated AMI's creation date to the recommended AMI's (0 when
	// nothing is outdated, Unknown when a date is unknown). ReleasesBehind counts the AMIs the recommended
	// parameter named after the oldest outdated one (its GetParameterHistory), Unknown when it cannot be told.
	DaysBehind     int `json:"daysBehind"`
	ReleasesBehind int `json:"releasesBehind"`
	// Status is current, behind, empty or unknown.
	Status string `json:"status"`
	// Notes say what to do about the group and what could not be read.
	Notes []string `json:"notes"`

	// behind is the exact time between the two creation dates behind DaysBehind (0 when unknown).
	behind time.Duration
}

// AMIUse is one AMI the instances of a group run.
type AMIUse struct {
	ImageID string `json:"imageId"`
	// Name and Created are from DescribeImages; nil Created: EC2 no longer knows the AMI.
	Name      string     `json:"name"`
	Created   *time.Time `json:"created"`
	Instances int        `json:"instances"`
	Outdated  bool       `json:"outdated"`
}

// Summary counts the groups and instances of a report.
type Summary struct {
	Groups            int `json:"groups"`
	Current           int `json:"current"`
	Behind            int `json:"behind"`
	Empty             int `json:"empty"`
	Unknown           int `json:"unknown"`
	Instances         int `json:"instances"`
	OutdatedInstances int `json:"outdatedInstances"`
	// ByAMISource and ByPlatform count the groups by Group.AMISource and Group.Platform.
	ByAMISource map[string]int `json:"byAmiSource"`
	ByPlatform  map[string]int `json:"byPlatform"`
	// MostBehind is the group with the most DaysBehind ("" when none is behind by a known number of days).
	MostBehind     string `json:"mostBehind"`
	MostDaysBehind int    `json:"mostDaysBehind"`
}

// summarize counts the groups of r.
func summarize(groups []Group) Summary {
	s := Summary{Groups: len(groups), ByAMISource: map[string]int{}, ByPlatform: map[string]int{}}
	for _, g := range groups {
		switch g.Status {
		case StatusCurrent:
			s.Current++
		case StatusBehind:
			s.Behind++
		case StatusEmpty:
			s.Empty++
		default:
			s.Unknown++
		}
		s.Instances += g.Instances
		s.OutdatedInstances += g.OutdatedInstances
		s.ByAMISource[g.AMISource]++
		s.ByPlatform[g.Platform]++
		if g.DaysBehind > s.MostDaysBehind {
			s.MostBehind, s.MostDaysBehind = g.Name, g.DaysBehind
		}
	}
	return s
}

// BehindMoreThan returns the names of the groups whose oldest outdated AMI is more than d older than the
// recommended AMI, sorted. Groups whose dates are unknown are not counted.
func (r *Report) BehindMoreThan(d time.Duration) []string {
	var out []string
	for _, g := range r.Groups {
		if g.DaysBehind != Unknown && g.OutdatedInstances > 0 && g.behind > d {
			out = append(out, g.Name)
		}
	}
	sort.Strings(out)
	return out
}
