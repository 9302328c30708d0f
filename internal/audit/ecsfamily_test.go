package audit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/eks"
)

// Each ECS group is compared with the public parameter of its own family and architecture, not with AL2023
// x86_64 whatever it runs.
func TestECSFamilyAndParameterOfEachVariant(t *testing.T) {
	for _, c := range []struct {
		amiName, arch string
		family        string
		parameter     string
	}{
		{"al2023-ami-ecs-hvm-2023.0.20261030-kernel-6.1-x86_64", eks.ArchX86_64, ECSFamilyAL2023, "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended"},
		{"al2023-ami-ecs-hvm-2023.0.20261030-kernel-6.1-arm64", eks.ArchARM64, ECSFamilyAL2023, "/aws/service/ecs/optimized-ami/amazon-linux-2023/arm64/recommended"},
		{"al2023-ami-ecs-gpu-hvm-2023.0.20261030-kernel-6.1-x86_64-ebs", eks.ArchX86_64, ECSFamilyAL2023GPU, "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended"},
		{"al2023-ami-ecs-neuron-hvm-2023.0.20261030-kernel-6.1-x86_64", eks.ArchX86_64, ECSFamilyAL2023Neuron, "/aws/service/ecs/optimized-ami/amazon-linux-2023/neuron/recommended"},
		{"amzn2-ami-ecs-hvm-2.0.20261030-x86_64-ebs", eks.ArchX86_64, ECSFamilyAL2, "/aws/service/ecs/optimized-ami/amazon-linux-2/recommended"},
		{"amzn2-ami-ecs-hvm-2.0.20261030-arm64-ebs", eks.ArchARM64, ECSFamilyAL2, "/aws/service/ecs/optimized-ami/amazon-linux-2/arm64/recommended"},
		{"amzn2-ami-ecs-gpu-hvm-2.0.20261030-x86_64-ebs", eks.ArchX86_64, ECSFamilyAL2GPU, "/aws/service/ecs/optimized-ami/amazon-linux-2/gpu/recommended"},
		{"amzn2-ami-ecs-inf-hvm-2.0.20261030-x86_64-ebs", eks.ArchX86_64, ECSFamilyAL2Inf, "/aws/service/ecs/optimized-ami/amazon-linux-2/inf/recommended"},
		{"amzn2-ami-ecs-kernel-5.10-hvm-2.0.20261030-x86_64-ebs", eks.ArchX86_64, ECSFamilyAL2Kernel510, "/aws/service/ecs/optimized-ami/amazon-linux-2/kernel-5.10/recommended"},
		{"bottlerocket-aws-ecs-2-aarch64-v1.26.0-5a5e5b2c", eks.ArchARM64, ECSFamilyBottlerocket, "/aws/service/bottlerocket/aws-ecs-2/arm64/latest/image_id"},
		{"Windows_Server-2022-English-Full-ECS_Optimized-2026.11.13", eks.ArchX86_64, "windows-full-2022", "/aws/service/ami-windows-latest/Windows_Server-2022-English-Full-ECS_Optimized/image_id"},
		{"Windows_Server-2019-English-Core-ECS_Optimized-2026.11.13", eks.ArchX86_64, "windows-core-2019", "/aws/service/ami-windows-latest/Windows_Server-2019-English-Core-ECS_Optimized/image_id"},
	} {
		t.Run(c.amiName, func(t *testing.T) {
			require.Equal(t, c.family, ecsFamilyOfAMIName(c.amiName))
			p, err := ECSParameterPath(c.family, c.arch)
			require.NoError(t, err)
			require.Equal(t, c.parameter, p)
		})
	}
	require.Empty(t, ecsFamilyOfAMIName("my-golden-ami-2026-11"), "a custom AMI tells no family")

	for _, c := range []struct{ family, arch, err string }{
		{ECSFamilyAL2023GPU, eks.ArchARM64, "no al2023-gpu ECS-optimized AMI for arm64"},
		{"windows-full-2022", eks.ArchARM64, "for arm64"},
		{"centos", eks.ArchX86_64, `unknown ECS AMI family "centos"`},
		{ECSFamilyAL2023, "ppc64", `architecture "ppc64"`},
	} {
		_, err := ECSParameterPath(c.family, c.arch)
		require.ErrorContains(t, err, c.err)
	}
}

// The family comes from the tag first, then from the AMI the group launches or runs, else AL2023 (with a
// note saying so).
func TestECSFamilyOfAGroup(t *testing.T) {
	w := &run{images: map[string]imageInfo{
		"ami-win": {name: "Windows_Server-2022-English-Full-ECS_Optimized-2026.11.13"},
		"ami-own": {name: "my-golden-ami"},
	}}
	for _, c := range []struct {
		name       string
		tag        string
		launch     string
		inUse      []string
		wantFamily string
		wantFrom   string
	}{
		{"tag wins", "AL2-GPU", "ami-win", nil, "al2-gpu", "tag"},
		{"the AMI it launches", "", "ami-win", nil, "windows-full-2022", "ami-name"},
		{"an AMI in use", "", "ami-own", []string{"ami-win"}, "windows-full-2022", "ami-name"},
		{"nothing tells", "", "ami-own", []string{"ami-unknown"}, ECSFamilyAL2023, "default"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &subject{out: &Group{LaunchImageID: c.launch}}
			for _, id := range c.inUse {
				s.out.InUse = append(s.out.InUse, AMIUse{ImageID: id})
			}
			family, from := w.ecsFamily(s, c.tag)
			require.Equal(t, c.wantFamily, family)
			require.Equal(t, c.wantFrom, from)
		})
	}
}
