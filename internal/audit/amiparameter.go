package audit

import (
	"regexp"

	"github.com/patch-agent/patch-agent/internal/eks"
)

// eksAMINames match the names of the EKS-optimized AMIs AWS publishes, with the Kubernetes version in the
// name: amazon-eks-node-al2023-x86_64-standard-1.31-v20241109 (AL2023, standard or nvidia or neuron),
// amazon-eks-node-1.30-v20240917, amazon-eks-arm64-node-1.30-v... (AL2), amazon-eks-gpu-node-1.30-v... (AL2
// GPU), bottlerocket-aws-k8s-1.31-x86_64-v1.26.1-... and bottlerocket-aws-k8s-1.31-nvidia-... (Bottlerocket),
// Windows_Server-2022-English-Core-EKS_Optimized-1.31-... (Windows).
var eksAMINames = []struct {
	re     *regexp.Regexp
	family func(m []string) string
}{
	{regexp.MustCompile(`^amazon-eks-node-al2023-(?:x86_64|arm64)-(standard|nvidia|neuron)-(1\.\d+)-`), func(m []string) string {
		if m[1] == "standard" {
			return eks.FamilyAL2023
		}
		return eks.FamilyAL2023 + "-" + m[1]
	}},
	{regexp.MustCompile(`^amazon-eks-gpu-node-(1\.\d+)-`), func([]string) string { return eks.FamilyAL2GPU }},
	{regexp.MustCompile(`^amazon-eks-(?:arm64-)?node-(1\.\d+)-`), func([]string) string { return eks.FamilyAL2 }},
	{regexp.MustCompile(`^bottlerocket-aws-k8s-(1\.\d+)-nvidia-`), func([]string) string { return eks.FamilyBottlerocketNVIDIA }},
	{regexp.MustCompile(`^bottlerocket-aws-k8s-(1\.\d+)-`), func([]string) string { return eks.FamilyBottlerocket }},
	{regexp.MustCompile(`^Windows_Server-(2019|2022)-English-(Core|Full)-EKS_Optimized-(1\.\d+)`), func(m []string) string {
		if m[2] == "Core" {
			return "windows-core-" + m[1]
		}
		return "windows-full-" + m[1]
	}},
}

// ParameterForAMI returns the public SSM parameter that keeps an AMI of the same kind current, told from the
// AMI's name (DescribeImages) and architecture (x86_64 or arm64): for an ECS-optimized AMI the parameter of
// its family (ECSParameterPath, the live audit's mapping), for an EKS-optimized AMI the parameter of its
// family and Kubernetes version (eks.ParameterPath). It returns "" for any other AMI (a golden AMI, a
// marketplace AMI: its own parameter is the team's to name), or a family AWS publishes no parameter of for
// the architecture.
func ParameterForAMI(name, arch string) string {
	if family := ecsFamilyOfAMIName(name); family != "" {
		p, err := ECSParameterPath(family, arch)
		if err != nil {
			return ""
		}
		return p
	}
	for _, n := range eksAMINames {
		m := n.re.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		version := m[len(m)-1] // the Kubernetes version is the last group of every pattern
		p, err := eks.ParameterPath(n.family(m), version, arch)
		if err != nil {
			return ""
		}
		return p
	}
	return ""
}
