package eks

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/sim"
)

func TestParameterPathOfEachFamily(t *testing.T) {
	cases := []struct{ family, arch, want string }{
		{FamilyAL2023, ArchX86_64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"},
		{FamilyAL2023, ArchARM64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id"},
		{FamilyAL2023NVIDIA, ArchX86_64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/nvidia/recommended/image_id"},
		{FamilyAL2023Neuron, ArchX86_64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/neuron/recommended/image_id"},
		{FamilyAL2, ArchX86_64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2/recommended/image_id"},
		{FamilyAL2, ArchARM64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-arm64/recommended/image_id"},
		{FamilyAL2GPU, ArchX86_64, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2-gpu/recommended/image_id"},
		{FamilyBottlerocket, ArchX86_64, "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id"},
		{FamilyBottlerocket, ArchARM64, "/aws/service/bottlerocket/aws-k8s-1.31/arm64/latest/image_id"},
		{FamilyBottlerocketNVIDIA, ArchX86_64, "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/latest/image_id"},
		{FamilyWindowsCore2022, ArchX86_64, "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"},
		{FamilyWindowsFull2019, ArchX86_64, "/aws/service/ami-windows-latest/Windows_Server-2019-English-Full-EKS_Optimized-1.31/image_id"},
	}
	for _, c := range cases {
		t.Run(c.family+"/"+c.arch, func(t *testing.T) {
			got, err := ParameterPath(c.family, "1.31", c.arch)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
			v, ok := VersionInParameter(got)
			require.True(t, ok)
			require.Equal(t, "1.31", v, "the version is read back from every path built")
		})
	}
}

func TestParameterPathsMatchTheSSMFixtures(t *testing.T) {
	// /work/shared/fixtures/ssm/eks-al2023-image-id.json and bottlerocket-k8s-image-id.json name these.
	p, err := ParameterPath(FamilyAL2023, "1.31", ArchX86_64)
	require.NoError(t, err)
	require.Equal(t, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id", p)
	p, err = ParameterPath(FamilyBottlerocket, "1.31", ArchX86_64)
	require.NoError(t, err)
	require.Equal(t, "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/latest/image_id", p)
}

// Field case C12 (../shared/CASES.md).
func TestC12APathWithAnEmptyOrUndefinedVersionIsNeverBuilt(t *testing.T) {
	for _, v := range []string{"", "undefined", "null", "1", "v1.31", "1.31.2", "latest", " 1.31"} {
		_, err := ParameterPath(FamilyAL2023, v, ArchX86_64)
		require.ErrorIs(t, err, ErrInvalidVersion, "version %q", v)
	}
}

func TestParameterPathRefusesFamiliesAndArchitecturesWithoutAnAMI(t *testing.T) {
	for _, c := range []struct{ family, arch, want string }{
		{"ubuntu", ArchX86_64, `unknown AMI family "ubuntu"`},
		{FamilyAL2023Neuron, ArchARM64, "has no arm64 AMI"},
		{FamilyAL2GPU, ArchARM64, "has no arm64 AMI"},
		{FamilyWindowsCore2022, ArchARM64, "has no arm64 AMI"},
		{FamilyAL2023, "i386", `architecture "i386"`},
	} {
		_, err := ParameterPath(c.family, "1.31", c.arch)
		require.ErrorContains(t, err, c.want, "%s/%s", c.family, c.arch)
	}
}

// Field case C12 (../shared/CASES.md).
func TestC12NodeAMINewerThanTheControlPlaneIsRefused(t *testing.T) {
	err := CheckNodeVersion("1.31", "1.30")
	require.ErrorIs(t, err, ErrNodeNewerThanControlPlane)
	require.ErrorContains(t, err, "node AMI for Kubernetes 1.31, control plane at 1.30")
	require.NoError(t, CheckNodeVersion("1.30", "1.30"))
	require.NoError(t, CheckNodeVersion("1.29", "1.30"), "older nodes are within the skew policy")
	require.NoError(t, CheckNodeVersion("1.9", "1.10"), "minor versions compare as numbers")
	require.ErrorIs(t, CheckNodeVersion("undefined", "1.30"), ErrInvalidVersion)
	require.ErrorIs(t, CheckNodeVersion("1.30", ""), ErrInvalidVersion)
}

func TestVersionInParameterFindsOnlyPublicEKSPaths(t *testing.T) {
	for path, want := range map[string]string{
		"/aws/service/eks/optimized-ami/1.14/amazon-linux-2/recommended":                         "1.14",
		"/aws/service/eks/optimized-ami//amazon-linux-2023/x86_64/standard/recommended/image_id": "",
		"/aws/service/eks/optimized-ami/undefined/amazon-linux-2023/x86_64/standard/image_id":    "undefined",
		"/aws/service/bottlerocket/aws-k8s-1.30-nvidia/arm64/latest/image_id":                    "1.30",
	} {
		v, ok := VersionInParameter(path)
		require.True(t, ok, path)
		require.Equal(t, want, v, path)
	}
	for _, path := range []string{"/golden-ami/eks/al2023", "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended"} {
		_, ok := VersionInParameter(path)
		require.False(t, ok, path)
	}
}

func TestArchitectureComesFromDescribeInstanceTypes(t *testing.T) {
	acct := sim.New(testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)), sim.Options{})
	a := &Architectures{API: acct.EC2InstanceTypes()}
	ctx := context.Background()
	arch, err := a.For(ctx, []string{"m7g.large", "c7g.large"})
	require.NoError(t, err)
	require.Equal(t, ArchARM64, arch)
	arch, err = a.For(ctx, []string{"m5.large", "t2.micro"})
	require.NoError(t, err)
	require.Equal(t, ArchX86_64, arch, "i386+x86_64 types run x86_64 AMIs")
	_, err = a.For(ctx, []string{"m5.large", "m7g.large"})
	require.ErrorContains(t, err, "span architectures")
	_, err = a.For(ctx, []string{"m99.huge"})
	require.ErrorContains(t, err, "InvalidInstanceType")
	_, err = a.For(ctx, nil)
	require.ErrorContains(t, err, "no instance types")

	acct.ResetCalls()
	_, err = a.For(ctx, []string{"m7g.large", "m5.large", "c7g.large"})
	require.Error(t, err)
	require.Zero(t, acct.Calls()["ec2:DescribeInstanceTypes"], "answers are cached")
}
