package audit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Where groups come from besides their tags: ECS capacity providers and EKS managed node groups, and the
// launch template versions they launch.

// errReadOnly answers the write call that providers.Templates' interface holds: the audit never makes it.
var errReadOnly = errors.New("patch-agent audit is read-only")

// templateReader lets providers.Templates.Resolve read launch template versions through the read-only EC2 API,
// and keeps each version it read so that its instance type is known without another call.
type templateReader struct {
	api awsapi.ReadOnlyEC2
	// versions by "<template id>/<number>" and "<template name>/<number>".
	versions map[string]ec2types.LaunchTemplateVersion
}

var _ awsapi.EC2 = (*templateReader)(nil)

func (r *templateReader) DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, optFns ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error) {
	out, err := r.api.DescribeLaunchTemplateVersions(ctx, in, optFns...)
	if err != nil {
		return nil, err
	}
	for _, v := range out.LaunchTemplateVersions {
		n := strconv.FormatInt(aws.ToInt64(v.VersionNumber), 10)
		r.versions[aws.ToString(v.LaunchTemplateId)+"/"+n] = v
		r.versions[aws.ToString(v.LaunchTemplateName)+"/"+n] = v
	}
	return out, nil
}

func (r *templateReader) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	return r.api.DescribeInstances(ctx, in, optFns...)
}

func (r *templateReader) DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, optFns ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	return r.api.DescribeImages(ctx, in, optFns...)
}

// CreateLaunchTemplateVersion returns errReadOnly.
func (r *templateReader) CreateLaunchTemplateVersion(context.Context, *ec2.CreateLaunchTemplateVersionInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error) {
	return nil, errReadOnly
}

// instanceType returns the instance type of version number of the template ref names ("" when it has none:
// attribute-based instance type selection, or overrides only).
func (r *templateReader) instanceType(number int64, ref state.LaunchTemplateRef) string {
	key := ref.ID
	if key == "" {
		key = ref.Name
	}
	v, ok := r.versions[key+"/"+strconv.FormatInt(number, 10)]
	if !ok || v.LaunchTemplateData == nil {
		return ""
	}
	return string(v.LaunchTemplateData.InstanceType)
}

// owners are the groups that ECS capacity providers and EKS managed node groups name, by group name.
type owners struct {
	capacityProviders map[string]string // group -> ECS cluster
	nodegroups        map[string]nodegroupInfo
}

type nodegroupInfo struct {
	cluster, name, amiType, releaseVersion string
}

// owners reads which group each ECS capacity provider (per cluster: ListClusters, DescribeCapacityProviders)
// and each EKS managed node group (ListClusters, ListNodegroups, DescribeNodegroup) runs on. A failed read is
// a warning: the groups it would have named fall back to their tags.
func (w *run) owners(ctx context.Context) owners {
	o := owners{capacityProviders: map[string]string{}, nodegroups: map[string]nodegroupInfo{}}
	if w.ECS != nil {
		if err := w.ecsCapacityProviders(ctx, o.capacityProviders); err != nil {
			w.warnf("ECS capacity providers not read, ECS clusters told from tags only: %v", err)
		}
	}
	if w.EKS != nil {
		if err := w.eksNodegroups(ctx, o.nodegroups); err != nil {
			w.warnf("EKS managed node groups not read, EKS clusters told from tags only: %v", err)
		}
	}
	return o
}

func (w *run) ecsCapacityProviders(ctx context.Context, into map[string]string) error {
	var clusters []string
	p := ecs.NewListClustersPaginator(w.ECS, &ecs.ListClustersInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing ECS clusters: %w", err)
		}
		clusters = append(clusters, page.ClusterArns...)
	}
	for _, arn := range clusters {
		cluster := arn
		if i := strings.LastIndex(arn, ":cluster/"); i >= 0 {
			cluster = arn[i+len(":cluster/"):]
		}
		in := &ecs.DescribeCapacityProvidersInput{Cluster: aws.String(arn), MaxResults: aws.Int32(10)}
		for {
			out, err := w.ECS.DescribeCapacityProviders(ctx, in)
			if err != nil {
				return fmt.Errorf("describing the capacity providers of ECS cluster %s: %w", cluster, err)
			}
			for _, cp := range out.CapacityProviders {
				if asg := cp.AutoScalingGroupProvider; asg != nil {
					into[groupNameOfARN(aws.ToString(asg.AutoScalingGroupArn))] = cluster
				}
			}
			if aws.ToString(out.NextToken) == "" {
				break
			}
			in.NextToken = out.NextToken
		}
	}
	return nil
}

// groupNameOfARN returns the group name of an Auto Scaling group ARN
// (arn:aws:autoscaling:<region>:<account>:autoScalingGroup:<uuid>:autoScalingGroupName/<name>), or the
// argument itself when it is a name.
func groupNameOfARN(arn string) string {
	if i := strings.Index(arn, ":autoScalingGroupName/"); i >= 0 {
		return arn[i+len(":autoScalingGroupName/"):]
	}
	return arn
}

func (w *run) eksNodegroups(ctx context.Context, into map[string]nodegroupInfo) error {
	var clusters []string
	p := awseks.NewListClustersPaginator(w.EKS, &awseks.ListClustersInput{})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing EKS clusters: %w", err)
		}
		clusters = append(clusters, page.Clusters...)
	}
	for _, cluster := range clusters {
		var names []string
		np := awseks.NewListNodegroupsPaginator(w.EKS, &awseks.ListNodegroupsInput{ClusterName: aws.String(cluster)})
		for np.HasMorePages() {
			page, err := np.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("listing the managed node groups of EKS cluster %s: %w", cluster, err)
			}
			names = append(names, page.Nodegroups...)
		}
		for _, name := range names {
			out, err := w.EKS.DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String(cluster), NodegroupName: aws.String(name)})
			if err != nil {
				return fmt.Errorf("describing EKS managed node group %s/%s: %w", cluster, name, err)
			}
			ng := out.Nodegroup
			if ng == nil || ng.Resources == nil {
				continue
			}
			info := nodegroupInfo{cluster: cluster, name: name, amiType: string(ng.AmiType), releaseVersion: aws.ToString(ng.ReleaseVersion)}
			for _, g := range ng.Resources.AutoScalingGroups {
				into[aws.ToString(g.Name)] = info
			}
		}
	}
	return nil
}
