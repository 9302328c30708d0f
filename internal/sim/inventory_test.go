package sim

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

func TestGroupOnLaunchConfigurationNamesItAndLaunchesItsAMI(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	require.NoError(t, a.CreateLaunchConfiguration("legacy-lc", "ami-0aaaaaaaaaaaaaaa1", "t3.large"))
	require.NoError(t, a.CreateGroupOnLaunchConfiguration(GroupSpec{Name: "legacy", Min: 2, Max: 2, Desired: 2}, "legacy-lc"))

	out, err := a.ReadOnlyAutoScaling().DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{"legacy"}})
	require.NoError(t, err)
	g := out.AutoScalingGroups[0]
	require.Nil(t, g.LaunchTemplate)
	require.Equal(t, "legacy-lc", aws.ToString(g.LaunchConfigurationName))
	require.Len(t, g.Instances, 2)
	for _, i := range g.Instances {
		require.Nil(t, i.LaunchTemplate)
		require.Equal(t, "legacy-lc", aws.ToString(i.LaunchConfigurationName))
	}
	for _, i := range a.Group("legacy").Instances {
		require.Equal(t, "ami-0aaaaaaaaaaaaaaa1", i.ImageID)
	}

	lcs, err := a.ReadOnlyAutoScaling().DescribeLaunchConfigurations(ctx, &autoscaling.DescribeLaunchConfigurationsInput{LaunchConfigurationNames: []string{"legacy-lc", "gone"}})
	require.NoError(t, err)
	require.Len(t, lcs.LaunchConfigurations, 1, "names that do not exist are left out")
	require.Equal(t, "ami-0aaaaaaaaaaaaaaa1", aws.ToString(lcs.LaunchConfigurations[0].ImageId))
	require.Equal(t, "t3.large", aws.ToString(lcs.LaunchConfigurations[0].InstanceType))
}

func TestDescribeLaunchConfigurationsPages(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	for _, n := range []string{"c", "a", "b"} {
		require.NoError(t, a.CreateLaunchConfiguration(n, "ami-0aaaaaaaaaaaaaaa1", "t3.large"))
	}
	require.Error(t, a.CreateLaunchConfiguration("a", "ami-0aaaaaaaaaaaaaaa1", "t3.large"), "AlreadyExists")
	var names []string
	p := autoscaling.NewDescribeLaunchConfigurationsPaginator(a.ReadOnlyAutoScaling(), &autoscaling.DescribeLaunchConfigurationsInput{MaxRecords: aws.Int32(2)})
	pages := 0
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		require.NoError(t, err)
		pages++
		for _, lc := range out.LaunchConfigurations {
			names = append(names, aws.ToString(lc.LaunchConfigurationName))
		}
	}
	require.Equal(t, []string{"a", "b", "c"}, names)
	require.Equal(t, 2, pages)
}

func TestResolveSSMImageIDIsResolvedAtEachLaunch(t *testing.T) {
	a := newAccount(t)
	param := "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
	a.PutParameter(param, "ami-0aaaaaaaaaaaaaaa1")
	lt := a.CreateLaunchTemplate("ssm-lt", "resolve:ssm:"+param, "m6i.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "ssm", Min: 1, Max: 3, Desired: 1, LaunchTemplateID: lt}))
	require.Equal(t, "ami-0aaaaaaaaaaaaaaa1", a.Group("ssm").Instances[0].ImageID)

	a.PutParameter(param, "ami-0bbbbbbbbbbbbbbb2")
	require.NoError(t, a.SetDesiredCapacity("ssm", 2))
	a.Advance(2 * time.Minute)
	g := a.Group("ssm")
	require.Equal(t, "ami-0aaaaaaaaaaaaaaa1", g.Instances[0].ImageID, "a running instance keeps its AMI")
	require.Equal(t, "ami-0bbbbbbbbbbbbbbb2", g.Instances[1].ImageID, "a new launch resolves the parameter again")

	v, _ := a.LaunchTemplate(lt)
	require.Equal(t, "resolve:ssm:"+param, v.ImageIDs[1], "the template keeps the reference")
}

func TestDescribeImagesReportsCreationDatesAndHidesDeprecatedOnes(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	created := time.Date(2023, 1, 2, 3, 4, 5, 0, time.UTC)
	a.RegisterImage(ImageSpec{ID: "ami-0aaaaaaaaaaaaaaa1", Name: "old", Created: created, Deprecated: start.Add(-time.Hour)})
	a.RegisterImage(ImageSpec{ID: "ami-0bbbbbbbbbbbbbbb2", Name: "new", Architecture: "arm64", Created: start.Add(-24 * time.Hour)})
	api := a.ReadOnlyEC2()

	out, err := api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-0aaaaaaaaaaaaaaa1"}})
	require.NoError(t, err)
	require.Equal(t, "2023-01-02T03:04:05.000Z", aws.ToString(out.Images[0].CreationDate))
	require.NotNil(t, out.Images[0].DeprecationTime, "named ids include deprecated AMIs")

	_, err = api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-0ccccccccccccccc3"}})
	require.ErrorContains(t, err, "InvalidAMIID.NotFound")

	filter := []ec2types.Filter{{Name: aws.String("image-id"), Values: []string{"ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2", "ami-0ccccccccccccccc3"}}}
	out, err = api.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: filter})
	require.NoError(t, err)
	require.Len(t, out.Images, 1, "a filter leaves deprecated AMIs out, and unknown ids are no error")
	require.Equal(t, ec2types.ArchitectureValuesArm64, out.Images[0].Architecture)

	out, err = api.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: filter, IncludeDeprecated: aws.Bool(true)})
	require.NoError(t, err)
	require.Len(t, out.Images, 2)
}

