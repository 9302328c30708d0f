package providers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
)

// maxGroupsPerPage is the DescribeAutoScalingGroups page size limit (Amazon EC2 Auto Scaling API Reference:
// DescribeAutoScalingGroups, MaxRecords "The maximum value is 100").
const maxGroupsPerPage = 100

// Discovered is the result of one discovery pass: the opted-in groups as described (for this tick's
// decisions), their targets, and the opted-in groups that are misconfigured.
type Discovered struct {
	Targets       map[string]model.Target
	Groups        map[string]astypes.AutoScalingGroup
	Misconfigured map[string]error
	// Drainable are opted-in groups that cannot be rolled (Misconfigured) but whose platform and cluster
	// are known: their lifecycle actions are still drained and completed — a tag typo must not let
	// scale-in terminate instances undrained.
	Drainable map[string]model.Target
}

// DrainTarget returns the target a lifecycle action of group should be drained as: a managed target, or
// a misconfigured one whose platform and cluster are known.
func (d Discovered) DrainTarget(group string) (model.Target, bool) {
	if t, ok := d.Targets[group]; ok {
		return t, true
	}
	t, ok := d.Drainable[group]
	return t, ok
}

// SourceResolver completes a target's AMI source at discovery: it turns ParameterAuto into a concrete
// parameter path and checks its platform's rules (EKS: never a node AMI newer than the control plane;
// EKSSources). An error makes the group misconfigured: skipped and logged, never polled or rolled.
type SourceResolver interface {
	ResolveSource(ctx context.Context, t *model.Target, g astypes.AutoScalingGroup) error
}

// Discover lists the opted-in Auto Scaling groups (filter tag-key=patch-agent/enabled, 100 per page, every
// page; OptedIn decides on the value, since tag filters compare values case-sensitively) and reads each one's
// target configuration from its tags, completing its AMI source with sources. One call per 100 groups. A group
// whose opt-in tag has a value OptedIn rejects is Misconfigured, never Drainable: it is not opted in.
func Discover(ctx context.Context, api awsapi.AutoScaling, sources ...SourceResolver) (Discovered, error) {
	d := Discovered{Targets: map[string]model.Target{}, Groups: map[string]astypes.AutoScalingGroup{}, Misconfigured: map[string]error{},
		Drainable: map[string]model.Target{}}
	in := &autoscaling.DescribeAutoScalingGroupsInput{
		Filters:    []astypes.Filter{{Name: aws.String("tag-key"), Values: []string{model.TagEnabled}}},
		MaxRecords: aws.Int32(maxGroupsPerPage),
	}
	p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, in)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return Discovered{}, fmt.Errorf("listing opted-in Auto Scaling groups: %w", err)
		}
		for _, g := range page.AutoScalingGroups {
			d.add(ctx, g, sources)
		}
	}
	return d, nil
}

// DiscoverNamed is Discover for the named groups only (a look at a few targets: a parameter change, a
// wake-up): it describes them by name (DescribeGroups, one call per hundred names, instead of every page of
// the account's opted-in groups) and decides each one from its tags as Discover does, so a group opted out,
// retagged or misconfigured since the last discovery is treated as such. Groups Auto Scaling does not know,
// or without the opt-in tag, are in none of the maps. Errors: Auto Scaling's, wrapped; nothing is returned then.
func DiscoverNamed(ctx context.Context, api awsapi.AutoScaling, names []string, sources ...SourceResolver) (Discovered, error) {
	d := Discovered{Targets: map[string]model.Target{}, Groups: map[string]astypes.AutoScalingGroup{}, Misconfigured: map[string]error{},
		Drainable: map[string]model.Target{}}
	groups, err := DescribeGroups(ctx, api, names)
	if err != nil {
		return Discovered{}, fmt.Errorf("describing opted-in Auto Scaling groups: %w", err)
	}
	for _, name := range names {
		if g, ok := groups[name]; ok {
			d.add(ctx, g, sources)
		}
	}
	return d, nil
}

// Merge returns d with the groups named replaced by what part (a DiscoverNamed of them) found: a named group
// part does not hold is dropped from every map. d is not changed (passes in progress read its maps).
func (d Discovered) Merge(names []string, part Discovered) Discovered {
	out := Discovered{Targets: maps.Clone(d.Targets), Groups: maps.Clone(d.Groups), Misconfigured: maps.Clone(d.Misconfigured),
		Drainable: maps.Clone(d.Drainable)}
	out.Targets, out.Groups, out.Misconfigured, out.Drainable = orEmpty(out.Targets), orEmpty(out.Groups), orEmpty(out.Misconfigured), orEmpty(out.Drainable)
	for _, n := range names {
		delete(out.Targets, n)
		delete(out.Groups, n)
		delete(out.Misconfigured, n)
		delete(out.Drainable, n)
	}
	maps.Copy(out.Targets, part.Targets)
	maps.Copy(out.Groups, part.Groups)
	maps.Copy(out.Misconfigured, part.Misconfigured)
	maps.Copy(out.Drainable, part.Drainable)
	return out
}

