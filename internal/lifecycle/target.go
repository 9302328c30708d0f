package lifecycle

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
)

// Opt-in and configuration tags on an Auto Scaling group (the cluster-autoscaler convention: a tag opts a
// group in, further tags configure it). Nothing without TagEnabled=true is ever touched.
const (
	TagEnabled   = "patch-agent/enabled"       // "true" opts the group in
	TagPlatform  = "patch-agent/platform"      // "ecs" or "eks"
	TagCluster   = "patch-agent/cluster"       // ECS cluster name or EKS cluster name
	TagParameter = "patch-agent/ami-parameter" // SSM parameter that names the target AMI
)

// Platforms.
const (
	PlatformECS = "ecs"
	PlatformEKS = "eks"
)

// maxGroupsPerPage is the DescribeAutoScalingGroups page size limit (Amazon EC2 Auto Scaling API Reference:
// DescribeAutoScalingGroups, MaxRecords "The maximum value is 100").
const maxGroupsPerPage = 100

// Target is an Auto Scaling group the agent manages, with its configuration.
type Target struct {
	Group     string       `json:"group"`
	Platform  string       `json:"platform"`
	Cluster   string       `json:"cluster"`
	Parameter string       `json:"amiParameter"`
	Policy    TargetPolicy `json:"policy"`
	// LifecycleHooks are the hooks the group's TagLifecycleHooks names as the agent's; nil without the tag
	// (HookOwned).
	LifecycleHooks []string `json:"lifecycleHooks,omitempty"`
}

// ErrEnabledTagValue is wrapped by the error of a group whose tag patch-agent/enabled is present with a value
// that is neither true nor false (in any letter case): "yes", "1", " true ", "". The group is not managed.
var ErrEnabledTagValue = errors.New("tag " + TagEnabled + " is neither true nor false")

// OptedIn decides whether a group's tags opt it in to patch-agent; discovery (Discover), tag parsing
// (TargetFromTags), the fleet audit and the EKS upgrade preflight all ask it and nothing else.
//
// The value of TagEnabled is compared whole and without regard to letter case, with no trimming:
//   - "true", "True", "TRUE" ...: opted in (true, nil);
//   - tag absent, or "false" in any case: not opted in (false, nil), an explicit opt-out;
//   - anything else ("yes", "1", " true ", ""): not opted in, and an error wrapping ErrEnabledTagValue that
//     quotes the value, so that a group someone meant to opt in is reported rather than silently skipped.
//
// Why exactly this: the task role's IAM conditions on mutating calls are StringEqualsIgnoreCase
// aws:ResourceTag/patch-agent/enabled "true" (cloudformation/patch-agent.yaml; IAM User Guide, "IAM JSON
// policy elements: Condition operators", string condition operators, which compare the whole value). A group
// the agent accepted but IAM refused (" true ") would be drained and then fail to terminate or to complete
// its lifecycle action. Tag filters of DescribeAutoScalingGroups compare values case-sensitively (Amazon EC2
// Auto Scaling API Reference, "Filter"), so Discover filters on the key only and decides here.
func OptedIn(tags map[string]string) (bool, error) {
	v, ok := tags[TagEnabled]
	switch {
	case !ok || strings.EqualFold(v, "false"):
		return false, nil
	case strings.EqualFold(v, "true"):
		return true, nil
	}
	return false, fmt.Errorf("%w: %s=%q (true or false in any letter case, without spaces, as the task role's IAM conditions compare it)",
		ErrEnabledTagValue, TagEnabled, v)
}

// TargetFromTags builds a Target from a group's tags. It returns (nil, nil) when the group is not opted in
// (OptedIn), an error wrapping ErrEnabledTagValue when its opt-in tag has a value OptedIn does not accept, and
// an error naming every missing or invalid tag when it is opted in but misconfigured.
func TargetFromTags(group string, tags map[string]string) (*Target, error) {
	on, err := OptedIn(tags)
	if err != nil {
		return nil, fmt.Errorf("group %s is not managed: %w", group, err)
	}
	if !on {
		return nil, nil
	}
	t := &Target{Group: group, Platform: strings.ToLower(tags[TagPlatform]), Cluster: tags[TagCluster], Parameter: tags[TagParameter],
		LifecycleHooks: ParseLifecycleHooksTag(tags)}
	var problems []string
	switch t.Platform {
	case PlatformECS, PlatformEKS:
	case "":
		problems = append(problems, fmt.Sprintf("tag %s is missing (ecs or eks)", TagPlatform))
	default:
		problems = append(problems, fmt.Sprintf("tag %s=%q is not ecs or eks", TagPlatform, t.Platform))
	}
	if t.Cluster == "" {
		problems = append(problems, fmt.Sprintf("tag %s is missing (the cluster the group's instances join)", TagCluster))
	}
	if t.Parameter == "" {
		problems = append(problems, fmt.Sprintf("tag %s is missing (the SSM parameter naming the AMI, e.g. /aws/service/ecs/optimized-ami/amazon-linux-2023/recommended)", TagParameter))
	}
	policy, err := ParsePolicyTags(tags)
	if err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	t.Policy = policy
	if len(problems) > 0 {
		return nil, fmt.Errorf("group %s is opted in but misconfigured: %s", group, strings.Join(problems, "; "))
	}
	return t, nil
}

