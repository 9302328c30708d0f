package runcmd

import (
	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/eksdrain"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// newEKS builds what EKS groups need: the EKS platform (a Kubernetes client per cluster, endpoint and
// certificate authority from DescribeCluster, a presigned-STS bearer token from the agent's credentials) and
// the resolver of their AMI sources (`auto`, and no node AMI newer than the control plane). Nothing is
// called before a group with patch-agent/platform=eks is discovered. The agent's role needs eks:DescribeCluster,
// ec2:DescribeInstanceTypes and an EKS access entry (docs/eks-access.md).
func newEKS(awsCfg aws.Config, ec2API interface {
	awsapi.EC2
	awsapi.EC2InstanceTypes
}, clk clock.PassiveClock) (model.Platforms, []providers.SourceResolver) {
	clusters := &eks.Clusters{API: awseks.NewFromConfig(awsCfg), Clock: clk}
	kube := &eks.ClientProvider{Clusters: clusters, Tokens: &eks.TokenSource{Credentials: awsCfg.Credentials, Region: awsCfg.Region, Clock: clk}}
	platform := providers.NewEKSPlatform(kube, eksdrain.Options{Clock: clk})
	sources := &providers.EKSSources{Clusters: clusters, Architectures: &eks.Architectures{API: ec2API}, EC2: ec2API}
	return model.Platforms{model.PlatformEKS: platform}, []providers.SourceResolver{sources}
}
