package audit

import (
	"fmt"
	"strings"

	"github.com/patch-agent/patch-agent/internal/eks"
)

// ECS AMI families (Group.AMIFamily of ECS groups): the variant of the Amazon ECS-optimized AMI a group runs,
// whose public parameter is the group's recommended AMI.
const (
	ECSFamilyAL2023       = "al2023" // the default when nothing tells
	ECSFamilyAL2023GPU    = "al2023-gpu"
	ECSFamilyAL2023Neuron = "al2023-neuron"
	ECSFamilyAL2          = "al2"
	ECSFamilyAL2GPU       = "al2-gpu"
	ECSFamilyAL2Inf       = "al2-inf" // AWS Inferentia (Neuron) on Amazon Linux 2
	ECSFamilyAL2Kernel510 = "al2-kernel-5.10"
	ECSFamilyBottlerocket = "bottlerocket" // the aws-ecs-2 variant
	// Windows families are "windows-<full|core>-<year>": windows-full-2022, windows-core-2019 ...
	ecsFamilyWindowsPrefix = "windows-"
)

// ecsAMINames maps the start of an ECS-optimized AMI's name (DescribeImages) to its family, most specific
// first. The names are those AWS publishes with each release (for example al2023-ami-ecs-gpu-hvm-2023.0.x,
// amzn2-ami-ecs-inf-hvm-2.0.x, bottlerocket-aws-ecs-2-x86_64-v1.x; Windows_Server-2022-English-Full-ECS_Optimized-
// is handled apart).
var ecsAMINames = []struct{ prefix, family string }{
	{"al2023-ami-ecs-gpu-", ECSFamilyAL2023GPU},
	{"al2023-ami-ecs-neuron-", ECSFamilyAL2023Neuron},
	{"al2023-ami-ecs-", ECSFamilyAL2023},
	{"amzn2-ami-ecs-gpu-", ECSFamilyAL2GPU},
	{"amzn2-ami-ecs-inf-", ECSFamilyAL2Inf},
	{"amzn2-ami-ecs-kernel-5.10-", ECSFamilyAL2Kernel510},
	{"amzn2-ami-ecs-", ECSFamilyAL2},
	{"bottlerocket-aws-ecs-", ECSFamilyBottlerocket},
}

// ecsFamilyOfAMIName returns the family of an ECS-optimized AMI by its name, "" for a name of none.
func ecsFamilyOfAMIName(name string) string {
	if rest, ok := strings.CutPrefix(name, "Windows_Server-"); ok && strings.Contains(rest, "-ECS_Optimized") {
		// Windows_Server-2022-English-Full-ECS_Optimized-2024.11.13
		parts := strings.Split(rest, "-")
		if len(parts) >= 3 {
			return ecsFamilyWindowsPrefix + strings.ToLower(parts[2]) + "-" + parts[0]
		}
		return ""
	}
	for _, n := range ecsAMINames {
		if strings.HasPrefix(name, n.prefix) {
			return n.family
		}
	}
	return ""
}

// ECSParameterPath returns the public Parameter Store parameter of the Amazon ECS-optimized AMI of family
// and architecture (eks.ArchX86_64 or eks.ArchARM64). Paths from the Amazon ECS Developer Guide:
// "Retrieving Amazon ECS-optimized Linux AMI metadata" (/aws/service/ecs/optimized-ami/amazon-linux-2023/
// [arm64/|gpu/|neuron/]recommended, amazon-linux-2/[arm64/|gpu/|inf/|kernel-5.10/]recommended, a JSON document
// whose image_id names the AMI), "Retrieving Amazon ECS-optimized Bottlerocket AMI metadata"
// (/aws/service/bottlerocket/aws-ecs-2/<arch>/latest/image_id) and "Retrieving Amazon ECS-optimized Windows AMI
// metadata" (/aws/service/ami-windows-latest/Windows_Server-<year>-English-<Full|Core>-ECS_Optimized/image_id).
// Errors: a family it does not know, or one AWS does not publish for the architecture (GPU, Neuron,
// Inferentia and Windows are x86_64 only).
func ECSParameterPath(family, arch string) (string, error) {
	const al2023, al2 = "/aws/service/ecs/optimized-ami/amazon-linux-2023/", "/aws/service/ecs/optimized-ami/amazon-linux-2/"
	arm := arch == eks.ArchARM64
	if arch != eks.ArchX86_64 && !arm {
		return "", fmt.Errorf("no ECS-optimized AMI for architecture %q", arch)
	}
	x86Only := func(p string) (string, error) {
		if arm {
			return "", fmt.Errorf("AWS publishes no %s ECS-optimized AMI for arm64", family)
		}
		return p, nil
	}
	switch family {
	case ECSFamilyAL2023:
		if arm {
			return al2023 + "arm64/recommended", nil
		}
		return al2023 + "recommended", nil
	case ECSFamilyAL2023GPU:
		return x86Only(al2023 + "gpu/recommended")
	case ECSFamilyAL2023Neuron:
		return x86Only(al2023 + "neuron/recommended")
	case ECSFamilyAL2:
		if arm {
			return al2 + "arm64/recommended", nil
		}
		return al2 + "recommended", nil
	case ECSFamilyAL2GPU:
		return x86Only(al2 + "gpu/recommended")
	case ECSFamilyAL2Inf:
		return x86Only(al2 + "inf/recommended")
	case ECSFamilyAL2Kernel510:
		if arm {
			return al2 + "kernel-5.10/arm64/recommended", nil
		}
		return al2 + "kernel-5.10/recommended", nil
	case ECSFamilyBottlerocket:
		return "/aws/service/bottlerocket/aws-ecs-2/" + arch + "/latest/image_id", nil
	}
	if rest, ok := strings.CutPrefix(family, ecsFamilyWindowsPrefix); ok {
		edition, year, ok := strings.Cut(rest, "-")
		if ok && (edition == "full" || edition == "core") && len(year) == 4 {
			return x86Only("/aws/service/ami-windows-latest/Windows_Server-" + year + "-English-" +
				strings.ToUpper(edition[:1]) + edition[1:] + "-ECS_Optimized/image_id")
		}
	}
	return "", fmt.Errorf("unknown ECS AMI family %q (want al2023, al2023-gpu, al2023-neuron, al2, al2-gpu, al2-inf, al2-kernel-5.10, bottlerocket or windows-<full|core>-<year>)", family)
}

// ecsFamily tells the AMI family of an ECS group: the tag patch-agent/ami-family, else the family of the AMI
// it launches or runs (by the AMI's name), else AL2023 — from says which.
func (w *run) ecsFamily(s *subject, tag string) (family, from string) {
	if f := strings.ToLower(strings.TrimSpace(tag)); f != "" {
		return f, "tag"
	}
	ids := []string{s.out.LaunchImageID}
	for _, u := range s.out.InUse {
		ids = append(ids, u.ImageID)
	}
	for _, id := range ids {
		if f := ecsFamilyOfAMIName(w.images[id].name); f != "" {
			return f, "ami-name"
		}
	}
	return ECSFamilyAL2023, "default"
}
