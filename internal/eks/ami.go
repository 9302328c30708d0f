package eks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// AMI families of the EKS-optimized AMIs (values of the patch-agent/ami-family tag). Each names one public
// SSM parameter per Kubernetes version and architecture (Amazon EKS User Guide: "Retrieve recommended Amazon
// Linux AMI IDs", "Retrieve recommended Bottlerocket AMI IDs", "Retrieve recommended Microsoft Windows AMI
// IDs").
const (
	FamilyAL2023             = "al2023" // the default
	FamilyAL2023NVIDIA       = "al2023-nvidia"
	FamilyAL2023Neuron       = "al2023-neuron"
	FamilyAL2                = "al2"
	FamilyAL2GPU             = "al2-gpu"
	FamilyBottlerocket       = "bottlerocket"
	FamilyBottlerocketNVIDIA = "bottlerocket-nvidia"
	FamilyWindowsCore2019    = "windows-core-2019"
	FamilyWindowsFull2019    = "windows-full-2019"
	FamilyWindowsCore2022    = "windows-core-2022"
	FamilyWindowsFull2022    = "windows-full-2022"
)

// AMI architectures as the public parameter paths and EC2 ProcessorInfo.SupportedArchitectures name them.
const (
	ArchX86_64 = "x86_64"
	ArchARM64  = "arm64"
)

// Families lists the supported AMI families, sorted.
func Families() []string {
	f := []string{FamilyAL2023, FamilyAL2023NVIDIA, FamilyAL2023Neuron, FamilyAL2, FamilyAL2GPU, FamilyBottlerocket,
		FamilyBottlerocketNVIDIA, FamilyWindowsCore2019, FamilyWindowsFull2019, FamilyWindowsCore2022, FamilyWindowsFull2022}
	sort.Strings(f)
	return f
}

// ErrInvalidVersion is returned for a Kubernetes version that is not "1.<minor>" (empty, "undefined", ...).
var ErrInvalidVersion = errors.New("not a Kubernetes version")

// ErrNodeNewerThanControlPlane is returned when a node AMI is for a newer Kubernetes minor version than the
// cluster's control plane: the kubelet must never be newer than the API server (Kubernetes version skew
// policy), so such an AMI is refused.
var ErrNodeNewerThanControlPlane = errors.New("node AMI is for a newer Kubernetes version than the control plane")

var versionPattern = regexp.MustCompile(`^1\.(\d{1,3})$`)

// ParseVersion returns the minor version of a Kubernetes version "1.<minor>" as EKS writes it ("1.31").
// Anything else — "", "undefined", "v1.31", "1.31.2", "latest" — is ErrInvalidVersion.
func ParseVersion(v string) (minor int, err error) {
	m := versionPattern.FindStringSubmatch(v)
	if m == nil {
		return 0, fmt.Errorf("%q: %w (want 1.<minor>, like 1.31)", v, ErrInvalidVersion)
	}
	return strconv.Atoi(m[1])
}

// CheckNodeVersion returns ErrNodeNewerThanControlPlane (wrapped, with both versions) when node names a newer
// minor version than controlPlane, and ErrInvalidVersion when either is not a version.
func CheckNodeVersion(node, controlPlane string) error {
	n, err := ParseVersion(node)
	if err != nil {
		return fmt.Errorf("node AMI Kubernetes version %w", err)
	}
	c, err := ParseVersion(controlPlane)
	if err != nil {
		return fmt.Errorf("control plane Kubernetes version %w", err)
	}
	if n > c {
		return fmt.Errorf("node AMI for Kubernetes %s, control plane at %s: %w; upgrade the control plane first",
			node, controlPlane, ErrNodeNewerThanControlPlane)
	}
	return nil
}

