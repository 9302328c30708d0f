package cfntest

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExecutionRolePullsOnlyTheAgentImagesRepository derives the repository from AgentImage as the template
// does and evaluates the execution role's policy: the two pull actions on that repository, the registry
// token on every resource (it supports none), nothing on any other repository and no push.
func TestExecutionRolePullsOnlyTheAgentImagesRepository(t *testing.T) {
	const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := []struct {
		image, region, account, name string
	}{
		{testAccount + ".dkr.ecr.us-east-1.amazonaws.com/patch-agent:v1.2.3", "us-east-1", testAccount, "patch-agent"},
		{otherAccount + ".dkr.ecr.eu-west-1.amazonaws.com/platform/patch-agent" + digest, "eu-west-1", otherAccount, "platform/patch-agent"},
		{testAccount + ".dkr.ecr.eu-central-1.amazonaws.com/mirror/agents/patch-agent:v1.2.3" + digest, "eu-central-1", testAccount, "mirror/agents/patch-agent"},
		{testAccount + ".dkr.ecr.us-east-1.amazonaws.com/patch-agent", "us-east-1", testAccount, "patch-agent"},
		{testAccount + ".dkr.ecr-fips.us-east-1.amazonaws.com/patch-agent:v1", "us-east-1", testAccount, "patch-agent"},
		{testAccount + ".dkr.ecr.cn-north-1.amazonaws.com.cn/patch-agent:v1", "cn-north-1", testAccount, "patch-agent"},
	}
	for _, c := range cases {
		t.Run(c.image, func(t *testing.T) {
			s := loadStack(t, map[string]string{"AgentImage": c.image})
			sts := s.roleStatements(t, "ExecutionRole")
			repo := func(region, account, name string) string {
				return "arn:" + testPartition + ":ecr:" + region + ":" + account + ":repository/" + name
			}
			own := repo(c.region, c.account, c.name)
			for _, a := range []string{"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"} {
				require.True(t, allows(t, sts, request{a, own, nil}), "%s on %s", a, own)
				for _, other := range []string{
					repo(c.region, c.account, "other"),
					repo(c.region, c.account, c.name+"-old"),
					repo(c.region, "999999999999", c.name),
					repo("ap-south-1", c.account, c.name),
				} {
					require.False(t, allows(t, sts, request{a, other, nil}), "%s on %s", a, other)
				}
			}
			require.True(t, allows(t, sts, request{"ecr:GetAuthorizationToken", "*", nil}))
			for _, a := range []string{"ecr:PutImage", "ecr:BatchCheckLayerAvailability", "ecr:InitiateLayerUpload", "ecr:BatchDeleteImage"} {
				require.False(t, allows(t, sts, request{a, own, nil}), "%s: the execution role only pulls", a)
			}
		})
	}
}

// TestAgentImageMustBeAPrivateECRImage: the execution role's pull permission is derived from AgentImage, so
// the parameter accepts private ECR images only (tag, digest or both; a repository name with slashes).
func TestAgentImageMustBeAPrivateECRImage(t *testing.T) {
	p, _ := rawTemplate(t)["Parameters"].(map[string]any)["AgentImage"].(map[string]any)
	require.NotContains(t, p, "Default", "no default: the image is always named")
	pattern := regexp.MustCompile("^(?:" + p["AllowedPattern"].(string) + ")$")
	for _, ok := range []string{
		"111122223333.dkr.ecr.eu-west-1.amazonaws.com/patch-agent:v1.2.3",
		"111122223333.dkr.ecr.eu-west-1.amazonaws.com/platform/patch-agent@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"111122223333.dkr.ecr.cn-north-1.amazonaws.com.cn/patch-agent:v1.2.3",
	} {
		require.Regexp(t, pattern, ok)
	}
	for _, refused := range []string{
		"public.ecr.aws/example/patch-agent:v1",
		"docker.io/library/patch-agent:v1",
		"ghcr.io/patch-agent/patch-agent:v1",
		"111122223333.dkr.ecr.eu-west-1.amazonaws.com",
		"111122223333.dkr.ecr.eu-west-1.amazonaws.com/Patch-Agent:v1",
		"111122223333.dkr.ecr.eu-west-1.amazonaws.com.evil.example/patch-agent:v1",
	} {
		require.NotRegexp(t, pattern, refused)
	}
}