// TestC20DescribeImagesReportsStateOwnerAndPlatform: what the AMI gate reads (field case C20), as EC2's Image
// carries it: State (and SetImageState), OwnerId and ImageOwnerAlias (Amazon's by default), Platform and
// PlatformDetails; the state and owner filters follow them.
func TestC20DescribeImagesReportsStateOwnerAndPlatform(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	a.RegisterImage(ImageSpec{ID: "ami-0aaaaaaaaaaaaaaa1", Name: "al2023-ami-ecs-hvm"})
	a.RegisterImage(ImageSpec{ID: "ami-0bbbbbbbbbbbbbbb2", Name: "Windows_Server-2022", OwnerID: "999988887777",
		Platform: ec2types.PlatformValuesWindows, State: ec2types.ImageStatePending})
	api := a.EC2()

	out, err := api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{"ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2"}})
	require.NoError(t, err)
	amazon, foreign := out.Images[0], out.Images[1]
	require.Equal(t, ec2types.ImageStateAvailable, amazon.State)
	require.Equal(t, "amazon", aws.ToString(amazon.ImageOwnerAlias))
	require.Equal(t, "Linux/UNIX", aws.ToString(amazon.PlatformDetails))
	require.Empty(t, amazon.Platform)
	require.Equal(t, ec2types.ImageStatePending, foreign.State)
	require.Equal(t, "999988887777", aws.ToString(foreign.OwnerId))
	require.Nil(t, foreign.ImageOwnerAlias, "only Amazon's, Marketplace and Backup AMIs carry an alias")
	require.Equal(t, ec2types.PlatformValuesWindows, foreign.Platform)
	require.Equal(t, "Windows", aws.ToString(foreign.PlatformDetails))

	a.SetImageState("ami-0bbbbbbbbbbbbbbb2", ec2types.ImageStateDeregistered)
	out, err = api.DescribeImages(ctx, &ec2.DescribeImagesInput{Filters: []ec2types.Filter{
		{Name: aws.String("state"), Values: []string{"deregistered"}}, {Name: aws.String("owner-id"), Values: []string{"999988887777"}}}})
	require.NoError(t, err)
	require.Len(t, out.Images, 1)
	require.Equal(t, "ami-0bbbbbbbbbbbbbbb2", aws.ToString(out.Images[0].ImageId))
}

func TestGetParameterHistoryPagesOldestFirst(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	for i, v := range []string{"ami-0aaaaaaaaaaaaaaa1", "ami-0bbbbbbbbbbbbbbb2", "ami-0ccccccccccccccc3"} {
		a.PutParameterAt("/p", v, start.AddDate(0, -3+i, 0))
	}
	var values []string
	var versions []int64
	p := ssm.NewGetParameterHistoryPaginator(a.ReadOnlySSM(), &ssm.GetParameterHistoryInput{Name: aws.String("/p"), MaxResults: aws.Int32(2)})
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		require.NoError(t, err)
		for _, h := range out.Parameters {
			values, versions = append(values, aws.ToString(h.Value)), append(versions, h.Version)
		}
	}
	require.Equal(t, []int64{1, 2, 3}, versions)
	require.Equal(t, "ami-0ccccccccccccccc3", values[2])

	_, err := a.ReadOnlySSM().GetParameterHistory(ctx, &ssm.GetParameterHistoryInput{Name: aws.String("/missing")})
	require.True(t, awsapi.IsParameterNotFound(err), err)
}