// add decides one described group from its tags: a target (with its description), misconfigured (and
// drainable when its platform and cluster are known), or not opted in (left out).
func (d *Discovered) add(ctx context.Context, g astypes.AutoScalingGroup, sources []SourceResolver) {
	name := aws.ToString(g.AutoScalingGroupName)
	t, err := model.TargetFromTags(name, GroupTags(g))
	if err == nil && t != nil {
		err = model.ManagedNodegroupGroup(name, GroupTags(g)) // nodegroups.go: EKS drains these itself
	}
	if err == nil && t != nil {
		err = resolveSource(ctx, t, g, sources)
	}
	if err != nil {
		d.Misconfigured[name] = err
		tags := GroupTags(g)
		if p, c := strings.ToLower(tags[model.TagPlatform]), tags[model.TagCluster]; (p == model.PlatformECS || p == model.PlatformEKS) && c != "" &&
			!errors.Is(err, model.ErrEnabledTagValue) && !errors.Is(err, model.ErrManagedNodegroupGroup) {
			d.Drainable[name] = model.Target{Group: name, Platform: p, Cluster: c, LifecycleHooks: model.ParseLifecycleHooksTag(tags)}
		}
		return
	}
	if t != nil {
		d.Targets[name] = *t
		d.Groups[name] = g
	}
}

// DescribeGroups describes the named groups with DescribeAutoScalingGroups, up to maxGroupsPerPage (100) names
// per call with MaxRecords 100 (by default a call takes at most 50 names; MaxRecords raises it), following
// NextToken: one call per hundred groups, whatever their instances. Groups Auto Scaling does not know (deleted
// since) are left out. Amazon EC2 Auto Scaling API Reference, DescribeAutoScalingGroups (AutoScalingGroupNames,
// MaxRecords, NextToken). Errors: Auto Scaling's, wrapped; nothing is returned then.
func DescribeGroups(ctx context.Context, api awsapi.AutoScaling, names []string) (map[string]astypes.AutoScalingGroup, error) {
	out := make(map[string]astypes.AutoScalingGroup, len(names))
	for chunk := range slices.Chunk(names, maxGroupsPerPage) {
		p := autoscaling.NewDescribeAutoScalingGroupsPaginator(api, &autoscaling.DescribeAutoScalingGroupsInput{
			AutoScalingGroupNames: chunk, MaxRecords: aws.Int32(maxGroupsPerPage)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("describing %d Auto Scaling groups: %w", len(chunk), err)
			}
			for _, g := range page.AutoScalingGroups {
				out[aws.ToString(g.AutoScalingGroupName)] = g
			}
		}
	}
	return out, nil
}

// resolveSource runs every source resolver on t; an `auto` source nobody resolved is an error.
func resolveSource(ctx context.Context, t *model.Target, g astypes.AutoScalingGroup, sources []SourceResolver) error {
	for _, s := range sources {
		if err := s.ResolveSource(ctx, t, g); err != nil {
			return fmt.Errorf("group %s is opted in but misconfigured: %w", t.Group, err)
		}
	}
	if t.Parameter == ParameterAuto {
		return fmt.Errorf("group %s is opted in but misconfigured: tag %s=%s is not resolved for platform %s by this agent",
			t.Group, model.TagParameter, ParameterAuto, t.Platform)
	}
	return nil
}

// Names returns the managed group names, sorted.
func (d Discovered) Names() []string {
	out := make([]string, 0, len(d.Targets))
	for n := range d.Targets {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// GroupTags returns the group's tags by key, as DescribeAutoScalingGroups listed them.
func GroupTags(g astypes.AutoScalingGroup) map[string]string {
	m := make(map[string]string, len(g.Tags))
	for _, t := range g.Tags {
		m[aws.ToString(t.Key)] = aws.ToString(t.Value)
	}
	return m
}

// ecsManagesProtection reports whether ECS manages the scale-in protection of g's instances: ECS managed
// scaling owns the group (its AmazonECSManaged tag) and new instances are protected from scale in, which
// managed termination protection requires (Amazon ECS Developer Guide, "Control the instances Amazon ECS
// terminates": ECS turns protection on for instances that run tasks and off once they run none).
func ECSManagesProtection(g astypes.AutoScalingGroup) bool {
	_, managed := GroupTags(g)[model.TagECSManaged]
	return aws.ToBool(g.NewInstancesProtectedFromScaleIn) && managed
}

// orEmpty returns m, or an empty map when m is nil.
func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}
