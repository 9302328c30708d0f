package providers_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/stretchr/testify/require"
)

// TestC20OSFamilyFromWhatDescribeImagesReturns: the family comes from Platform / PlatformDetails, then Name,
// then Description, with the names of the ECS- and EKS-optimized AMIs (field case C20).
func TestC20OSFamilyFromWhatDescribeImagesReturns(t *testing.T) {
	linux := "Linux/UNIX"
	for _, c := range []struct {
		name, imageName, description, details string
		platform                              ec2types.PlatformValues
		want                                  string
	}{
		{"ECS AL2", "amzn2-ami-ecs-hvm-2.0.20241115-x86_64-ebs", "Amazon Linux AMI 2.0.20241115 x86_64 ECS HVM GP2", linux, "", providers.OSFamilyAL2},
		{"ECS AL2 kernel 5.10", "amzn2-ami-ecs-kernel-5.10-hvm-2.0.20241115-arm64-ebs", "", linux, "", providers.OSFamilyAL2},
		{"ECS AL2023", "al2023-ami-ecs-hvm-2023.0.20241115-kernel-6.1-x86_64", "Amazon Linux AMI 2023.0.20241115 x86_64 ECS HVM EBS", linux, "", providers.OSFamilyAL2023},
		{"EKS AL2", "amazon-eks-node-1.31-v20241115", "EKS Kubernetes Worker AMI with AmazonLinux2 image", linux, "", providers.OSFamilyAL2},
		{"EKS AL2 GPU", "amazon-eks-gpu-node-1.31-v20241115", "", linux, "", providers.OSFamilyAL2},
		{"EKS AL2 arm64", "amazon-eks-arm64-node-1.31-v20241115", "", linux, "", providers.OSFamilyAL2},
		{"EKS AL2023", "amazon-eks-node-al2023-x86_64-standard-1.31-v20241115", "EKS-optimized Kubernetes node based on Amazon Linux 2023", linux, "", providers.OSFamilyAL2023},
		{"Bottlerocket EKS", "bottlerocket-aws-k8s-1.31-x86_64-v1.26.2-360b7a38", "bottlerocket-aws-k8s-1.31-x86_64-v1.26.2-360b7a38", linux, "", providers.OSFamilyBottlerocket},
		{"Bottlerocket ECS", "bottlerocket-aws-ecs-2-aarch64-v1.26.2-360b7a38", "", linux, "", providers.OSFamilyBottlerocket},
		{"Windows by Platform", "Windows_Server-2022-English-Full-ECS_Optimized-2024.11.13", "", "Windows", ec2types.PlatformValuesWindows, providers.OSFamilyWindows},
		{"Windows by PlatformDetails", "my-image", "", "Windows BYOL", "", providers.OSFamilyWindows},
		{"golden AMI named after its base", "golden-web", "Golden AMI built on al2023-ami-ecs-hvm-2023.0.20241115", linux, "", providers.OSFamilyAL2023},
		{"AL2 golden AMI whose name also says Bottlerocket", "acme-al2-ecs-bottlerocket-compat-2026.11", "", linux, "", "unclear (name says bottlerocket, al2)"},
		{"description naming two families, name none", "golden-web", "AL2023 successor to amazon linux 2", linux, "", "unclear (description says al2023, al2)"},
		{"the name decides before the description", "al2023-ami-ecs-hvm-2023.0.20241115-kernel-6.1-x86_64", "migrated from bottlerocket", linux, "", providers.OSFamilyAL2023},
		{"Ubuntu", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-20241115", "Canonical, Ubuntu, 22.04 LTS", linux, "", "other (Linux/UNIX)"},
		{"RHEL", "RHEL-9.4.0_HVM-20241115-x86_64", "Provided by Red Hat, Inc.", "Red Hat Enterprise Linux", "", "other (Red Hat Enterprise Linux)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			img := ec2types.Image{Name: aws.String(c.imageName), PlatformDetails: aws.String(c.details), Platform: c.platform}
			if c.description != "" {
				img.Description = aws.String(c.description)
			}
			require.Equal(t, c.want, providers.DescribeOSFamily(img))
		})
	}
}

func TestC20AMIOwnersAreAccountIDsOrAliases(t *testing.T) {
	owners, err := model.ParseAMIOwners("111122223333, amazon aws-marketplace,self")
	require.NoError(t, err)
	require.Equal(t, []string{"111122223333", "amazon", "aws-marketplace", "self"}, owners)
	_, err = model.ParseAMIOwners("1111,amazn")
	require.ErrorContains(t, err, `"1111", "amazn": want 12-digit AWS account ids or amazon, aws-marketplace, aws-backup-vault, self`)
	_, err = model.ParsePolicyTags(map[string]string{model.TagAllowAMIFamilyChange: "yes"})
	require.ErrorContains(t, err, "patch-agent/allow-ami-family-change")
}

func TestC20AccountIDComesFromTheQueueURL(t *testing.T) {
	require.Equal(t, "111122223333", providers.AccountFromQueueURL("https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent"))
	require.Equal(t, "000000000000", providers.AccountFromQueueURL("http://localhost:4566/000000000000/q"))
	require.Equal(t, "", providers.AccountFromQueueURL("patch-agent"))
}
