package providers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// EKS managed node groups as rollout targets. EKS owns the node group's Auto Scaling group and drains
// and replaces its nodes itself when UpdateNodegroupVersion runs (Amazon EKS User Guide, "Update a managed node
// group for your cluster" and "Understand each phase of node updates"): the agent decides when (the same gates
// as every target), sends that one update, tracks it through DescribeUpdate and records it like any rollout.
// It never drains, cordons, terminates or completes lifecycle actions in the node group's own Auto Scaling
// group (tag eks:nodegroup-name; Discover refuses to roll it as a plain group).

// NodegroupClient owns the Amazon EKS calls of managed node group rollouts and the release parameters.
type NodegroupClient struct {
	EKS awsapi.EKSNodegroups
	SSM awsapi.SSM
}

var _ model.NodegroupAPI = NodegroupClient{}

// DiscoveredNodegroups are the opted-in managed node groups of one discovery pass.
type DiscoveredNodegroups struct {
	// Targets by record key (NodegroupKey) with their node groups as described.
	Targets    map[string]model.Target
	Nodegroups map[string]model.Nodegroup
	// Misconfigured: opted in, but a tag or the source is wrong; never rolled.
	Misconfigured map[string]error
}

// Discover lists every EKS cluster (ListClusters) and its node groups (ListNodegroups, 100 per page), describes
// each one (DescribeNodegroup: its tags) and keeps those whose tags opt them in (OptedIn, the same tag as
// groups). Their policy tags are those of groups (ParsePolicyTags). Source: a node group of an AMI type follows
// the release parameter of its Kubernetes version and AMI type (eks.ReleaseParameters); a CUSTOM one needs
// TagParameter (the AMI parameter of its launch template's AMI) and a launch template. One failed call fails
// the pass (nothing is rolled on half a view).
func (c NodegroupClient) Discover(ctx context.Context) (DiscoveredNodegroups, error) {
	d := DiscoveredNodegroups{Targets: map[string]model.Target{}, Nodegroups: map[string]model.Nodegroup{}, Misconfigured: map[string]error{}}
	clusters := awseks.NewListClustersPaginator(c.EKS, &awseks.ListClustersInput{})
	for clusters.HasMorePages() {
		page, err := clusters.NextPage(ctx)
		if err != nil {
			return DiscoveredNodegroups{}, fmt.Errorf("listing EKS clusters: %w", err)
		}
		for _, cluster := range page.Clusters {
			ngs := awseks.NewListNodegroupsPaginator(c.EKS, &awseks.ListNodegroupsInput{ClusterName: aws.String(cluster), MaxResults: aws.Int32(100)})
			for ngs.HasMorePages() {
				p, err := ngs.NextPage(ctx)
				if err != nil {
					return DiscoveredNodegroups{}, fmt.Errorf("listing managed node groups of EKS cluster %s: %w", cluster, err)
				}
				for _, name := range p.Nodegroups {
					ng, err := c.Describe(ctx, cluster, name)
					if err != nil {
						return DiscoveredNodegroups{}, err
					}
					key := model.NodegroupKey(cluster, name)
					t, err := NodegroupTarget(ng)
					switch {
					case err != nil:
						d.Misconfigured[key] = err
					case t != nil:
						d.Targets[key], d.Nodegroups[key] = *t, ng
					}
				}
			}
		}
	}
	return d, nil
}

