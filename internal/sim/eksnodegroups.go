package sim

import (
	"context"
	"fmt"
	"time"

	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
)

// Amazon EKS managed node groups, as far as the account sees them: EKS owns an Auto Scaling group per node group,
// on a launch template EKS created with the AMI of the node group's AMI type and release version.
//
// Amazon EKS User Guide, "Simplify node lifecycle with managed node groups": the group is named
// eks-<node group name>-<uuid>, carries the tags eks:cluster-name, eks:nodegroup-name,
// kubernetes.io/cluster/<cluster>=owned and the Cluster Autoscaler auto-discovery tags, and DescribeNodegroup
// names it in resources.autoScalingGroups. Kubernetes nodes are not simulated here (internal/testworld/kubesim does that).

// EKSNodegroupSpec describes a managed node group to create with CreateEKSNodegroup.
type EKSNodegroupSpec struct {
	// Cluster is an EKS cluster created with CreateEKSCluster; Name the node group's name.
	Cluster, Name string
	// AMIType is the node group's AMI type, e.g. AL2023_ARM_64_STANDARD, AL2023_x86_64_STANDARD, CUSTOM.
	AMIType string
	// ReleaseVersion is the AMI release version, e.g. 1.31.7-20250610 ("" for CUSTOM).
	ReleaseVersion string
	// Version is the node group's Kubernetes version. Default: the cluster's.
	Version string
	// ImageID and InstanceType are what EKS's launch template for the node group launches.
	ImageID, InstanceType string
	Min, Max, Desired     int32
	// Tags are the node group's own tags (DescribeNodegroup tags; the opt-in and policy tags of the agent).
	Tags map[string]string
	// LaunchTemplateID, when set, is the user's launch template the node group was created with (the one a
	// CUSTOM node group's AMI comes from), at LaunchTemplateVersion (default "1"); ImageID is then ignored.
	LaunchTemplateID, LaunchTemplateVersion string
	// MaxUnavailable is the node group's updateConfig (0: unset, EKS's default of one node).
	MaxUnavailable int32
	// GroupTags are extra tags on the node group's Auto Scaling group, as a user would add them there.
	GroupTags map[string]string
}

// nodegroup is one managed node group.
type nodegroup struct {
	spec      EKSNodegroupSpec
	arn       string
	groupName string
	createdAt time.Time
	// ltID is the launch template the node group's Auto Scaling group launches from: EKS's own, or the user's.
	ltID string
}

// CreateEKSNodegroup creates a managed node group of an existing EKS cluster and the Auto Scaling group EKS runs
// it on (its instances InService at once), and returns that group's name. Setup helper: not counted.
// Errors: ResourceNotFoundException (no such cluster), ResourceInUseException (the node group exists), and those
// of CreateGroup.
func (s *eksService) CreateEKSNodegroup(spec EKSNodegroupSpec) (groupName string, err error) {
	unlock := s.lock()
	cl := s.eksClusters[spec.Cluster]
	if cl == nil {
		unlock()
		return "", &ekstypes.ResourceNotFoundException{Message: ptr("No cluster found for name: " + spec.Cluster + "."), ClusterName: ptr(spec.Cluster)}
	}
	if s.nodegroups[spec.Cluster][spec.Name] != nil {
		unlock()
		return "", &ekstypes.ResourceInUseException{Message: ptr("NodeGroup already exists with name " + spec.Name + " and cluster name " + spec.Cluster)}
	}
	if spec.Version == "" {
		spec.Version = cl.version
	}
	id := s.uuid()
	unlock()

	groupName = "eks-" + spec.Name + "-" + id
	lt, ltVersion := spec.LaunchTemplateID, spec.LaunchTemplateVersion
	if lt == "" {
		lt, ltVersion = s.ec2.CreateLaunchTemplate("eks-"+id, spec.ImageID, spec.InstanceType), "1"
	} else if ltVersion == "" {
		ltVersion, spec.LaunchTemplateVersion = "1", "1"
	}
	tags := map[string]string{
		"eks:cluster-name":                          spec.Cluster,
		"eks:nodegroup-name":                        spec.Name,
		"kubernetes.io/cluster/" + spec.Cluster:     "owned",
		"k8s.io/cluster-autoscaler/enabled":         "true",
		"k8s.io/cluster-autoscaler/" + spec.Cluster: "owned",
	}
	for k, v := range spec.GroupTags {
		tags[k] = v
	}
	if err := s.autoScaling.CreateGroup(GroupSpec{Name: groupName, Min: spec.Min, Max: spec.Max, Desired: spec.Desired,
		LaunchTemplateID: lt, LaunchTemplateVersion: ltVersion, Tags: tags}); err != nil {
		return "", err
	}
	defer s.lock()()
	if s.nodegroups[spec.Cluster] == nil {
		s.nodegroups[spec.Cluster] = map[string]*nodegroup{}
	}
	s.nodegroups[spec.Cluster][spec.Name] = &nodegroup{
		spec:      spec,
		arn:       fmt.Sprintf("arn:aws:eks:%s:%s:nodegroup/%s/%s/%s", s.opts.Region, s.opts.AccountID, spec.Cluster, spec.Name, id),
		groupName: groupName,
		createdAt: s.now(),
		ltID:      lt,
	}
	return groupName, nil
}

