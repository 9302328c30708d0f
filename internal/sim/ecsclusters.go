package sim

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// The ECS calls that tell which cluster an Auto Scaling group serves: the account's clusters, and the capacity
// providers associated with each, which name their group's ARN (capacityprovider.go holds their behaviour).

// AWS-managed capacity providers every account has (Amazon ECS Developer Guide, "Amazon ECS clusters for
// Fargate": FARGATE and FARGATE_SPOT are reserved and always available). They have no Auto Scaling group.
var fargateCapacityProviders = []string{"FARGATE", "FARGATE_SPOT"}

// maxCapacityProvidersPerPage is DescribeCapacityProviders' maxResults limit and default page size (Amazon ECS
// API Reference, "DescribeCapacityProviders": "This value can be between 1 and 10").
const maxCapacityProvidersPerPage = 10

// ListClusters returns the ARNs of the account's clusters in name order, paged by MaxResults (1-100, default
// 100) and NextToken.
// Amazon ECS API Reference, "ListClusters". Errors: InvalidParameterException.
func (e *ECSClient) ListClusters(ctx context.Context, in *ecs.ListClustersInput, _ ...func(*ecs.Options)) (*ecs.ListClustersOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:ListClusters")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.ListClustersInput{}
	}
	limit := int32(100)
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > 100 {
			return nil, &ecstypes.InvalidParameterException{Message: ptr("maxResults must be between 1 and 100.")}
		}
		limit = *in.MaxResults
	}
	from := ""
	if in.NextToken != nil {
		name, ok := cutPrefix(*in.NextToken, "cl-")
		if !ok {
			return nil, &ecstypes.InvalidParameterException{Message: ptr("Invalid token " + *in.NextToken)}
		}
		from = name
	}
	out := &ecs.ListClustersOutput{ClusterArns: []string{}}
	for _, n := range s.clusterNames() {
		if n < from {
			continue
		}
		if int32(len(out.ClusterArns)) == limit {
			out.NextToken = ptr("cl-" + n)
			break
		}
		out.ClusterArns = append(out.ClusterArns, s.cluster(n).arn)
	}
	return out, nil
}

func (s *ecsService) capacityProviderARN(name string) string {
	return fmt.Sprintf("arn:aws:ecs:%s:%s:capacity-provider/%s", s.opts.Region, s.opts.AccountID, name)
}

// describeCapacityProvider describes the capacity provider of group g (nil g: an AWS-managed Fargate one).
func (s *ecsService) describeCapacityProvider(name string, g *group) ecstypes.CapacityProvider {
	out := ecstypes.CapacityProvider{
		CapacityProviderArn: ptr(s.capacityProviderARN(name)),
		Name:                ptr(name),
		Status:              ecstypes.CapacityProviderStatusActive,
	}
	if g == nil {
		out.CapacityProviderArn = ptr("arn:aws:ecs:" + s.opts.Region + ":aws:capacity-provider/" + name)
		out.Type = ecstypes.CapacityProviderType(name)
		return out
	}
	spec := g.capacityProvider.spec
	onOff := func(b bool) string {
		if b {
			return "ENABLED"
		}
		return "DISABLED"
	}
	out.Type = ecstypes.CapacityProviderTypeEc2Autoscaling
	out.AutoScalingGroupProvider = &ecstypes.AutoScalingGroupProvider{
		AutoScalingGroupArn: ptr(g.arn),
		ManagedScaling: &ecstypes.ManagedScaling{
			Status:                 ecstypes.ManagedScalingStatus(onOff(spec.ManagedScaling)),
			TargetCapacity:         ptr(int32(spec.TargetCapacity)),
			InstanceWarmupPeriod:   ptr(int32(spec.InstanceWarmupPeriod.Seconds())),
			MinimumScalingStepSize: ptr(int32(1)),
			MaximumScalingStepSize: ptr(int32(10000)),
		},
		ManagedTerminationProtection: ecstypes.ManagedTerminationProtection(onOff(spec.ManagedTerminationProtection)),
		ManagedDraining:              ecstypes.ManagedDraining(onOff(spec.ManagedDraining)),
	}
	return out
}