// NodegroupTarget builds the Target of a managed node group from its tags: (nil, nil) when it is not opted in,
// an error naming every problem when it is opted in but misconfigured.
func NodegroupTarget(ng model.Nodegroup) (*model.Target, error) {
	key := model.NodegroupKey(ng.Cluster, ng.Name)
	on, err := model.OptedIn(ng.Tags)
	if err != nil {
		return nil, fmt.Errorf("managed node group %s is not managed: %w", key, err)
	}
	if !on {
		return nil, nil
	}
	t := &model.Target{Group: key, Platform: model.PlatformEKSManaged, Cluster: ng.Cluster, Parameter: ng.Tags[model.TagParameter]}
	var problems []string
	if ng.AMIType == string(ekstypes.AMITypesCustom) {
		if t.Parameter == "" || t.Parameter == ParameterAuto {
			problems = append(problems, fmt.Sprintf("AMI type CUSTOM: tag %s must name the SSM parameter of the AMI its launch template launches", model.TagParameter))
		}
		if ng.LaunchTemplate == nil {
			problems = append(problems, "AMI type CUSTOM without a launch template")
		}
	} else {
		release, _, err := eks.ReleaseParameters(ng.AMIType, ng.Version)
		if err != nil {
			problems = append(problems, err.Error())
		}
		t.Parameter = release
	}
	policy, err := model.ParsePolicyTags(ng.Tags)
	if err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	t.Policy = policy
	if len(problems) > 0 {
		return nil, fmt.Errorf("managed node group %s is opted in but misconfigured: %s", key, strings.Join(problems, "; "))
	}
	return t, nil
}

// Describe implements NodegroupAPI with DescribeNodegroup. Errors: the call's, wrapped with the node group.
func (c NodegroupClient) Describe(ctx context.Context, cluster, name string) (model.Nodegroup, error) {
	out, err := c.EKS.DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String(cluster), NodegroupName: aws.String(name)})
	if err != nil {
		return model.Nodegroup{}, fmt.Errorf("describing managed node group %s of EKS cluster %s: %w", name, cluster, err)
	}
	if out.Nodegroup == nil {
		return model.Nodegroup{}, fmt.Errorf("describing managed node group %s of EKS cluster %s: empty response", name, cluster)
	}
	n := out.Nodegroup
	ng := model.Nodegroup{Cluster: cluster, Name: name, Version: aws.ToString(n.Version), ReleaseVersion: aws.ToString(n.ReleaseVersion),
		AMIType: string(n.AmiType), Status: string(n.Status), Tags: map[string]string{}}
	for k, v := range n.Tags {
		ng.Tags[k] = v
	}
	if lt := n.LaunchTemplate; lt != nil {
		ng.LaunchTemplate = &state.LaunchTemplateRef{ID: aws.ToString(lt.Id), Name: aws.ToString(lt.Name), Version: aws.ToString(lt.Version)}
	}
	if n.Resources != nil {
		for _, g := range n.Resources.AutoScalingGroups {
			ng.AutoScalingGroups = append(ng.AutoScalingGroups, aws.ToString(g.Name))
		}
	}
	if u := n.UpdateConfig; u != nil {
		ng.MaxUnavailable, ng.MaxUnavailablePercentage = aws.ToInt32(u.MaxUnavailable), aws.ToInt32(u.MaxUnavailablePercentage)
	}
	return ng, nil
}

// ControlPlaneVersion implements NodegroupAPI with DescribeCluster: the cluster's Kubernetes version.
func (c NodegroupClient) ControlPlaneVersion(ctx context.Context, cluster string) (string, error) {
	out, err := c.EKS.DescribeCluster(ctx, &awseks.DescribeClusterInput{Name: aws.String(cluster)})
	if err != nil {
		return "", fmt.Errorf("describing EKS cluster %s: %w", cluster, err)
	}
	if out.Cluster == nil {
		return "", fmt.Errorf("describing EKS cluster %s: empty response", cluster)
	}
	return aws.ToString(out.Cluster.Version), nil
}