// Discovered is the result of one discovery pass: the opted-in groups as described (for this tick's
// decisions), their targets, and the opted-in groups that are misconfigured.
type Discovered struct {
	Targets       map[string]Target
	Groups        map[string]astypes.AutoScalingGroup
	Misconfigured map[string]error
	// Drainable are opted-in groups that cannot be rolled (Misconfigured) but whose platform and cluster
	// are known: their lifecycle actions are still drained and completed — a tag typo must not let
	// scale-in terminate instances undrained.
	Drainable map[string]Target
}

// DrainTarget returns the target a lifecycle action of group should be drained as: a managed target, or
// a misconfigured one whose platform and cluster are known.
func (d Discovered) DrainTarget(group string) (Target, bool) {
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
	ResolveSource(ctx context.Context, t *Target, g astypes.AutoScalingGroup) error
}

// Discover lists the opted-in Auto Scaling groups (filter tag-key=patch-agent/enabled, 100 per page, every
// page; OptedIn decides on the value, since tag filters compare values case-sensitively) and reads each one's
// target configuration from its tags, completing its AMI source with sources. One call per 100 groups. A group
// whose opt-in tag has a value OptedIn rejects is Misconfigured, never Drainable: it is not opted in.
func Discover(ctx context.Context, api awsapi.AutoScaling, sources ...SourceResolver) (Discovered, error) {
	d := Discovered{Targets: map[string]Target{}, Groups: map[string]astypes.AutoScalingGroup{}, Misconfigured: map[string]error{},
		Drainable: map[string]Target{}}
	in := &autoscaling.DescribeAutoScalingGroupsInput{
		Filters:    []astypes.Filter{{Name: aws.String("tag-key"), Values: []string{TagEnabled}}},
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
	d := Discovered{Targets: map[string]Target{}, Groups: map[string]astypes.AutoScalingGroup{}, Misconfigured: map[string]error{},
		Drainable: map[string]Target{}}
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

func orEmpty[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// add decides one described group from its tags: a target (with its description), misconfigured (and
// drainable when its platform and cluster are known), or not opted in (left out).
func (d *Discovered) add(ctx context.Context, g astypes.AutoScalingGroup, sources []SourceResolver) {
	name := aws.ToString(g.AutoScalingGroupName)
	t, err := TargetFromTags(name, groupTags(g))
	if err == nil && t != nil {
		err = managedNodegroupGroup(name, groupTags(g)) // nodegroups.go: EKS drains these itself
	}
	if err == nil && t != nil {
		err = resolveSource(ctx, t, g, sources)
	}
	if err != nil {
		d.Misconfigured[name] = err
		tags := groupTags(g)
		if p, c := strings.ToLower(tags[TagPlatform]), tags[TagCluster]; (p == PlatformECS || p == PlatformEKS) && c != "" &&
			!errors.Is(err, ErrEnabledTagValue) && !errors.Is(err, ErrManagedNodegroupGroup) {
			d.Drainable[name] = Target{Group: name, Platform: p, Cluster: c, LifecycleHooks: ParseLifecycleHooksTag(tags)}
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
func resolveSource(ctx context.Context, t *Target, g astypes.AutoScalingGroup, sources []SourceResolver) error {
	for _, s := range sources {
		if err := s.ResolveSource(ctx, t, g); err != nil {
			return fmt.Errorf("group %s is opted in but misconfigured: %w", t.Group, err)
		}
	}
	if t.Parameter == ParameterAuto {
		return fmt.Errorf("group %s is opted in but misconfigured: tag %s=%s is not resolved for platform %s by this agent",
			t.Group, TagParameter, ParameterAuto, t.Platform)
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

func groupTags(g astypes.AutoScalingGroup) map[string]string {
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
func ecsManagesProtection(g astypes.AutoScalingGroup) bool {
	_, managed := groupTags(g)[TagECSManaged]
	return aws.ToBool(g.NewInstancesProtectedFromScaleIn) && managed
}
