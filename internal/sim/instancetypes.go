package sim

import (
	"context"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// instanceTypeArchitectures are the processor architectures EC2 reports for the instance types the simulated
// account knows (Amazon EC2 API Reference, "DescribeInstanceTypes", ProcessorInfo.SupportedArchitectures;
// values from the EC2 instance type pages). The agent never keeps such a table: it asks EC2.
var instanceTypeArchitectures = map[string][]ec2types.ArchitectureType{
	"t2.micro":     {ec2types.ArchitectureTypeI386, ec2types.ArchitectureTypeX8664},
	"t3.medium":    {ec2types.ArchitectureTypeX8664},
	"t3.large":     {ec2types.ArchitectureTypeX8664},
	"m5.large":     {ec2types.ArchitectureTypeX8664},
	"m6i.large":    {ec2types.ArchitectureTypeX8664},
	"m7i.large":    {ec2types.ArchitectureTypeX8664},
	"c5.xlarge":    {ec2types.ArchitectureTypeX8664},
	"c6i.xlarge":   {ec2types.ArchitectureTypeX8664},
	"g5.xlarge":    {ec2types.ArchitectureTypeX8664},
	"inf2.xlarge":  {ec2types.ArchitectureTypeX8664},
	"trn1.2xlarge": {ec2types.ArchitectureTypeX8664},
	"a1.large":     {ec2types.ArchitectureTypeArm64},
	"t4g.medium":   {ec2types.ArchitectureTypeArm64},
	"m6g.large":    {ec2types.ArchitectureTypeArm64},
	"m7g.large":    {ec2types.ArchitectureTypeArm64},
	"c7g.large":    {ec2types.ArchitectureTypeArm64},
	"r7g.large":    {ec2types.ArchitectureTypeArm64},
	"m8g.large":    {ec2types.ArchitectureTypeArm64},
}

// EC2InstanceTypes returns the account's EC2 DescribeInstanceTypes API (the same client as EC2()).
func (a *Account) EC2InstanceTypes() awsapi.EC2InstanceTypes { return &EC2Client{s: a.ec2} }

var _ awsapi.EC2InstanceTypes = (*EC2Client)(nil)

// DescribeInstanceTypes describes the named instance types (every known one when none is named) with their
// ProcessorInfo.SupportedArchitectures, in one page.
// Amazon EC2 API Reference, "DescribeInstanceTypes". Errors: InvalidInstanceType for a type EC2 does not know.
func (c *EC2Client) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	unlock, err := c.s.call(ctx, "ec2:DescribeInstanceTypes")
	if err != nil {
		return nil, err
	}
	defer unlock()
	names := make([]string, 0, len(in.InstanceTypes))
	for _, t := range in.InstanceTypes {
		names = append(names, string(t))
	}
	if len(names) == 0 {
		names = sortedKeys(instanceTypeArchitectures)
	}
	var unknown []string
	out := &ec2.DescribeInstanceTypesOutput{}
	for _, n := range names {
		archs, ok := instanceTypeArchitectures[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		out.InstanceTypes = append(out.InstanceTypes, ec2types.InstanceTypeInfo{InstanceType: ec2types.InstanceType(n),
			ProcessorInfo: &ec2types.ProcessorInfo{SupportedArchitectures: append([]ec2types.ArchitectureType(nil), archs...)}})
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, apiError("InvalidInstanceType", "The following supplied instance types do not exist: [%s]", strings.Join(unknown, ", "))
	}
	return out, nil
}