// ParameterPath returns the public SSM parameter that names the recommended EKS-optimized AMI of family for
// Kubernetes version and architecture arch, for example
// /aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id. Errors name the
// problem: an unknown family, a version that is not "1.<minor>" (so no path ever holds an empty or
// "undefined" version), or an architecture the family has no AMI for.
func ParameterPath(family, version, arch string) (string, error) {
	if _, err := ParseVersion(version); err != nil {
		return "", fmt.Errorf("building the AMI parameter path: Kubernetes version %w", err)
	}
	if arch != ArchX86_64 && arch != ArchARM64 {
		return "", fmt.Errorf("building the AMI parameter path: architecture %q is not %s or %s", arch, ArchX86_64, ArchARM64)
	}
	onlyX86 := func(what string) error {
		if arch != ArchX86_64 {
			return fmt.Errorf("building the AMI parameter path: AMI family %s has no %s AMI (%s only)", family, arch, what)
		}
		return nil
	}
	switch family {
	case FamilyAL2023:
		return fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/standard/recommended/image_id", version, arch), nil
	case FamilyAL2023NVIDIA:
		return fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/nvidia/recommended/image_id", version, arch), nil
	case FamilyAL2023Neuron:
		if err := onlyX86(ArchX86_64); err != nil {
			return "", err
		}
		return fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/x86_64/neuron/recommended/image_id", version), nil
	case FamilyAL2:
		variant := "amazon-linux-2"
		if arch == ArchARM64 {
			variant = "amazon-linux-2-arm64"
		}
		return fmt.Sprintf("/aws/service/eks/optimized-ami/%s/%s/recommended/image_id", version, variant), nil
	case FamilyAL2GPU:
		if err := onlyX86(ArchX86_64); err != nil {
			return "", err
		}
		return fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2-gpu/recommended/image_id", version), nil
	case FamilyBottlerocket:
		return fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s/%s/latest/image_id", version, arch), nil
	case FamilyBottlerocketNVIDIA:
		return fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s-nvidia/%s/latest/image_id", version, arch), nil
	case FamilyWindowsCore2019, FamilyWindowsFull2019, FamilyWindowsCore2022, FamilyWindowsFull2022:
		if err := onlyX86(ArchX86_64); err != nil {
			return "", err
		}
		parts := strings.Split(family, "-") // windows, core|full, 2019|2022
		edition := strings.ToUpper(parts[1][:1]) + parts[1][1:]
		return fmt.Sprintf("/aws/service/ami-windows-latest/Windows_Server-%s-English-%s-EKS_Optimized-%s/image_id", parts[2], edition, version), nil
	}
	return "", fmt.Errorf("building the AMI parameter path: unknown AMI family %q (want one of %s)", family, strings.Join(Families(), ", "))
}

// versionInPath finds the Kubernetes version segment of the public EKS AMI parameters.
var versionInPath = []*regexp.Regexp{
	regexp.MustCompile(`^/aws/service/eks/optimized-ami/([^/]*)/`),
	regexp.MustCompile(`^/aws/service/bottlerocket/aws-k8s-([^/]*?)(?:-nvidia|-fips)?/`),
	regexp.MustCompile(`^/aws/service/ami-windows-latest/Windows_Server-\d+-English-(?:Core|Full)-EKS_Optimized-([^/]*)/`),
}

// VersionInParameter returns the Kubernetes version segment of a public EKS AMI parameter path (for example
// "1.31" of /aws/service/eks/optimized-ami/1.31/...), and false for any other parameter (a golden-AMI
// parameter of the account names no version). The segment is returned as written, even when it is empty or
// "undefined": callers check it with ParseVersion.
func VersionInParameter(path string) (version string, ok bool) {
	for _, re := range versionInPath {
		if m := re.FindStringSubmatch(path); m != nil {
			return m[1], true
		}
	}
	return "", false
}

// maxInstanceTypesPerCall is the DescribeInstanceTypes limit (Amazon EC2 API Reference: DescribeInstanceTypes,
// InstanceTypes "Maximum of 100 items").
const maxInstanceTypesPerCall = 100

// Architectures tells the AMI architecture of instance types from EC2 DescribeInstanceTypes
// (ProcessorInfo.SupportedArchitectures) — never from a list of instance families kept here. Answers are
// cached for the agent's lifetime (an instance type's architecture does not change). Safe for concurrent use.
type Architectures struct {
	API awsapi.EC2InstanceTypes

	mu    sync.Mutex
	cache map[string]string // instance type -> x86_64 | arm64
}

// For returns the one architecture that every given instance type runs. Errors: no instance types, an
// instance type EC2 does not know, instance types of both architectures (one AMI cannot serve them), or a
// failed call.
func (a *Architectures) For(ctx context.Context, instanceTypes []string) (string, error) {
	types := slices.Compact(slices.Sorted(slices.Values(instanceTypes)))
	types = slices.DeleteFunc(types, func(s string) bool { return s == "" })
	if len(types) == 0 {
		return "", errors.New("no instance types to tell the architecture from")
	}
	if err := a.fill(ctx, types); err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	byArch := map[string][]string{}
	for _, t := range types {
		byArch[a.cache[t]] = append(byArch[a.cache[t]], t)
	}
	if len(byArch) > 1 {
		return "", fmt.Errorf("instance types span architectures (%s: %s; %s: %s): one AMI cannot serve them",
			ArchX86_64, strings.Join(byArch[ArchX86_64], ", "), ArchARM64, strings.Join(byArch[ArchARM64], ", "))
	}
	for arch := range byArch {
		return arch, nil
	}
	return "", errors.New("no architecture found")
}

