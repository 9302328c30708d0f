package awsapi

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/eks"
)

// EKSNodegroups is the Amazon EKS API of the managed node group rollouts (internal/providers/nodegroups.go):
// discovery of opted-in node groups (ListClusters, ListNodegroups 100 per page, DescribeNodegroup with its
// tags), the control plane's version (DescribeCluster), the one write UpdateNodegroupVersion (always sent with a
// ClientRequestToken recorded first, so a repeat is the same update) and its progress (DescribeUpdate).
type EKSNodegroups interface {
	ListClusters(ctx context.Context, in *eks.ListClustersInput, optFns ...func(*eks.Options)) (*eks.ListClustersOutput, error)
	ListNodegroups(ctx context.Context, in *eks.ListNodegroupsInput, optFns ...func(*eks.Options)) (*eks.ListNodegroupsOutput, error)
	DescribeNodegroup(ctx context.Context, in *eks.DescribeNodegroupInput, optFns ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error)
	DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, optFns ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
	UpdateNodegroupVersion(ctx context.Context, in *eks.UpdateNodegroupVersionInput, optFns ...func(*eks.Options)) (*eks.UpdateNodegroupVersionOutput, error)
	DescribeUpdate(ctx context.Context, in *eks.DescribeUpdateInput, optFns ...func(*eks.Options)) (*eks.DescribeUpdateOutput, error)
}

var _ EKSNodegroups = (*eks.Client)(nil)