// StartUpdate implements NodegroupAPI with UpdateNodegroupVersion, always with req.Token as the
// ClientRequestToken: EKS answers a repeat with the update the token started (Amazon EKS API Reference,
// UpdateNodegroupVersion). Errors are the call's, wrapped: awsapi.IsResourceInUse (another update of the node
// group in progress), awsapi.IsInvalidRequest (a request EKS refuses as sent).
func (c NodegroupClient) StartUpdate(ctx context.Context, req model.NodegroupUpdateRequest) (model.NodegroupUpdate, error) {
	in := &awseks.UpdateNodegroupVersionInput{ClusterName: aws.String(req.Cluster), NodegroupName: aws.String(req.Name),
		ClientRequestToken: aws.String(req.Token), Force: req.Force}
	what := "release " + req.ReleaseVersion
	if lt := req.LaunchTemplate; lt != nil {
		in.LaunchTemplate = &ekstypes.LaunchTemplateSpecification{Version: aws.String(lt.Version)}
		if lt.ID != "" {
			in.LaunchTemplate.Id = aws.String(lt.ID)
		} else {
			in.LaunchTemplate.Name = aws.String(lt.Name)
		}
		what = "launch template " + lt.ID + lt.Name + " version " + lt.Version
	} else {
		in.ReleaseVersion = aws.String(req.ReleaseVersion)
		if req.Version != "" {
			in.Version = aws.String(req.Version)
			what = "Kubernetes " + req.Version + " " + what
		}
	}
	out, err := c.EKS.UpdateNodegroupVersion(ctx, in)
	if err != nil {
		return model.NodegroupUpdate{}, fmt.Errorf("UpdateNodegroupVersion of %s/%s to %s: %w", req.Cluster, req.Name, what, err)
	}
	if out.Update == nil {
		return model.NodegroupUpdate{}, fmt.Errorf("UpdateNodegroupVersion of %s/%s to %s: empty response", req.Cluster, req.Name, what)
	}
	return updateOf(out.Update), nil
}

// DescribeUpdate implements NodegroupAPI with DescribeUpdate of the node group's update id.
func (c NodegroupClient) DescribeUpdate(ctx context.Context, cluster, name, id string) (model.NodegroupUpdate, error) {
	out, err := c.EKS.DescribeUpdate(ctx, &awseks.DescribeUpdateInput{Name: aws.String(cluster), NodegroupName: aws.String(name), UpdateId: aws.String(id)})
	if err != nil {
		return model.NodegroupUpdate{}, fmt.Errorf("describing update %s of managed node group %s/%s: %w", id, cluster, name, err)
	}
	if out.Update == nil {
		return model.NodegroupUpdate{}, fmt.Errorf("describing update %s of managed node group %s/%s: empty response", id, cluster, name)
	}
	return updateOf(out.Update), nil
}

func updateOf(u *ekstypes.Update) model.NodegroupUpdate {
	out := model.NodegroupUpdate{ID: aws.ToString(u.Id), Status: string(u.Status)}
	for _, e := range u.Errors {
		out.Errors = append(out.Errors, fmt.Sprintf("%s: %s", e.ErrorCode, aws.ToString(e.ErrorMessage)))
	}
	return out
}

// ResolveRelease reads a release parameter and its image_id sibling (one GetParameters call). A release
// parameter that does not exist is (nil, nil): the caller shows the source as missing.
func (c NodegroupClient) ResolveRelease(ctx context.Context, amiType, version string) (*model.ResolvedRelease, error) {
	release, image, err := eks.ReleaseParameters(amiType, version)
	if err != nil {
		return nil, err
	}
	out, err := c.SSM.GetParameters(ctx, &ssm.GetParametersInput{Names: []string{release, image}})
	if err != nil {
		return nil, fmt.Errorf("reading release parameters %s, %s: %w", release, image, err)
	}
	var r *model.ResolvedRelease
	imageID := ""
	for _, p := range out.Parameters {
		switch aws.ToString(p.Name) {
		case release:
			r = &model.ResolvedRelease{Parameter: release, Release: strings.TrimSpace(aws.ToString(p.Value)), Version: p.Version,
				LastModified: aws.ToTime(p.LastModifiedDate)}
		case image:
			if id, _, err := ParseParameterValue(aws.ToString(p.Value)); err == nil {
				imageID = id
			}
		}
	}
	if r != nil {
		r.ImageID = imageID
	}
	return r, nil
}

