package config

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func valid() Config {
	c := Default()
	c.QueueURL = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent"
	c.Table, c.Region, c.OwnerID = "patch-agent", "eu-west-1", "replica-a"
	return c
}

func TestValidateAcceptsAGoodConfiguration(t *testing.T) {
	require.NoError(t, valid().Validate())
}

func TestValidateNamesEveryProblem(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"region not a region", func(c *Config) { c.Region = "not a region" }, "is not an AWS region name"},
		{"table name with bad chars", func(c *Config) { c.Table = "bad table!" }, "is not a DynamoDB table name"},
		{"queue in another region", func(c *Config) { c.Region = "us-east-1" }, "names a queue in eu-west-1 but --region is us-east-1"},
		{"malformed queue URL", func(c *Config) { c.QueueURL = "patch-agent" }, "is not a queue URL"},
		{"malformed wake-up queue URL", func(c *Config) { c.WakeUpQueueURL = "patch-agent-wake-up" }, "--wake-up-queue-url \"patch-agent-wake-up\" is not a queue URL"},
		{"wake-up queue is the main queue", func(c *Config) { c.WakeUpQueueURL = c.QueueURL }, "--wake-up-queue-url is --queue-url"},
		{"upper-case log level is fine", func(c *Config) { c.LogLevel = "DEBUG" }, ""},
		{"unknown log level", func(c *Config) { c.LogLevel = "loud" }, "want debug, info, warn or error"},
		{"empty owner", func(c *Config) { c.OwnerID = "" }, "--owner-id is empty"},
		{"zero reconcile interval", func(c *Config) { c.ReconcileInterval = 0 }, "--reconcile-interval must be positive"},
		{"C20 allowed AMI owners", func(c *Config) { c.AllowedAMIOwners = "444455556666, amazon,aws-marketplace" }, ""},
		{"C20 allowed AMI owner not an account", func(c *Config) { c.AllowedAMIOwners = "4444,amazon" }, `--allowed-ami-owners (or PATCH_AGENT_ALLOWED_AMI_OWNERS): "4444": want 12-digit AWS account ids`},
		{"default lease TTL is 2m", func(c *Config) { require.Equal(t, 2*time.Minute, c.LeaseTTL) }, ""},
		{"lease TTL of 10s is the minimum", func(c *Config) { c.LeaseTTL = 10 * time.Second }, ""},
		{"lease TTL below 10s", func(c *Config) { c.LeaseTTL = 9 * time.Second }, "--lease-ttl 9s is below 10s"},
		{"zero lease TTL", func(c *Config) { c.LeaseTTL = 0 }, "--lease-ttl 0s is below 10s"},
		{"default history retention is 90 days", func(c *Config) { require.Equal(t, 90*24*time.Hour, c.HistoryRetention) }, ""},
		{"history retention 0 keeps records forever", func(c *Config) { c.HistoryRetention = 0 }, ""},
		{"history retention of 14 days is the minimum", func(c *Config) { c.HistoryRetention = 14 * 24 * time.Hour }, ""},
		{"history retention below 14 days", func(c *Config) { c.HistoryRetention = 24 * time.Hour }, "--history-retention: retention 24h0m0s: want 0 (keep forever) or at least 336h0m0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestLeaseTTLDefaultsFromTheEnvironment(t *testing.T) {
	t.Setenv(EnvLeaseTTL, "45s")
	require.Equal(t, 45*time.Second, Default().LeaseTTL)

	t.Setenv(EnvLeaseTTL, "two minutes")
	c := valid()
	require.ErrorContains(t, c.Validate(), `PATCH_AGENT_LEASE_TTL "two minutes" (the default of --lease-ttl) is not a duration`)
}

func TestStartUpLogShowsDurationsAsText(t *testing.T) {
	c := valid()
	c.ReconcileInterval = 15 * time.Second
	b, err := json.Marshal(c)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "15s", m["reconcileInterval"])
	require.Equal(t, "eu-west-1", m["region"])
}

func TestC20AllowedAMIOwnersDefaultsFromTheEnvironment(t *testing.T) {
	t.Setenv(EnvAllowedAMIOwners, "444455556666,aws-marketplace")
	require.Equal(t, []string{"444455556666", "aws-marketplace"}, Default().AMIOwners())
}

// TestReconcileIntervalIsTheSafetyPollWithWakeUpEventsAndTheOldPollWithout: with wake-up
// events (the default) the reconcile interval defaults to 2 minutes; --wake-up-events=false brings back the
// 15 s poll unless --reconcile-interval is given.
func TestReconcileIntervalIsTheSafetyPollWithWakeUpEventsAndTheOldPollWithout(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want time.Duration
	}{
		{"default: events, 2m safety poll", nil, 2 * time.Minute},
		{"without events: 15s", []string{"--wake-up-events=false"}, 15 * time.Second},
		{"without events, interval given", []string{"--wake-up-events=false", "--reconcile-interval=40s"}, 40 * time.Second},
		{"events, interval given", []string{"--reconcile-interval=5m"}, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
			c.Bind(fs)
			require.NoError(t, fs.Parse(tc.args))
			c.ResolveDefaults(fs)
			require.Equal(t, tc.want, c.ReconcileInterval)
		})
	}
}

// Most run flags (--workers, --rate-limit, --cluster-budget, --history-retention ...) have no environment
// default, so README lists the ones that do rather than claiming every flag has one: each environment variable
// is the default of its flag, named in that flag's --help as "(env NAME)", and listed in README; no other
// flag's help names a variable, and README makes no claim about every flag.
func TestEnvironmentDefaultsAreTheOnesTheHelpAndTheReadmeName(t *testing.T) {
	vars := []struct{ env, flag, value string }{
		{EnvQueueURL, "queue-url", "https://sqs.eu-west-1.amazonaws.com/111122223333/q"},
		{EnvWakeUpQueueURL, "wake-up-queue-url", "https://sqs.eu-west-1.amazonaws.com/111122223333/q-wake-up"},
		{EnvTable, "table", "t1"},
		{EnvRegion, "region", "eu-west-1"},
		{EnvLogLevel, "log-level", "debug"},
		{EnvAllowedAMIOwners, "allowed-ami-owners", "123456789012"},
		{EnvWakeUpEvents, "wake-up-events", "false"},
		{EnvLeaseTTL, "lease-ttl", "45s"},
		{EnvHealthTimeout, "health-timeout", "25m0s"},
		{EnvDrainTimeout, "drain-timeout", "45m0s"},
		{EnvClusterBudget, "cluster-budget", "3"},
	}
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	require.False(t, strings.Contains(string(readme), "Every flag has an environment default"), "README claims it of every flag")
	named := map[string]string{}
	for _, v := range vars {
		t.Setenv(v.env, v.value)
		named[v.flag] = v.env
		require.True(t, strings.Contains(string(readme), "`"+v.env+"`"), "README lists %s", v.env)
	}
	c := Default()
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	c.Bind(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		env, ok := named[f.Name]
		if !ok {
			require.NotContains(t, f.Usage, "(env ", "--%s names no environment variable it does not read", f.Name)
			return
		}
		require.Contains(t, f.Usage, "(env "+env+")", "--%s names its environment variable", f.Name)
	})
	for _, v := range vars {
		f := fs.Lookup(v.flag)
		require.NotNil(t, f, v.flag)
		want := v.value
		if v.flag == "lease-ttl" {
			want = (45 * time.Second).String()
		}
		require.Equal(t, want, f.DefValue, "%s is the default of --%s", v.env, v.flag)
	}
}
