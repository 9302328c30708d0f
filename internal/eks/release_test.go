package eks

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReleaseParametersOfEveryAMIType: the release and image parameters of each managed node group AMI type
// follow the EKS User Guide's paths (Amazon Linux: .../recommended/release_version and image_id; Bottlerocket:
// .../latest/image_version and image_id), and what has none is an error.
func TestReleaseParametersOfEveryAMIType(t *testing.T) {
	for _, tc := range []struct {
		amiType, version, release, image, err string
	}{
		{amiType: "AL2_x86_64", version: "1.30", release: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/release_version",
			image: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2/recommended/image_id"},
		{amiType: "AL2_x86_64_GPU", version: "1.30", release: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-gpu/recommended/release_version"},
		{amiType: "AL2_ARM_64", version: "1.30", release: "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/release_version"},
		{amiType: "AL2023_x86_64_STANDARD", version: "1.31", release: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/release_version",
			image: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"},
		{amiType: "AL2023_ARM_64_STANDARD", version: "1.31", release: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/release_version"},
		{amiType: "AL2023_x86_64_NVIDIA", version: "1.31", release: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/release_version"},
		{amiType: "AL2023_ARM_64_NVIDIA", version: "1.31", release: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/release_version"},
		{amiType: "AL2023_x86_64_NEURON", version: "1.31", release: "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/release_version"},
		{amiType: "BOTTLEROCKET_x86_64", version: "1.31", release: "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_version",
			image: "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"},
		{amiType: "BOTTLEROCKET_ARM_64_NVIDIA", version: "1.31", release: "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/arm64/latest/image_version"},
		{amiType: "BOTTLEROCKET_x86_64_FIPS", version: "1.31", release: "/aws/service/bottlerocket/aws-k8s-1.31-fips/x86_64/latest/image_version"},
		{amiType: "CUSTOM", version: "1.31", err: "patch-agent/ami-parameter"},
		{amiType: "WINDOWS_CORE_2022_x86_64", version: "1.31", err: "no release parameter"},
		{amiType: "AL2023_x86_64_STANDARD", version: "undefined", err: "not a Kubernetes version"},
	} {
		t.Run(tc.amiType+" "+tc.version, func(t *testing.T) {
			release, image, err := ReleaseParameters(tc.amiType, tc.version)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.release, release)
			if tc.image != "" {
				require.Equal(t, tc.image, image)
			}
		})
	}
}