func TestCapacityProvidersNameTheirGroupPerCluster(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	lt := a.CreateLaunchTemplate("lt", "ami-0aaaaaaaaaaaaaaa1", "m6i.large")
	require.NoError(t, a.CreateGroup(GroupSpec{Name: "orders", Min: 1, Max: 2, Desired: 1, LaunchTemplateID: lt, ECSCluster: "prod",
		CapacityProvider: &CapacityProviderSpec{Name: "orders-cp"}}))
	a.CreateECSCluster("empty")
	api := a.ReadOnlyECS()

	clusters, err := api.ListClusters(ctx, &ecs.ListClustersInput{})
	require.NoError(t, err)
	require.Equal(t, []string{"arn:aws:ecs:us-east-1:111122223333:cluster/empty", "arn:aws:ecs:us-east-1:111122223333:cluster/prod"}, clusters.ClusterArns)

	out, err := api.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{Cluster: aws.String(clusters.ClusterArns[1])})
	require.NoError(t, err)
	require.Len(t, out.CapacityProviders, 1)
	require.Equal(t, "orders-cp", aws.ToString(out.CapacityProviders[0].Name))
	require.Contains(t, aws.ToString(out.CapacityProviders[0].AutoScalingGroupProvider.AutoScalingGroupArn), ":autoScalingGroupName/orders")

	out, err = api.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{Cluster: aws.String("empty")})
	require.NoError(t, err)
	require.Empty(t, out.CapacityProviders)

	out, err = api.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{})
	require.NoError(t, err)
	require.Len(t, out.CapacityProviders, 3, "the group's and the two Fargate capacity providers")
	require.Nil(t, out.CapacityProviders[2].AutoScalingGroupProvider)

	out, err = api.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{CapacityProviders: []string{"nope"}})
	require.NoError(t, err)
	require.Equal(t, "MISSING", aws.ToString(out.Failures[0].Reason))

	_, err = api.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{Cluster: aws.String("nope")})
	require.ErrorContains(t, err, "ClusterNotFoundException")
}

func TestManagedNodegroupRunsOnAGroupEKSOwns(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	a.CreateEKSCluster("platform", "1.31")
	name, err := a.CreateEKSNodegroup(EKSNodegroupSpec{Cluster: "platform", Name: "web", AMIType: "AL2023_ARM_64_STANDARD",
		ReleaseVersion: "1.31.7-20250610", ImageID: "ami-0aaaaaaaaaaaaaaa1", InstanceType: "m7g.large", Min: 2, Max: 4, Desired: 2})
	require.NoError(t, err)
	require.Regexp(t, `^eks-web-[0-9a-f-]{36}$`, name)
	_, err = a.CreateEKSNodegroup(EKSNodegroupSpec{Cluster: "nope", Name: "web"})
	require.Error(t, err)
	api := a.ReadOnlyEKS()

	clusters, err := api.ListClusters(ctx, &awseks.ListClustersInput{})
	require.NoError(t, err)
	require.Equal(t, []string{"platform"}, clusters.Clusters)
	ngs, err := api.ListNodegroups(ctx, &awseks.ListNodegroupsInput{ClusterName: aws.String("platform")})
	require.NoError(t, err)
	require.Equal(t, []string{"web"}, ngs.Nodegroups)
	ng, err := api.DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String("platform"), NodegroupName: aws.String("web")})
	require.NoError(t, err)
	require.Equal(t, name, aws.ToString(ng.Nodegroup.Resources.AutoScalingGroups[0].Name))
	require.Equal(t, "1.31", aws.ToString(ng.Nodegroup.Version))
	require.EqualValues(t, "AL2023_ARM_64_STANDARD", ng.Nodegroup.AmiType)

	g := a.Group(name)
	require.Len(t, g.Instances, 2)
	out, err := a.ReadOnlyAutoScaling().DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{name}})
	require.NoError(t, err)
	tags := map[string]string{}
	for _, tg := range out.AutoScalingGroups[0].Tags {
		tags[aws.ToString(tg.Key)] = aws.ToString(tg.Value)
	}
	require.Equal(t, "platform", tags["eks:cluster-name"])
	require.Equal(t, "web", tags["eks:nodegroup-name"])
	require.Equal(t, "owned", tags["kubernetes.io/cluster/platform"])
}
