package orgcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/iac"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
)

// iacFixtures is the fixture tree of internal/audit/iac, as a user would name it from this directory.
var iacFixtures = filepath.Join("..", "..", "audit", "iac", "testdata", "fixtures")

func TestAuditIaCPrintsTheFindingsWithTheAMIFactsOfTheAccount(t *testing.T) {
	a := auditFleet(t)
	res := runAudit(t, a, "--iac", iacFixtures)
	require.NoError(t, res.err, res.stderr)
	require.Empty(t, res.stderr)
	goldenFile(t, filepath.Join("testdata", "audit-iac.table.golden"), res.stdout)
	for op := range a.Calls() {
		require.Equal(t, "ec2:DescribeImages", op, "the code audit reads the AMIs, nothing else")
	}
	require.Equal(t, 1, a.Calls()["ec2:DescribeImages"])
}

func TestAuditIaCOfflineMakesNoCallAndPrintsJSONAndCSV(t *testing.T) {
	a := auditFleet(t)
	res := runAudit(t, a, "--iac", "--offline", "-o", "json", iacFixtures)
	require.NoError(t, res.err, res.stderr)
	require.Empty(t, a.Calls())
	var r iac.Report
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &r))
	require.True(t, r.Offline)
	require.Equal(t, "--offline", r.OfflineReason)
	require.Len(t, r.Findings, 28)

	res = runAudit(t, a, "--iac", "--offline", "--output", "csv", iacFixtures)
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stdout, "file,line,resource,resource_type")
}

func TestAuditIaCWithoutCredentialsReportsTheSameFindingsOffline(t *testing.T) {
	env := auditEnv{clock: auditFleet(t).Clock(), connect: func(context.Context, string) (audit.Clients, awsapi.MetricData, string, error) {
		return audit.Clients{}, nil, "", errors.New("--region (or AWS_REGION) is required")
	}}
	cmd := newAuditCommandWith(env)
	var stdout, stderr bytes.Buffer
	cmd.SetArgs([]string{"--iac", "-o", "json", iacFixtures})
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	res := result{err: cmd.ExecuteContext(context.Background())}
	res.stdout, res.stderr = stdout.String(), stderr.String()
	require.NoError(t, res.err)
	require.Contains(t, res.stderr, "AMI facts not read (--region (or AWS_REGION) is required)")
	var r iac.Report
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &r))
	require.True(t, r.Offline)
	require.Len(t, r.Findings, 28)
}

func TestAuditIaCFailIfHardcodedExitsWithStatus3AfterTheReport(t *testing.T) {
	res := runAudit(t, auditFleet(t), "--iac", "--offline", "--fail-if-hardcoded", iacFixtures)
	var ee cli.ExitError
	require.True(t, errors.As(res.err, &ee), res.err)
	require.Equal(t, 3, ee.Code)
	require.EqualError(t, res.err, "28 hard-coded AMI reference(s) of 23 AMI(s) in the code: point it at an SSM parameter (docs/faq.md)")
	require.Contains(t, res.stdout, "aws_launch_template.orders", "the report is printed before the exit")

	clean := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(clean, "main.tf"), []byte(`data "aws_ssm_parameter" "ami" {
  name = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
}

resource "aws_launch_template" "web" {
  image_id = data.aws_ssm_parameter.ami.value
}
`), 0o644))
	res = runAudit(t, auditFleet(t), "--iac", "--offline", "--fail-if-hardcoded", clean)
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "0 hard-coded AMI reference(s) of 0 AMI(s); 1 following a parameter")
}

func TestAuditIaCRejectsFlagsThatDoNotGoWithIt(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--iac"}, "--iac needs at least one PATH"},
		{[]string{"--offline"}, "--offline and --fail-if-hardcoded go with --iac"},
		{[]string{"--fail-if-hardcoded"}, "--offline and --fail-if-hardcoded go with --iac"},
		{[]string{"--iac", "--publish-metrics", "x"}, "--publish-metrics audits the account's groups: it does not go with --iac"},
		{[]string{"--iac", "--fail-if-behind", "30d", "x"}, "--fail-if-behind audits the account's groups"},
		{[]string{"--iac", "-o", "yaml", "x"}, `invalid argument "yaml" for "-o, --output" flag: want table, wide, json or csv`},
		{[]string{"--iac", "/nonexistent/infra"}, "reading /nonexistent/infra: stat /nonexistent/infra: no such file or directory"},
	} {
		t.Run(tc.args[0]+" "+tc.want, func(t *testing.T) {
			a := auditFleet(t)
			res := runAudit(t, a, tc.args...)
			require.ErrorContains(t, res.err, tc.want)
			require.Empty(t, a.Calls())
		})
	}
}
