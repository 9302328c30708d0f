package orgcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// update (-update) rewrites testdata/*.golden from the current output.
var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// readCall matches the operations a read-only command may make (sim.Account.Calls keys).
var readCall = regexp.MustCompile(`^[a-z0-9]+:(Describe|List|Get)[A-Za-z]+$`)

// simAuditEnv runs the audit command on a simulated account.
func simAuditEnv(a *sim.Account) auditEnv {
	return auditEnv{clock: a.Clock(), connect: func(context.Context, string) (audit.Clients, awsapi.MetricData, string, error) {
		return fleet.Clients(a), a.CloudWatch(), a.Options().Region, nil
	}}
}

// runAudit executes `patch-agent audit args...` on the account.
func runAudit(t *testing.T, a *sim.Account, args ...string) result {
	t.Helper()
	cmd := newAuditCommandWith(simAuditEnv(a))
	var stdout, stderr bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cli.MarkUsageErrors(cmd)
	err := cmd.ExecuteContext(context.Background())
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func auditFleet(t *testing.T) *sim.Account {
	t.Helper()
	a, err := demo.AuditFleet()
	require.NoError(t, err)
	a.ResetCalls()
	return a
}

func TestAuditMakesNoMutatingCall(t *testing.T) {
	for _, output := range audit.Formats() {
		t.Run(output, func(t *testing.T) {
			a := auditFleet(t)
			res := runAudit(t, a, "--output", output)
			require.NoError(t, res.err, res.stderr)
			calls := a.Calls()
			require.NotZero(t, calls["autoscaling:DescribeAutoScalingGroups"])
			for op := range calls {
				require.Regexp(t, readCall, op, "only Describe*, List* and Get* calls")
			}
		})
	}
}

func TestAuditPublishMetricsIsItsOnlyWrite(t *testing.T) {
	a := auditFleet(t)
	res := runAudit(t, a, "--publish-metrics", "--output", "csv")
	require.NoError(t, res.err, res.stderr)
	require.Contains(t, res.stderr, "published 14 metrics to CloudWatch namespace PatchAgent/Audit")
	for op := range a.Calls() {
		if op != "cloudwatch:PutMetricData" {
			require.Regexp(t, readCall, op)
		}
	}
	require.Equal(t, 1, a.Calls()["cloudwatch:PutMetricData"])
	got := map[string]float64{}
	for _, m := range a.PublishedMetrics() {
		got[m.Name+"/"+m.Dimensions[audit.DimensionGroup]] = m.Value
	}
	require.Equal(t, 422.0, got["DaysBehind/legacy-ecs"])
	require.Equal(t, 3.0, got["OutdatedInstances/orders-ecs"])
	require.NotContains(t, got, "OutdatedInstances/bastion", "a group without a recommended AMI has no metric")
}

func TestAuditFailIfBehindExitsWithStatus3(t *testing.T) {
	res := runAudit(t, auditFleet(t), "--fail-if-behind", "100d", "-o", "json")
	var ee cli.ExitError
	require.True(t, errors.As(res.err, &ee), res.err)
	require.Equal(t, 3, ee.Code, "a finding is told apart from a usage error (2)")
	require.Equal(t, 3, cli.Report(io.Discard, res.err))
	require.EqualError(t, res.err, "2 group(s) behind the recommended AMI by more than 100d: legacy-ecs, orders-ecs")
	var r audit.Report
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &r), "the report is printed before the exit")
	require.Len(t, r.Groups, 8)
}

func TestAuditFailIfBehindPassesUnderTheThreshold(t *testing.T) {
	res := runAudit(t, auditFleet(t), "--fail-if-behind", "12000h") // 500 days: legacy-ecs, the most behind, is 422
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "legacy-ecs")
}

func TestAuditRejectsMalformedFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fail-if-behind", "soon"}, `invalid argument "soon" for "--fail-if-behind" flag: "soon" is not a number of days (like 30d) or a duration (like 720h)`},
		{[]string{"--fail-if-behind", "-3d"}, `invalid argument "-3d" for "--fail-if-behind" flag`},
		{[]string{"--fail-if-behind", ""}, `invalid argument "" for "--fail-if-behind" flag`},
		{[]string{"--output", "yaml"}, `invalid argument "yaml" for "-o, --output" flag: want table, wide, json or csv`},
		{[]string{"--publish-metrics=maybe"}, `invalid argument "maybe" for "--publish-metrics" flag`},
		{[]string{"extra"}, `unknown command "extra"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			a := auditFleet(t)
			res := runAudit(t, a, tc.args...)
			require.ErrorContains(t, res.err, tc.want)
			var ee cli.ExitError
			require.False(t, errors.As(res.err, &ee), "a usage error carries no exit status of its own")
			require.Equal(t, cli.ExitUsage, cli.Report(io.Discard, res.err))
			require.Empty(t, a.Calls(), "nothing is read before the flags are valid")
		})
	}
}

// result is what one run of a command printed and returned.
type result struct {
	stdout, stderr string
	err            error
}

// goldenFile requires got to be the content of the golden file at path, or writes it there under -update.
func goldenFile(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/cli/orgcmd -run Audit -update to create it")
	require.Equal(t, string(want), got)
}
