package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/require"
)

// upgradeAccount returns an account with cluster "prod" on 1.30, add-on kube-proxy installed at its 1.30
// version, the 1.30 and 1.31 versions of kube-proxy and vpc-cni in the catalog, and managed node group "web".
func upgradeAccount(t *testing.T) *Account {
	t.Helper()
	a := newAccount(t)
	a.CreateEKSCluster("prod", "1.30")
	a.PublishEKSAddonVersion(EKSAddonVersion{Addon: "kube-proxy", Version: "v1.30.6-eksbuild.3", ClusterVersions: []string{"1.30"}, DefaultFor: []string{"1.30"}})
	a.PublishEKSAddonVersion(EKSAddonVersion{Addon: "kube-proxy", Version: "v1.31.2-eksbuild.3", ClusterVersions: []string{"1.31"}, DefaultFor: []string{"1.31"}})
	a.PublishEKSAddonVersion(EKSAddonVersion{Addon: "vpc-cni", Version: "v1.18.3-eksbuild.1", ClusterVersions: []string{"1.29", "1.30", "1.31"}, DefaultFor: []string{"1.30"}})
	a.PublishEKSAddonVersion(EKSAddonVersion{Addon: "vpc-cni", Version: "v1.19.0-eksbuild.1", ClusterVersions: []string{"1.30", "1.31"}, DefaultFor: []string{"1.31"}})
	require.NoError(t, a.InstallEKSAddon("prod", "kube-proxy", "v1.30.6-eksbuild.3"))
	_, err := a.CreateEKSNodegroup(EKSNodegroupSpec{Cluster: "prod", Name: "web", AMIType: "AL2023_x86_64_STANDARD",
		ReleaseVersion: "1.30.8-20240301", ImageID: "ami-0web130", InstanceType: "m6i.large", Min: 1, Max: 3, Desired: 2})
	require.NoError(t, err)
	return a
}

func clusterOf(t *testing.T, a *Account) *ekstypes.Cluster {
	t.Helper()
	out, err := a.EKS().DescribeCluster(context.Background(), &awseks.DescribeClusterInput{Name: aws.String("prod")})
	require.NoError(t, err)
	return out.Cluster
}

func describeUpdate(t *testing.T, a *Account, in *awseks.DescribeUpdateInput) *ekstypes.Update {
	t.Helper()
	out, err := a.EKSUpgrade().DescribeUpdate(context.Background(), in)
	require.NoError(t, err)
	return out.Update
}

func TestClusterVersionUpdateKeepsTheClusterUpdatingThenMovesTheVersion(t *testing.T) {
	a := upgradeAccount(t)
	out, err := a.EKSUpgrade().UpdateClusterVersion(context.Background(), &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.UpdateStatusInProgress, out.Update.Status)
	require.Equal(t, ekstypes.ClusterStatusUpdating, clusterOf(t, a).Status)
	require.Equal(t, "1.30", aws.ToString(clusterOf(t, a).Version))

	a.Advance(EKSControlPlaneUpdateDuration)
	u := describeUpdate(t, a, &awseks.DescribeUpdateInput{Name: aws.String("prod"), UpdateId: out.Update.Id})
	require.Equal(t, ekstypes.UpdateStatusSuccessful, u.Status)
	require.Equal(t, ekstypes.ClusterStatusActive, clusterOf(t, a).Status)
	require.Equal(t, "1.31", aws.ToString(clusterOf(t, a).Version))
}

func TestClusterVersionUpdateWithTheSameClientRequestTokenIsTheSameUpdate(t *testing.T) {
	a := upgradeAccount(t)
	in := &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31"), ClientRequestToken: aws.String("tok-1")}
	first, err := a.EKSUpgrade().UpdateClusterVersion(context.Background(), in)
	require.NoError(t, err)
	again, err := a.EKSUpgrade().UpdateClusterVersion(context.Background(), in)
	require.NoError(t, err, "a repeat with the token is not 'update in progress'")
	require.Equal(t, aws.ToString(first.Update.Id), aws.ToString(again.Update.Id))
	require.Len(t, a.EKSUpdates("prod"), 1)
}