// eksListPage pages names for ListClusters and ListNodegroups: maxResults 1-100 (default 100), nextToken.
func eksListPage(names []string, maxResults *int32, nextToken *string) (page []string, next *string, err error) {
	limit := int32(100)
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > 100 {
			return nil, nil, &ekstypes.InvalidParameterException{Message: ptr("maxResults must be between 1 and 100")}
		}
		limit = *maxResults
	}
	from := ""
	if nextToken != nil {
		s, ok := cutPrefix(*nextToken, "eks-")
		if !ok {
			return nil, nil, &ekstypes.InvalidParameterException{Message: ptr("The nextToken is invalid")}
		}
		from = s
	}
	page = []string{}
	for _, n := range names {
		if n < from {
			continue
		}
		if int32(len(page)) == limit {
			return page, ptr("eks-" + n), nil
		}
		page = append(page, n)
	}
	return page, nil, nil
}

// ListClusters returns the names of the account's EKS clusters in name order, paged by MaxResults (1-100,
// default 100) and NextToken.
// Amazon EKS API Reference, "ListClusters". Errors: InvalidParameterException.
func (c *EKSClient) ListClusters(ctx context.Context, in *awseks.ListClustersInput, _ ...func(*awseks.Options)) (*awseks.ListClustersOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:ListClusters")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &awseks.ListClustersInput{}
	}
	page, next, err := eksListPage(sortedKeys(s.eksClusters), in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &awseks.ListClustersOutput{Clusters: page, NextToken: next}, nil
}

// ListNodegroups returns the names of a cluster's managed node groups in name order, paged by MaxResults (1-100,
// default 100) and NextToken.
// Amazon EKS API Reference, "ListNodegroups". Errors: ResourceNotFoundException, InvalidParameterException.
func (c *EKSClient) ListNodegroups(ctx context.Context, in *awseks.ListNodegroupsInput, _ ...func(*awseks.Options)) (*awseks.ListNodegroupsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:ListNodegroups")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &awseks.ListNodegroupsInput{}
	}
	name := deref(in.ClusterName)
	if s.eksClusters[name] == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No cluster found for name: " + name + "."), ClusterName: ptr(name)}
	}
	names := sortedKeys(s.nodegroups[name])
	page, next, err := eksListPage(names, in.MaxResults, in.NextToken)
	if err != nil {
		return nil, err
	}
	return &awseks.ListNodegroupsOutput{Nodegroups: page, NextToken: next}, nil
}

// DescribeNodegroup describes a managed node group: its Kubernetes version, AMI type, release version,
// instance types, scaling configuration, status ACTIVE and resources.autoScalingGroups (the group EKS runs it
// on).
// Amazon EKS API Reference, "DescribeNodegroup". Errors: ResourceNotFoundException.
func (c *EKSClient) DescribeNodegroup(ctx context.Context, in *awseks.DescribeNodegroupInput, _ ...func(*awseks.Options)) (*awseks.DescribeNodegroupOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "eks:DescribeNodegroup")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &awseks.DescribeNodegroupInput{}
	}
	cluster, name := deref(in.ClusterName), deref(in.NodegroupName)
	ng := s.nodegroups[cluster][name]
	if s.eksClusters[cluster] == nil || ng == nil {
		return nil, &ekstypes.ResourceNotFoundException{Message: ptr("No node group found for name: " + name + "."),
			ClusterName: ptr(cluster), NodegroupName: ptr(name)}
	}
	spec := ng.spec
	out := &ekstypes.Nodegroup{
		NodegroupName:  ptr(spec.Name),
		NodegroupArn:   ptr(ng.arn),
		ClusterName:    ptr(spec.Cluster),
		Version:        ptr(spec.Version),
		ReleaseVersion: nilIfEmpty(spec.ReleaseVersion),
		AmiType:        ekstypes.AMITypes(spec.AMIType),
		CapacityType:   ekstypes.CapacityTypesOnDemand,
		InstanceTypes:  []string{spec.InstanceType},
		Status:         s.eksNodegroupStatusLocked(spec.Cluster, spec.Name),
		CreatedAt:      ptr(ng.createdAt),
		ModifiedAt:     ptr(ng.createdAt),
		ScalingConfig:  &ekstypes.NodegroupScalingConfig{MinSize: ptr(spec.Min), MaxSize: ptr(spec.Max), DesiredSize: ptr(spec.Desired)},
		Resources:      &ekstypes.NodegroupResources{AutoScalingGroups: []ekstypes.AutoScalingGroup{{Name: ptr(ng.groupName)}}},
		Labels:         map[string]string{},
		Tags:           map[string]string{},
	}
	for k, v := range spec.Tags {
		out.Tags[k] = v
	}
	if spec.LaunchTemplateID != "" {
		out.LaunchTemplate = &ekstypes.LaunchTemplateSpecification{Id: ptr(spec.LaunchTemplateID), Version: ptr(spec.LaunchTemplateVersion)}
	}
	out.UpdateConfig = &ekstypes.NodegroupUpdateConfig{MaxUnavailable: ptr(max(spec.MaxUnavailable, 1))}
	return &awseks.DescribeNodegroupOutput{Nodegroup: out}, nil
}
