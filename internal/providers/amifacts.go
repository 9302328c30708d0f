package providers

import (
	"regexp"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/patch-agent/patch-agent/internal/model"
)

func joinArchs(a []ec2types.ArchitectureType) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// majorityImage returns the AMI most in-service instances of the group run ("" when none is known).
func majorityImage(v model.GroupView) string {
	count := map[string]int{}
	best := ""
	for _, i := range v.Instances {
		if i.ImageID == "" || i.Leaving() {
			continue
		}
		count[i.ImageID]++
		if n := count[i.ImageID]; n > count[best] || n == count[best] && i.ImageID < best {
			best = i.ImageID
		}
	}
	return best
}

var (
	al2023Name       = regexp.MustCompile(`(?i)(^|[^a-z0-9])(al2023|amazon[- ]?linux[- ]?2023)`)
	al2Name          = regexp.MustCompile(`(?i)(^|[^a-z0-9])(amzn2-|al2[^0-9]|al2$|amazon[- ]?linux[- ]?2([^0-9]|$))`)
	eksAL2Name       = regexp.MustCompile(`(?i)^amazon-eks-(gpu-|arm64-)?node-1\.[0-9]+-v`)
	bottlerocketName = regexp.MustCompile(`(?i)bottlerocket`)
	windowsName      = regexp.MustCompile(`(?i)^windows_server-`)
)

// osFamilyNames are the name patterns of each OS family, in the order a family is reported.
var osFamilyNames = []struct {
	family string
	names  []*regexp.Regexp
}{
	{OSFamilyBottlerocket, []*regexp.Regexp{bottlerocketName}},
	{OSFamilyWindows, []*regexp.Regexp{windowsName}},
	{OSFamilyAL2023, []*regexp.Regexp{al2023Name}},
	{OSFamilyAL2, []*regexp.Regexp{al2Name, eksAL2Name}},
}

// DescribeOSFamily tells the OS family of an AMI from what DescribeImages returns (Amazon EC2 API Reference,
// "Image"): Platform ("windows" for Windows AMIs, blank otherwise) and PlatformDetails (the billing platform,
// "Windows", "Linux/UNIX", "Red Hat Enterprise Linux", ...) tell Windows; otherwise the Name, then the
// Description, tell the Linux family by the names of the ECS- and EKS-optimized AMIs: amzn2-ami-ecs-...,
// amazon-eks-node-1.30-v... (AL2), al2023-ami-ecs-..., amazon-eks-node-al2023-... (AL2023),
// bottlerocket-aws-k8s-..., bottlerocket-aws-ecs-... (Bottlerocket), Windows_Server-... (Windows).
// A name (or, with no family in the name, a description) that names more than one family tells none:
// it is OSFamilyUnclear followed by the families it names ("unclear (name says bottlerocket, al2)"), so it
// equals only an AMI whose name is unclear the same way, never one of the families it names (an AL2 golden AMI
// called acme-al2-bottlerocket-compat is not taken for Bottlerocket).
// Anything else is OSFamilyOther followed by its PlatformDetails ("other (Linux/UNIX)"), so that two other
// AMIs only match on the same billing platform.
func DescribeOSFamily(img ec2types.Image) string {
	details := aws.ToString(img.PlatformDetails)
	if img.Platform == ec2types.PlatformValuesWindows || strings.HasPrefix(strings.ToLower(details), "windows") {
		return OSFamilyWindows
	}
	for _, field := range []struct{ what, text string }{{"name", aws.ToString(img.Name)}, {"description", aws.ToString(img.Description)}} {
		var named []string
		for _, f := range osFamilyNames {
			if slices.ContainsFunc(f.names, func(re *regexp.Regexp) bool { return re.MatchString(field.text) }) {
				named = append(named, f.family)
			}
		}
		switch len(named) {
		case 0:
		case 1:
			return named[0]
		default:
			return OSFamilyUnclear + " (" + field.what + " says " + strings.Join(named, ", ") + ")"
		}
	}
	return OSFamilyOther + " (" + details + ")"
}

// AccountFromQueueURL returns the AWS account id in an SQS queue URL's path
// (https://sqs.us-east-1.amazonaws.com/111122223333/patch-agent), or "" when it names none.
func AccountFromQueueURL(queueURL string) string {
	path := queueURL
	if i := strings.Index(path, "://"); i >= 0 {
		path = path[i+3:]
	}
	parts := strings.Split(path, "/")
	if len(parts) >= 3 && model.AccountIDPattern.MatchString(parts[1]) {
		return parts[1]
	}
	return ""
}
