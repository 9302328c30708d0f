//go:build !nodemo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/audit/fleet"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/orgcmd"
	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/org"
)

// useOrganizationDemo points the organization-wide forms at the organization demo's world.
func useOrganizationDemo(t *testing.T) {
	t.Helper()
	w, err := demo.OrganizationWorld()
	require.NoError(t, err)
	saved := orgcmd.OrgEnvironment
	t.Cleanup(func() { orgcmd.OrgEnvironment = saved })
	orgcmd.OrgEnvironment = orgcmd.OrgEnv{Clock: testingclock.NewFakeClock(fleet.Start), Connect: func(_ context.Context, _ string, _ []string, role, ext string) (awsapi.Organizations, org.Connector, error) {
		return w.Org, w.Connector(role, ext), nil
	}}
}

func execRoot(t *testing.T, args ...string) result {
	t.Helper()
	cmd := newRootCommand()
	var stdout, stderr bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	err := cmd.ExecuteContext(context.Background())
	return result{stdout: stdout.String(), stderr: stderr.String(), err: err}
}

func TestOrganizationAuditIsOneReportWithAccountAndRegionColumns(t *testing.T) {
	useOrganizationDemo(t)
	res := execRoot(t, "audit", "--organization", "--region", "us-east-1", "-o", "json")
	require.ErrorContains(t, res.err, "1 of 3 account-regions could not be audited", "exit status 1: the sandbox account could not be audited")
	var exit cli.ExitError
	require.False(t, errors.As(res.err, &exit))
	var doc struct {
		SchemaVersion int                `json:"schemaVersion"`
		Targets       []org.TargetResult `json:"targets"`
		Groups        []map[string]any   `json:"groups"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Equal(t, 1, doc.SchemaVersion)
	require.Len(t, doc.Targets, 3)
	require.Contains(t, doc.Targets[0].Error, "AccessDenied")
	require.Len(t, doc.Groups, 2)
	require.Equal(t, demo.OrgPayments, doc.Groups[0]["account"])

	behind := execRoot(t, "audit", "--organization", "--region", "us-east-1", "--fail-if-behind", "90d")
	require.True(t, errors.As(behind.err, &exit))
	require.Equal(t, orgcmd.ExitBehind, exit.Code, "--fail-if-behind decides the exit status")
	require.ErrorContains(t, behind.err, demo.OrgPayments+" us-east-1 payments-ecs")
	require.ErrorContains(t, behind.err, "1 of 3 account-regions could not be audited")

	file := filepath.Join(t.TempDir(), "accounts")
	require.NoError(t, os.WriteFile(file, []byte(demo.OrgPayments+" payments\n"+demo.OrgSearch+"\n"), 0o644))
	ok := execRoot(t, "audit", "--accounts", file, "--region", "us-east-1", "-o", "csv")
	require.NoError(t, ok.err)
	require.Contains(t, ok.stdout, demo.OrgSearch+",,us-east-1,,search-ecs,")
}

func TestOrganizationPauseIsSafeToRunAgainAndResumeLiftsIt(t *testing.T) {
	useOrganizationDemo(t)
	args := []string{"--organization", "--ou", "ou-demo-workloads", "--region", "us-east-1"}
	first := execRoot(t, append([]string{"pause", "--reason", "INC-1", "--who", "alice"}, args...)...)
	require.ErrorContains(t, first.err, "1 of 3 account-regions failed")
	require.ErrorContains(t, first.err, "run the same command again")
	require.Contains(t, first.stdout, "pause by alice in 3 account-regions: failed 1, paused 2")
	require.Contains(t, first.stdout, "Undo with: patch-agent resume --region us-east-1 --organization --ou ou-demo-workloads\n",
		"the undo names the accounts the pause ran in")
	again := execRoot(t, append([]string{"pause", "--reason", "INC-1", "--who", "alice", "-o", "json"}, args...)...)
	var doc org.ChangeDocument
	require.NoError(t, json.Unmarshal([]byte(again.stdout), &doc))
	require.Equal(t, map[string]int{"failed": 1, org.AlreadyPaused: 2}, doc.Counts)

	st := execRoot(t, append([]string{"status", "--only", "holding"}, args...)...)
	require.Contains(t, st.stdout, "search-ecs")
	require.NotContains(t, st.stdout, "payments-ecs", "payments has no rollout record")

	res := execRoot(t, append([]string{"resume", "--who", "bob"}, args...)...)
	require.Contains(t, res.stdout, "resume by bob in 3 account-regions: failed 1, resumed 2")
	require.Contains(t, res.stdout, "bob lifted the pause of alice since", "the operator is named as the pause names its own")
}

func TestOrganizationPauseLongerThanThePauseInPlaceFailsAndAsksForReplace(t *testing.T) {
	useOrganizationDemo(t)
	args := []string{"--organization", "--ou", "ou-demo-workloads", "--region", "us-east-1", "--reason", "INC-1", "--who", "alice"}
	first := execRoot(t, append([]string{"pause", "--until", "1h"}, args...)...)
	require.ErrorContains(t, first.err, "1 of 3 account-regions failed", "the demo's sandbox account refuses the role")
	longer := execRoot(t, append([]string{"pause", "--until", "6h", "-o", "json"}, args...)...)
	require.ErrorContains(t, longer.err, "2 of 3 account-regions have a global pause that ends before the one asked for")
	require.ErrorContains(t, longer.err, "--replace")
	var doc org.ChangeDocument
	require.NoError(t, json.Unmarshal([]byte(longer.stdout), &doc))
	require.Equal(t, map[string]int{"failed": 1, org.PausedUntil: 2}, doc.Counts)
	shorter := execRoot(t, append([]string{"pause", "--until", "30m", "-o", "json"}, args...)...)
	require.ErrorContains(t, shorter.err, "1 of 3 account-regions failed")
	require.NotContains(t, shorter.err.Error(), "--replace", "a pause in place lasting longer is already-paused")
	replaced := execRoot(t, append([]string{"pause", "--until", "6h", "--replace", "-o", "json"}, args...)...)
	var after org.ChangeDocument
	require.NoError(t, json.Unmarshal([]byte(replaced.stdout), &after))
	require.Equal(t, map[string]int{"failed": 1, org.Replaced: 2}, after.Counts)
}

func TestOrganizationFlagsThatDoNotGoTogether(t *testing.T) {
	useOrganizationDemo(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "--ou", "ou-x", "--region", "us-east-1"}, "--ou needs --organization"},
		{[]string{"audit", "--organization", "--accounts", "f", "--region", "us-east-1"}, "exclusive"},
		{[]string{"audit", "--region", "us-east-1", "--region", "eu-west-1"}, "more than one region needs --organization"},
		{[]string{"audit", "--role-name", "x", "--region", "us-east-1"}, "--role-name needs --organization"},
		{[]string{"audit", "--organization", "--region", "us-east-1", "--publish-metrics"}, "--publish-metrics publishes to the CloudWatch of the credentials' account"},
		{[]string{"status", "--organization", "--region", "us-east-1", "--table", "t"}, "--table names one account's resource"},
		{[]string{"status", "--organization", "--region", "us-east-1", "--only", "busy"}, `--only "busy"`},
		{[]string{"status", "--table", "t", "--only", "halted"}, "--only needs --organization"},
		{[]string{"pause", "--organization", "--region", "us-east-1", "--reason", "r", "--who", "a", "--group", "g"}, "--group names one account's group: with --organization or --accounts pause and resume act on the global pause"},
		{[]string{"resume", "--organization", "--region", "us-east-1", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{"resume", "--organization", "--region", "us-east-1", "--deployment", "a/b"}, "DeploymentName"},
		{[]string{"status", "--organization", "--region", "us-east-1", "--role-name", "arn:aws:iam::111122223333:role/patch-agent-operator"}, "is an ARN: give the role's name"},
		{[]string{"status", "--organization", "--region", "us-east-1", "--role-name", "ops//patch-agent-operator"}, "is not a role name"},
	} {
		res := execRoot(t, c.args...)
		require.ErrorContainsf(t, res.err, c.want, "%v", c.args)
	}
}

func TestOrganizationRunsARegionGivenTwiceOnce(t *testing.T) {
	useOrganizationDemo(t)
	res := execRoot(t, "status", "--organization", "--region", "us-east-1", "--region", "us-east-1", "-o", "json")
	var doc struct {
		Targets []org.TargetResult `json:"targets"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
	require.Len(t, doc.Targets, 3, "three accounts, one region")
}

func TestOrganizationWithoutRegionUsesTheProfilesRegion(t *testing.T) {
	useOrganizationDemo(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	require.NoError(t, os.WriteFile(cfg, []byte("[profile tooling]\nregion = us-east-1\n[profile bare]\noutput = json\n"), 0o600))
	t.Setenv("AWS_CONFIG_FILE", cfg)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_PROFILE", "")

	res := execRoot(t, "status", "--organization", "--profile", "tooling", "-o", "json")
	var doc struct {
		Targets []org.TargetResult `json:"targets"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), "%s %v", res.stdout, res.err)
	require.Len(t, doc.Targets, 3)
	for _, tg := range doc.Targets {
		require.Equal(t, "us-east-1", tg.Region)
	}

	bare := execRoot(t, "status", "--organization", "--profile", "bare")
	require.ErrorContains(t, bare.err, "--region (or AWS_REGION, or the region of the --profile) is required")
}

func TestMissingCredentialsSayWhatToSet(t *testing.T) {
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "credentials"))
	res := execRoot(t, "status", "--table", "patch-agent", "--region", "eu-west-1")
	require.ErrorContains(t, res.err, "unable to locate AWS credentials: pass --profile NAME (or set AWS_PROFILE)")
	require.NotContains(t, res.err.Error(), "failed to refresh cached credentials")

	res = execRoot(t, "audit", "--profile", "nope", "--region", "eu-west-1")
	require.ErrorContains(t, res.err, `AWS profile "nope" is in neither ~/.aws/config nor ~/.aws/credentials`)
}

// The StackSets walk-through of docs/deploy.md: every command across accounts carries the credentials and
// external id the first one (step 6) uses, since the role trusts only them; and StackSets' trusted access is
// activated before the delegated administrator is registered, which fails without it.
func TestOrganizationWalkThroughCommandsCarryTheSameProfileAndExternalID(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "1. **Delegate**")
	require.Positive(t, start, "the walk-through's first step")
	walk := doc[start:]
	if end := strings.Index(walk, "\n## "); end > 0 {
		walk = walk[:end]
	}
	joined := strings.ReplaceAll(walk, "\\\n", " ")
	commands := 0
	for _, line := range strings.Split(joined, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "patch-agent ") || !strings.Contains(line, "--accounts") {
			continue
		}
		commands++
		require.Contains(t, line, "--profile tooling", line)
		require.Contains(t, line, "--external-id patch-agent-7f3a", line)
	}
	require.GreaterOrEqual(t, commands, 5, "steps 6 and 8")
	activate := strings.Index(walk, "activate-organizations-access")
	register := strings.Index(walk, "register-delegated-administrator")
	require.True(t, activate >= 0 && activate < register, "trusted access is activated before the delegated administrator is registered")
}
