package sim

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/stretchr/testify/require"
)

func TestFargateProfilesAreListedInPagesAndDescribedWithTheirSelectors(t *testing.T) {
	a := newAccount(t)
	a.CreateEKSCluster("prod", "1.30")
	require.Error(t, a.AddEKSFargateProfile(EKSFargateProfileSpec{Cluster: "nope", Name: "x"}), "no such cluster")
	require.NoError(t, a.AddEKSFargateProfile(EKSFargateProfileSpec{Cluster: "prod", Name: "fp-b", Selectors: map[string]map[string]string{"apps": {"tier": "web"}}}))
	require.NoError(t, a.AddEKSFargateProfile(EKSFargateProfileSpec{Cluster: "prod", Name: "fp-a", Selectors: map[string]map[string]string{"kube-system": nil},
		Status: ekstypes.FargateProfileStatusDeleting}))
	ctx, api := context.Background(), a.EKSUpgrade()

	first, err := api.ListFargateProfiles(ctx, &awseks.ListFargateProfilesInput{ClusterName: aws.String("prod"), MaxResults: aws.Int32(1)})
	require.NoError(t, err)
	require.Equal(t, []string{"fp-a"}, first.FargateProfileNames)
	require.NotNil(t, first.NextToken)
	second, err := api.ListFargateProfiles(ctx, &awseks.ListFargateProfilesInput{ClusterName: aws.String("prod"), MaxResults: aws.Int32(1), NextToken: first.NextToken})
	require.NoError(t, err)
	require.Equal(t, []string{"fp-b"}, second.FargateProfileNames)
	require.Nil(t, second.NextToken)

	d, err := api.DescribeFargateProfile(ctx, &awseks.DescribeFargateProfileInput{ClusterName: aws.String("prod"), FargateProfileName: aws.String("fp-b")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.FargateProfileStatusActive, d.FargateProfile.Status, "ACTIVE by default")
	require.Equal(t, []ekstypes.FargateProfileSelector{{Namespace: aws.String("apps"), Labels: map[string]string{"tier": "web"}}}, d.FargateProfile.Selectors)
	d, err = api.DescribeFargateProfile(ctx, &awseks.DescribeFargateProfileInput{ClusterName: aws.String("prod"), FargateProfileName: aws.String("fp-a")})
	require.NoError(t, err)
	require.Equal(t, ekstypes.FargateProfileStatusDeleting, d.FargateProfile.Status)

	var nf *ekstypes.ResourceNotFoundException
	_, err = api.DescribeFargateProfile(ctx, &awseks.DescribeFargateProfileInput{ClusterName: aws.String("prod"), FargateProfileName: aws.String("fp-z")})
	require.True(t, errors.As(err, &nf), "%v", err)
	_, err = api.ListFargateProfiles(ctx, &awseks.ListFargateProfilesInput{ClusterName: aws.String("other")})
	require.True(t, errors.As(err, &nf), "%v", err)
	_, err = api.ListFargateProfiles(ctx, &awseks.ListFargateProfilesInput{ClusterName: aws.String("prod"), MaxResults: aws.Int32(101)})
	var bad *ekstypes.InvalidParameterException
	require.True(t, errors.As(err, &bad), "%v", err)
}