// fill describes the instance types not cached yet, 100 per call.
func (a *Architectures) fill(ctx context.Context, types []string) error {
	a.mu.Lock()
	var missing []ec2types.InstanceType
	for _, t := range types {
		if _, ok := a.cache[t]; !ok {
			missing = append(missing, ec2types.InstanceType(t))
		}
	}
	a.mu.Unlock()
	for start := 0; start < len(missing); start += maxInstanceTypesPerCall {
		batch := missing[start:min(start+maxInstanceTypesPerCall, len(missing))]
		p := ec2.NewDescribeInstanceTypesPaginator(a.API, &ec2.DescribeInstanceTypesInput{InstanceTypes: batch})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return fmt.Errorf("describing instance types %v: %w", batch, err)
			}
			for _, it := range out.InstanceTypes {
				arch := ""
				if it.ProcessorInfo != nil {
					for _, sa := range it.ProcessorInfo.SupportedArchitectures {
						switch sa {
						case ec2types.ArchitectureTypeX8664:
							arch = ArchX86_64
						case ec2types.ArchitectureTypeArm64:
							if arch == "" {
								arch = ArchARM64
							}
						}
					}
				}
				if arch == "" {
					return fmt.Errorf("instance type %s supports neither %s nor %s", it.InstanceType, ArchX86_64, ArchARM64)
				}
				a.mu.Lock()
				if a.cache == nil {
					a.cache = map[string]string{}
				}
				a.cache[string(it.InstanceType)] = arch
				a.mu.Unlock()
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range types {
		if _, ok := a.cache[t]; !ok {
			return fmt.Errorf("instance type %s: EC2 DescribeInstanceTypes does not know it", t)
		}
	}
	return nil
}

// ReleaseParameters returns the public SSM parameters that name the recommended release of a managed node
// group's AMI type for Kubernetes version: release names the release version UpdateNodegroupVersion takes
// (releaseVersion), image the AMI id of that release (for the AMI gate). The release is decided on the
// release parameter's value, never on its Version.
//
// Paths (Amazon EKS User Guide, "Retrieve recommended Amazon Linux AMI IDs": the sub-parameters image_id and
// release_version of .../recommended; "Retrieve recommended Bottlerocket AMI IDs": image_id and image_version
// of .../latest, flavors -nvidia and -fips):
//   - AL2_x86_64, AL2_x86_64_GPU, AL2_ARM_64: /aws/service/eks/optimized-ami/<v>/amazon-linux-2[-gpu|-arm64]/recommended/release_version;
//   - AL2023_<arch>_STANDARD|NVIDIA|NEURON: /aws/service/eks/optimized-ami/<v>/amazon-linux-2023/<x86_64|arm64>/<standard|nvidia|neuron>/recommended/release_version;
//   - BOTTLEROCKET_<arch>[_NVIDIA|_FIPS]: /aws/service/bottlerocket/aws-k8s-<v>[-nvidia|-fips]/<x86_64|arm64>/latest/image_version.
//
// Errors: a version that is not "1.<minor>" (ErrInvalidVersion), CUSTOM (the AMI is in the launch template:
// the node group's own AMI parameter applies), Windows and unknown AMI types.
func ReleaseParameters(amiType, version string) (release, image string, err error) {
	if _, err := ParseVersion(version); err != nil {
		return "", "", fmt.Errorf("building the release parameter path: Kubernetes version %w", err)
	}
	arch := ArchX86_64
	if strings.Contains(amiType, "_ARM_64") {
		arch = ArchARM64
	}
	eksAMI := func(variant string) (string, string, error) {
		base := fmt.Sprintf("/aws/service/eks/optimized-ami/%s/%s/recommended/", version, variant)
		return base + "release_version", base + "image_id", nil
	}
	switch amiType {
	case "AL2_x86_64":
		return eksAMI("amazon-linux-2")
	case "AL2_x86_64_GPU":
		return eksAMI("amazon-linux-2-gpu")
	case "AL2_ARM_64":
		return eksAMI("amazon-linux-2-arm64")
	case "AL2023_x86_64_STANDARD", "AL2023_ARM_64_STANDARD":
		return eksAMI("amazon-linux-2023/" + arch + "/standard")
	case "AL2023_x86_64_NVIDIA", "AL2023_ARM_64_NVIDIA":
		return eksAMI("amazon-linux-2023/" + arch + "/nvidia")
	case "AL2023_x86_64_NEURON":
		return eksAMI("amazon-linux-2023/x86_64/neuron")
	case "BOTTLEROCKET_x86_64", "BOTTLEROCKET_ARM_64", "BOTTLEROCKET_x86_64_NVIDIA", "BOTTLEROCKET_ARM_64_NVIDIA",
		"BOTTLEROCKET_x86_64_FIPS", "BOTTLEROCKET_ARM_64_FIPS":
		flavor := ""
		switch {
		case strings.HasSuffix(amiType, "_NVIDIA"):
			flavor = "-nvidia"
		case strings.HasSuffix(amiType, "_FIPS"):
			flavor = "-fips"
		}
		base := fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s%s/%s/latest/", version, flavor, arch)
		return base + "image_version", base + "image_id", nil
	case "CUSTOM":
		return "", "", fmt.Errorf("AMI type CUSTOM: the AMI is in the node group's launch template; tag the node group with %s naming its AMI parameter", "patch-agent/ami-parameter")
	}
	return "", "", fmt.Errorf("building the release parameter path: AMI type %q has no release parameter this agent knows (AL2, AL2023, Bottlerocket, or CUSTOM with an AMI parameter)", amiType)
}
