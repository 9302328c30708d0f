package providers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
)

// Tags of EKS groups (besides TagPlatform=eks and TagCluster=<EKS cluster name>).
const (
	// TagAMIFamily picks the EKS-optimized AMI family of an `auto` source: al2023 (default), al2023-nvidia,
	// al2023-neuron, al2, al2-gpu, bottlerocket, bottlerocket-nvidia, windows-core-2022, ... (eks.Families).
	TagAMIFamily = "patch-agent/ami-family"
	// TagKubernetesVersion pins the Kubernetes version of an `auto` source ("1.30"); default: the control
	// plane's version from DescribeCluster. A version newer than the control plane is refused.
	TagKubernetesVersion = "patch-agent/kubernetes-version"
	// TagArchitecture overrides the architecture of an `auto` source (x86_64 or arm64); default: the
	// architecture of the group's instance types (EC2 DescribeInstanceTypes).
	TagArchitecture = "patch-agent/architecture"
)

// ParameterAuto as the value of TagParameter derives the AMI parameter from the platform: for EKS, the
// public parameter of the EKS-optimized AMI for the cluster's Kubernetes version, the AMI family and the
// architecture of the group's instance types.
const ParameterAuto = "auto"

// EKSSources resolves the AMI source of EKS targets at discovery (it implements SourceResolver):
//
//   - `auto` becomes the public parameter path of eks.ParameterPath, for the control plane's version from
//     DescribeCluster (or the pinned TagKubernetesVersion), TagAMIFamily (default al2023) and the
//     architecture of the group's instance types;
//   - an explicit public EKS AMI parameter (/aws/service/eks/optimized-ami/<version>/...,
//     /aws/service/bottlerocket/aws-k8s-<version>/..., Windows EKS_Optimized-<version>) is checked the same way.
//
// A node AMI for a newer Kubernetes minor version than the control plane is refused, and a path that cannot
// be built (unknown family, an empty or "undefined" version, no instance type) is an error: Discover marks
// the group misconfigured, so it is skipped and logged at discovery and never polled or rolled.
type EKSSources struct {
	Clusters      *eks.Clusters
	Architectures *eks.Architectures
	// EC2 reads the instance type of the group's launch template when the group has neither instances nor
	// mixed instances overrides.
	EC2 awsapi.EC2
}

var _ SourceResolver = (*EKSSources)(nil)

// ResolveSource implements SourceResolver for targets of PlatformEKS; other targets are left as they are.
func (s *EKSSources) ResolveSource(ctx context.Context, t *model.Target, g astypes.AutoScalingGroup) error {
	if t.Platform != model.PlatformEKS {
		return nil
	}
	tags := GroupTags(g)
	explicitVersion, isEKSPath := eks.VersionInParameter(t.Parameter)
	if t.Parameter != ParameterAuto && !isEKSPath {
		return nil // a golden-AMI parameter of the account: nothing to derive or check
	}
	if isEKSPath {
		if _, err := eks.ParseVersion(explicitVersion); err != nil {
			return fmt.Errorf("tag %s=%s: the Kubernetes version in the path is %w", model.TagParameter, t.Parameter, err)
		}
	}
	pinned, hasPin := tags[TagKubernetesVersion]
	if hasPin {
		if _, err := eks.ParseVersion(pinned); err != nil {
			return fmt.Errorf("tag %s: %w", TagKubernetesVersion, err)
		}
	}
	cluster, err := s.Clusters.Describe(ctx, t.Cluster)
	if err != nil {
		return fmt.Errorf("tag %s=%s: %w", model.TagCluster, t.Cluster, err)
	}
	if _, err := eks.ParseVersion(cluster.Version); err != nil {
		return fmt.Errorf("EKS cluster %s reports Kubernetes version %w: no AMI parameter can be built", t.Cluster, err)
	}
	if isEKSPath {
		if err := eks.CheckNodeVersion(explicitVersion, cluster.Version); err != nil {
			return fmt.Errorf("tag %s=%s on EKS cluster %s: %w", model.TagParameter, t.Parameter, t.Cluster, err)
		}
		return nil
	}
	version := cluster.Version
	if hasPin {
		if err := eks.CheckNodeVersion(pinned, cluster.Version); err != nil {
			return fmt.Errorf("tag %s=%s on EKS cluster %s: %w", TagKubernetesVersion, pinned, t.Cluster, err)
		}
		version = pinned
	}
	family := strings.ToLower(strings.TrimSpace(tags[TagAMIFamily]))
	if family == "" {
		family = eks.FamilyAL2023
	}
	arch := strings.TrimSpace(tags[TagArchitecture])
	if arch == "" {
		types, err := s.instanceTypes(ctx, g)
		if err != nil {
			return fmt.Errorf("%s=%s: %w (or set tag %s)", model.TagParameter, ParameterAuto, err, TagArchitecture)
		}
		if arch, err = s.Architectures.For(ctx, types); err != nil {
			return fmt.Errorf("%s=%s: architecture of the group's instance types: %w", model.TagParameter, ParameterAuto, err)
		}
	}
	path, err := eks.ParameterPath(family, version, arch)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", model.TagParameter, ParameterAuto, err)
	}
	t.Parameter = path
	return nil
}

// instanceTypes returns the instance types the group launches: its mixed instances overrides, the types of
// its instances, and otherwise the instance type of the launch template version it references.
func (s *EKSSources) instanceTypes(ctx context.Context, g astypes.AutoScalingGroup) ([]string, error) {
	seen := map[string]bool{}
	if mip := g.MixedInstancesPolicy; mip != nil && mip.LaunchTemplate != nil {
		for _, o := range mip.LaunchTemplate.Overrides {
			if it := aws.ToString(o.InstanceType); it != "" {
				seen[it] = true
			}
		}
	}
	for _, i := range g.Instances {
		if it := aws.ToString(i.InstanceType); it != "" {
			seen[it] = true
		}
	}
	if len(seen) == 0 && s.EC2 != nil {
		ref, err := TemplateRef(g)
		if err != nil {
			return nil, err
		}
		in := &ec2.DescribeLaunchTemplateVersionsInput{Versions: []string{ref.Version}}
		if ref.ID != "" {
			in.LaunchTemplateId = aws.String(ref.ID)
		} else {
			in.LaunchTemplateName = aws.String(ref.Name)
		}
		out, err := s.EC2.DescribeLaunchTemplateVersions(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("reading the instance type of launch template %s version %s: %w", ref.ID+ref.Name, ref.Version, err)
		}
		for _, v := range out.LaunchTemplateVersions {
			if v.LaunchTemplateData != nil && v.LaunchTemplateData.InstanceType != "" {
				seen[string(v.LaunchTemplateData.InstanceType)] = true
			}
		}
	}
	if len(seen) == 0 {
		return nil, errors.New("the group names no instance type (attribute-based instance type selection?)")
	}
	out := make([]string, 0, len(seen))
	for it := range seen {
		out = append(out, it)
	}
	sort.Strings(out)
	return out, nil
}
