package model

import (
	"errors"
	"fmt"
	"strings"
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