// Names returns the record keys of the managed node group targets, sorted.
func (d DiscoveredNodegroups) Names() []string {
	out := make([]string, 0, len(d.Targets))
	for k := range d.Targets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// NodegroupReader gathers what one tick knows about a managed node group target (Inputs with Nodegroup set):
// the control plane's version, the release parameter (AMI types) or the AMI parameter and the launch template's
// current AMI (CUSTOM), and a read-only view of the node group's own Auto Scaling group (DescribeAutoScalingGroups,
// DescribeInstances) for the AMI gate and the counts on status. It changes nothing.
type NodegroupReader struct {
	Client      NodegroupClient
	AutoScaling awsapi.AutoScaling
	EC2         awsapi.EC2
	Templates   TemplateProvider
	Resolver    Resolver
}

// Inputs returns the tick's inputs of target t (a NodegroupTarget) whose node group is ng, paused by pause
// (nil: not paused). A missing or invalid source is not an error: it is Inputs.SourceProblem, a gate. Errors:
// the calls', wrapped.
func (r NodegroupReader) Inputs(ctx context.Context, t model.Target, ng model.Nodegroup, pause *state.Lock, now time.Time) (model.Inputs, error) {
	cp, err := r.Client.ControlPlaneVersion(ctx, ng.Cluster)
	if err != nil {
		return model.Inputs{}, err
	}
	in := model.Inputs{Pause: pause, Nodegroup: &model.NodegroupInputs{Nodegroup: ng, ControlPlane: cp}}
	if ng.AMIType == string(ekstypes.AMITypesCustom) {
		found, missing, invalid, err := r.Resolver.Resolve(ctx, []string{t.Parameter})
		switch {
		case err != nil:
			return model.Inputs{}, err
		case len(missing) > 0:
			in.SourceProblem = "source missing: parameter " + t.Parameter + " does not exist"
		case invalid[t.Parameter] != nil:
			in.SourceProblem = "source missing: " + invalid[t.Parameter].Error()
		default:
			ami := found[t.Parameter]
			in.AMI = &ami
		}
		if ng.LaunchTemplate != nil {
			cur, err := r.Templates.Resolve(ctx, *ng.LaunchTemplate)
			if err != nil {
				return model.Inputs{}, err
			}
			in.Nodegroup.CurrentImage = cur.ImageID
		}
	} else {
		in.Nodegroup.TargetVersion = followedVersion(ng.Version, cp)
		rel, err := r.Client.ResolveRelease(ctx, ng.AMIType, in.Nodegroup.TargetVersion)
		if err != nil {
			return model.Inputs{}, err
		}
		if rel == nil || rel.Release == "" {
			param, _, _ := eks.ReleaseParameters(ng.AMIType, in.Nodegroup.TargetVersion)
			in.SourceProblem = "source missing: release parameter " + param + " does not exist"
		}
		in.Nodegroup.Release = rel
	}
	if len(ng.AutoScalingGroups) > 0 {
		out, err := r.AutoScaling.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: ng.AutoScalingGroups[:1]})
		if err != nil {
			return model.Inputs{}, fmt.Errorf("describing the Auto Scaling group of managed node group %s: %w", t.Group, err)
		}
		if len(out.AutoScalingGroups) == 1 {
			g := out.AutoScalingGroups[0]
			var ids []string
			for _, i := range g.Instances {
				ids = append(ids, aws.ToString(i.InstanceId))
			}
			images, launched, err := ImageIDs(ctx, r.EC2, ids)
			if err != nil {
				return model.Inputs{}, err
			}
			in.View = BuildView(g, images, launched, nil, now)
			if in.Nodegroup.CurrentImage == "" {
				in.Nodegroup.CurrentImage = mostCommonImage(in.View)
			}
		}
	}
	return in, nil
}

// followedVersion is the Kubernetes version whose releases a managed node group on version follows: the control
// plane's when it is a newer minor version (the node group then moves to it with its next release; EKS allows a
// node group up to the control plane's version, Amazon EKS API Reference, UpdateNodegroupVersion), else its own.
func followedVersion(version, controlPlane string) string {
	nv, err := eks.ParseVersion(version)
	if err != nil {
		return version
	}
	if cv, err := eks.ParseVersion(controlPlane); err == nil && cv > nv {
		return controlPlane
	}
	return version
}

// mostCommonImage is the AMI most instances of the view run ("" without instances).
func mostCommonImage(v model.GroupView) string {
	count, best := map[string]int{}, ""
	for _, i := range v.Instances {
		count[i.ImageID]++
		if i.ImageID != "" && (best == "" || count[i.ImageID] > count[best] || count[i.ImageID] == count[best] && i.ImageID < best) {
			best = i.ImageID
		}
	}
	return best
}