// DescribeCapacityProviders describes capacity providers: those named (short name or ARN, at most 100; names
// that do not exist come back as failures with reason MISSING), those associated with Cluster, or every one of
// the account (FARGATE and FARGATE_SPOT included), paged by MaxResults (1-10, default 10) and NextToken.
// Each Auto Scaling group capacity provider names its group's ARN in autoScalingGroupProvider.
// Amazon ECS API Reference, "DescribeCapacityProviders". Errors: ClusterNotFoundException,
// InvalidParameterException.
func (e *ECSClient) DescribeCapacityProviders(ctx context.Context, in *ecs.DescribeCapacityProvidersInput, _ ...func(*ecs.Options)) (*ecs.DescribeCapacityProvidersOutput, error) {
	s := e.s
	unlock, err := s.call(ctx, "ecs:DescribeCapacityProviders")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &ecs.DescribeCapacityProvidersInput{}
	}
	if len(in.CapacityProviders) > 100 {
		return nil, &ecstypes.InvalidParameterException{Message: ptr("capacityProviders can have at most 100 items.")}
	}
	limit := maxCapacityProvidersPerPage
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > maxCapacityProvidersPerPage {
			return nil, &ecstypes.InvalidParameterException{Message: ptr("maxResults must be between 1 and 10.")}
		}
		limit = int(*in.MaxResults)
	}
	// Every capacity provider of the account, in name order: the groups' ones, then Fargate's.
	type entry struct {
		name string
		g    *group
	}
	var all []entry
	for _, n := range s.autoScaling.groupNames() {
		if g := s.autoScaling.group(n); g.capacityProvider != nil {
			all = append(all, entry{g.capacityProvider.spec.Name, g})
		}
	}
	for _, n := range fargateCapacityProviders {
		all = append(all, entry{name: n})
	}
	out := &ecs.DescribeCapacityProvidersOutput{CapacityProviders: []ecstypes.CapacityProvider{}}
	var selected []entry
	switch {
	case len(in.CapacityProviders) > 0:
		for _, ref := range in.CapacityProviders {
			name := ref
			if i := strings.LastIndex(ref, ":capacity-provider/"); i >= 0 {
				name = ref[i+len(":capacity-provider/"):]
			}
			found := false
			for _, en := range all {
				if en.name == name {
					selected, found = append(selected, en), true
					break
				}
			}
			if !found {
				out.Failures = append(out.Failures, ecstypes.Failure{Arn: ptr(ref), Reason: ptr("MISSING")})
			}
		}
	case in.Cluster != nil:
		name := *in.Cluster
		if i := strings.LastIndex(name, ":cluster/"); i >= 0 {
			name = name[i+len(":cluster/"):]
		}
		if s.cluster(name) == nil {
			return nil, &ecstypes.ClusterNotFoundException{Message: ptr("Cluster not found.")}
		}
		for _, en := range all {
			if en.g != nil && en.g.cluster == name {
				selected = append(selected, en)
			}
		}
	default:
		selected = all
	}
	start := 0
	if in.NextToken != nil {
		n, err := parseToken(*in.NextToken, "cp")
		if err != nil || n < 0 || n > len(selected) {
			return nil, &ecstypes.InvalidParameterException{Message: ptr("Invalid token " + *in.NextToken)}
		}
		start = n
	}
	for i := start; i < len(selected); i++ {
		if len(out.CapacityProviders) == limit {
			out.NextToken = ptr(makeToken("cp", i))
			break
		}
		out.CapacityProviders = append(out.CapacityProviders, s.describeCapacityProvider(selected[i].name, selected[i].g))
	}
	return out, nil
}