func TestClusterVersionUpdateRefusesSkippingAMinorAndASecondUpdate(t *testing.T) {
	a := upgradeAccount(t)
	ctx := context.Background()
	_, err := a.EKSUpgrade().UpdateClusterVersion(ctx, &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.32")})
	var invalid *ekstypes.InvalidParameterException
	require.ErrorAs(t, err, &invalid)
	require.ErrorContains(t, err, "from 1.30 to 1.32")

	_, err = a.EKSUpgrade().UpdateClusterVersion(ctx, &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31")})
	require.NoError(t, err)
	_, err = a.EKSUpgrade().UpdateClusterVersion(ctx, &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31")})
	var inUse *ekstypes.ResourceInUseException
	require.ErrorAs(t, err, &inUse)

	_, err = a.EKSUpgrade().UpdateClusterVersion(ctx, &awseks.UpdateClusterVersionInput{Name: aws.String("nope"), Version: aws.String("1.31")})
	var notFound *ekstypes.ResourceNotFoundException
	require.ErrorAs(t, err, &notFound)
}

func TestClusterVersionUpdateIsBlockedByAnErrorInsightUnlessForced(t *testing.T) {
	a := upgradeAccount(t)
	a.AddEKSInsight("prod", EKSInsightSpec{Name: "Deprecated APIs removed in Kubernetes v1.31", KubernetesVersion: "1.31",
		Status: ekstypes.InsightStatusValueError})
	in := &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31")}
	_, err := a.EKSUpgrade().UpdateClusterVersion(context.Background(), in)
	var invalid *ekstypes.InvalidRequestException
	require.ErrorAs(t, err, &invalid)
	require.ErrorContains(t, err, "Deprecated APIs removed in Kubernetes v1.31")

	in.Force = true
	_, err = a.EKSUpgrade().UpdateClusterVersion(context.Background(), in)
	require.NoError(t, err)
}

func TestFailedClusterUpdateReportsItsErrorsAndKeepsTheVersion(t *testing.T) {
	a := upgradeAccount(t)
	a.FailNextEKSUpdate(EKSUpdateFailure{Cluster: "prod", Errors: []ekstypes.ErrorDetail{{ErrorCode: ekstypes.ErrorCodeClusterUnreachable,
		ErrorMessage: aws.String("control plane unreachable")}}})
	out, err := a.EKSUpgrade().UpdateClusterVersion(context.Background(), &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31")})
	require.NoError(t, err)
	require.Empty(t, out.Update.Errors, "errors show once the update failed")

	a.Advance(EKSControlPlaneUpdateDuration)
	u := describeUpdate(t, a, &awseks.DescribeUpdateInput{Name: aws.String("prod"), UpdateId: out.Update.Id})
	require.Equal(t, ekstypes.UpdateStatusFailed, u.Status)
	require.Equal(t, ekstypes.ErrorCodeClusterUnreachable, u.Errors[0].ErrorCode)
	require.Equal(t, "1.30", aws.ToString(clusterOf(t, a).Version))
	require.Equal(t, ekstypes.ClusterStatusActive, clusterOf(t, a).Status)
}

func TestListInsightsFiltersAndDescribeInsightNamesResources(t *testing.T) {
	a := upgradeAccount(t)
	id := a.AddEKSInsight("prod", EKSInsightSpec{Name: "Deprecated APIs removed in Kubernetes v1.31", KubernetesVersion: "1.31",
		Status: ekstypes.InsightStatusValueError, Recommendation: "Move to flowcontrol.apiserver.k8s.io/v1",
		Resources: []string{"/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas/catch-all"}})
	a.AddEKSInsight("prod", EKSInsightSpec{Name: "Kubelet version skew", KubernetesVersion: "1.31", Status: ekstypes.InsightStatusValuePassing})
	a.AddEKSInsight("prod", EKSInsightSpec{Name: "Amazon Linux 2 compatibility", Category: ekstypes.CategoryMisconfiguration, Status: ekstypes.InsightStatusValueWarning})
	ctx := context.Background()

	out, err := a.EKSUpgrade().ListInsights(ctx, &awseks.ListInsightsInput{ClusterName: aws.String("prod"),
		Filter: &ekstypes.InsightsFilter{Categories: []ekstypes.Category{ekstypes.CategoryUpgradeReadiness}}, MaxResults: aws.Int32(1)})
	require.NoError(t, err)
	require.Len(t, out.Insights, 1)
	require.NotNil(t, out.NextToken)
	next, err := a.EKSUpgrade().ListInsights(ctx, &awseks.ListInsightsInput{ClusterName: aws.String("prod"),
		Filter: &ekstypes.InsightsFilter{Categories: []ekstypes.Category{ekstypes.CategoryUpgradeReadiness}}, NextToken: out.NextToken})
	require.NoError(t, err)
	require.Len(t, next.Insights, 1)
	require.Nil(t, next.NextToken)

	desc, err := a.EKSUpgrade().DescribeInsight(ctx, &awseks.DescribeInsightInput{ClusterName: aws.String("prod"), Id: aws.String(id)})
	require.NoError(t, err)
	require.Equal(t, ekstypes.InsightStatusValueError, desc.Insight.InsightStatus.Status)
	require.Equal(t, "Move to flowcontrol.apiserver.k8s.io/v1", aws.ToString(desc.Insight.Recommendation))
	require.Len(t, desc.Insight.Resources, 1)

	a.SetEKSInsightStatus("prod", id, ekstypes.InsightStatusValuePassing, "no deprecated API calls in 30 days")
	errs, err := a.EKSUpgrade().ListInsights(ctx, &awseks.ListInsightsInput{ClusterName: aws.String("prod"),
		Filter: &ekstypes.InsightsFilter{Statuses: []ekstypes.InsightStatusValue{ekstypes.InsightStatusValueError}}})
	require.NoError(t, err)
	require.Empty(t, errs.Insights)
}

func TestDescribeAddonVersionsListsTheVersionsOfAKubernetesVersionWithItsDefault(t *testing.T) {
	a := upgradeAccount(t)
	out, err := a.EKSUpgrade().DescribeAddonVersions(context.Background(), &awseks.DescribeAddonVersionsInput{AddonName: aws.String("vpc-cni"),
		KubernetesVersion: aws.String("1.31")})
	require.NoError(t, err)
	require.Len(t, out.Addons, 1)
	var versions, defaults []string
	for _, v := range out.Addons[0].AddonVersions {
		versions = append(versions, aws.ToString(v.AddonVersion))
		for _, c := range v.Compatibilities {
			require.Equal(t, "1.31", aws.ToString(c.ClusterVersion))
			if c.DefaultVersion {
				defaults = append(defaults, aws.ToString(v.AddonVersion))
			}
		}
	}
	require.Equal(t, []string{"v1.19.0-eksbuild.1", "v1.18.3-eksbuild.1"}, versions, "newest first")
	require.Equal(t, []string{"v1.19.0-eksbuild.1"}, defaults)
}

func TestAddonUpdateNeedsAVersionOfTheControlPlaneAndIsUpdatingUntilDone(t *testing.T) {
	a := upgradeAccount(t)
	ctx := context.Background()
	in := &awseks.UpdateAddonInput{ClusterName: aws.String("prod"), AddonName: aws.String("kube-proxy"), AddonVersion: aws.String("v1.31.2-eksbuild.3"),
		ClientRequestToken: aws.String("tok-kp"), ResolveConflicts: ekstypes.ResolveConflictsPreserve}
	_, err := a.EKSUpgrade().UpdateAddon(ctx, in)
	var invalid *ekstypes.InvalidParameterException
	require.ErrorAs(t, err, &invalid, "kube-proxy 1.31 needs the 1.31 control plane")

	a.SetEKSClusterVersion("prod", "1.31")
	out, err := a.EKSUpgrade().UpdateAddon(ctx, in)
	require.NoError(t, err)
	require.Equal(t, ekstypes.UpdateTypeAddonUpdate, out.Update.Type)
	_, st, _ := a.EKSAddon("prod", "kube-proxy")
	require.Equal(t, ekstypes.AddonStatusUpdating, st)

	a.Advance(EKSAddonUpdateDuration)
	v, st, _ := a.EKSAddon("prod", "kube-proxy")
	require.Equal(t, ekstypes.AddonStatusActive, st)
	require.Equal(t, "v1.31.2-eksbuild.3", v)
	u := describeUpdate(t, a, &awseks.DescribeUpdateInput{Name: aws.String("prod"), AddonName: aws.String("kube-proxy"), UpdateId: out.Update.Id})
	require.Equal(t, ekstypes.UpdateStatusSuccessful, u.Status)
	_, err = a.EKSUpgrade().DescribeUpdate(ctx, &awseks.DescribeUpdateInput{Name: aws.String("prod"), UpdateId: out.Update.Id})
	var notFound *ekstypes.ResourceNotFoundException
	require.ErrorAs(t, err, &notFound, "an add-on's update is found only with its add-on name")
}

func TestNodegroupUpdateNeverGoesBeyondTheControlPlane(t *testing.T) {
	a := upgradeAccount(t)
	ctx := context.Background()
	in := &awseks.UpdateNodegroupVersionInput{ClusterName: aws.String("prod"), NodegroupName: aws.String("web"), Version: aws.String("1.31")}
	_, err := a.EKSUpgrade().UpdateNodegroupVersion(ctx, in)
	var invalid *ekstypes.InvalidParameterException
	require.ErrorAs(t, err, &invalid)

	a.SetEKSClusterVersion("prod", "1.31")
	out, err := a.EKSUpgrade().UpdateNodegroupVersion(ctx, in)
	require.NoError(t, err)
	ng, err := a.EKS().(*EKSClient).DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String("web")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.NodegroupStatusUpdating, ng.Nodegroup.Status)

	a.Advance(EKSNodegroupUpdateDuration)
	ng, err = a.EKS().(*EKSClient).DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String("prod"), NodegroupName: aws.String("web")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.NodegroupStatusActive, ng.Nodegroup.Status)
	require.Equal(t, "1.31", aws.ToString(ng.Nodegroup.Version))
	u := describeUpdate(t, a, &awseks.DescribeUpdateInput{Name: aws.String("prod"), NodegroupName: aws.String("web"), UpdateId: out.Update.Id})
	require.Equal(t, ekstypes.UpdateStatusSuccessful, u.Status)

	ids, err := a.EKSUpgrade().ListUpdates(ctx, &awseks.ListUpdatesInput{Name: aws.String("prod"), NodegroupName: aws.String("web")})
	require.NoError(t, err)
	require.Equal(t, []string{aws.ToString(out.Update.Id)}, ids.UpdateIds)
	clusterIDs, err := a.EKSUpgrade().ListUpdates(ctx, &awseks.ListUpdatesInput{Name: aws.String("prod")})
	require.NoError(t, err)
	require.Empty(t, clusterIDs.UpdateIds, "a node group's update is not the cluster's")
}

func TestNodegroupWithACustomAMITakesNoKubernetesVersion(t *testing.T) {
	a := upgradeAccount(t)
	_, err := a.CreateEKSNodegroup(EKSNodegroupSpec{Cluster: "prod", Name: "gpu", AMIType: "CUSTOM", ImageID: "ami-0gpu", InstanceType: "g5.xlarge",
		Min: 1, Max: 1, Desired: 1})
	require.NoError(t, err)
	_, err = a.EKSUpgrade().UpdateNodegroupVersion(context.Background(), &awseks.UpdateNodegroupVersionInput{ClusterName: aws.String("prod"),
		NodegroupName: aws.String("gpu"), Version: aws.String("1.30")})
	var invalid *ekstypes.InvalidParameterException
	require.True(t, errors.As(err, &invalid), "%v", err)
}

func TestEKSUpdatesAreListedOldestFirst(t *testing.T) {
	a := upgradeAccount(t)
	ctx := context.Background()
	_, err := a.EKSUpgrade().UpdateClusterVersion(ctx, &awseks.UpdateClusterVersionInput{Name: aws.String("prod"), Version: aws.String("1.31"), ClientRequestToken: aws.String("t1")})
	require.NoError(t, err)
	a.Advance(EKSControlPlaneUpdateDuration + time.Second)
	_, err = a.EKSUpgrade().UpdateNodegroupVersion(ctx, &awseks.UpdateNodegroupVersionInput{ClusterName: aws.String("prod"), NodegroupName: aws.String("web"), Version: aws.String("1.31")})
	require.NoError(t, err)
	ups := a.EKSUpdates("prod")
	require.Len(t, ups, 2)
	require.Equal(t, "", ups[0].Nodegroup)
	require.Equal(t, "t1", ups[0].Token)
	require.Equal(t, "1.31", ups[0].Params["Version"])
	require.Equal(t, "web", ups[1].Nodegroup)
	require.Equal(t, 1, a.Calls()["eks:UpdateNodegroupVersion"])
}
