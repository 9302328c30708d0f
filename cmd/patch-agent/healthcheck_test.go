//go:build !nodemo

package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/health"
)

// withoutAWSCredentials empties every source of the default credential chain (environment, shared files,
// container endpoint, web identity, IMDS).
func withoutAWSCredentials(t *testing.T) {
	none := filepath.Join(t.TempDir(), "none")
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_WEB_IDENTITY_TOKEN_FILE": "",
		"AWS_ENDPOINT_URL": ""} {
		t.Setenv(k, v)
	}
}

var runArgs = []string{"--region", "eu-west-1", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent",
	"--table", "patch-agent", "--health-addr", "", "--metrics-interval", "0"}

// `run` without credentials stops at once naming the credentials, instead of retrying with no clear first
// error, and --check prints every check with the same reason.
func TestRunWithoutCredentialsStopsWithOneClearReason(t *testing.T) {
	withoutAWSCredentials(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res := runCtx(t, ctx, "", append([]string{"run", "--check"}, runArgs...)...)
	requireExitCode(t, res.err, 1)
	require.ErrorContains(t, res.err, "check failed: credentials: no AWS credentials found")
	require.Contains(t, res.stdout, "  ok       region            eu-west-1")
	require.Contains(t, res.stdout, "  FAILED   credentials")
	require.Contains(t, res.stdout, "  skipped  queue")
	require.Contains(t, res.stdout, "  skipped  read permissions")

	res = runCtx(t, ctx, "", append([]string{"run"}, runArgs...)...)
	require.ErrorContains(t, res.err, "start-up check failed: credentials: no AWS credentials found")
	require.ErrorContains(t, res.err, "patch-agent run --check prints every check")
	require.NoError(t, ctx.Err(), "run stopped by itself, it did not retry until the deadline")
}

// With credentials but a queue that does not answer, the reason names the queue and the checks after it are
// skipped.
func TestRunCheckNamesTheQueueItCannotReach(t *testing.T) {
	withoutAWSCredentials(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE12")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Setenv("AWS_ENDPOINT_URL", "http://"+ln.Addr().String())
	require.NoError(t, ln.Close()) // nothing listens: connection refused

	res := run(t, append([]string{"run", "--check"}, runArgs...)...)
	requireExitCode(t, res.err, 1)
	require.ErrorContains(t, res.err, "check failed: queue: GetQueueAttributes of https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent")
	require.Contains(t, res.stdout, "  ok       credentials       access key AKIA************LE12 from EnvConfigCredentials")
	require.Contains(t, res.stdout, "  skipped  table")
}

func TestHealthcheckReportsTheFirstFailingReadinessCheck(t *testing.T) {
	failing := func(context.Context) error { return context.DeadlineExceeded }
	ok := func(context.Context) error { return nil }
	cases := []struct {
		name    string
		checks  map[string]health.Check
		wantErr string
		wantOut []string
	}{
		{"ready", map[string]health.Check{"queue": ok, "table": ok}, "", []string{"  ok       queue", "  ok       table", "ready"}},
		{"the table is unreachable", map[string]health.Check{"queue": ok, "table": failing}, "not healthy: table: context deadline exceeded",
			[]string{"  ok       queue", "  FAILED   table: context deadline exceeded"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer((&health.Server{Checks: c.checks}).Handler())
			defer srv.Close()
			res := run(t, "healthcheck", "--addr", strings.TrimPrefix(srv.URL, "http://"))
			for _, w := range c.wantOut {
				require.Contains(t, res.stdout, w)
			}
			if c.wantErr == "" {
				require.NoError(t, res.err)
				return
			}
			requireExitCode(t, res.err, 1)
			require.EqualError(t, res.err, c.wantErr)
		})
	}

	t.Run("no agent answers", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		res := run(t, "healthcheck", "--addr", addr, "--timeout", "2s")
		requireExitCode(t, res.err, 1)
		require.ErrorContains(t, res.err, "not healthy: the agent does not answer on http://"+addr+"/readyz")
	})
	t.Run("an empty host asks 127.0.0.1", func(t *testing.T) {
		var got string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r.URL.Path
			_, _ = w.Write([]byte(`{"ready":true,"checks":[]}`))
		}))
		defer srv.Close()
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
		res := run(t, "healthcheck", "--addr", ":"+port)
		require.NoError(t, res.err)
		require.Equal(t, "/readyz", got)
	})
}

// TestRunCheckHeadingNamesEveryQueueItChecks: the line above the checks of `run --check` names the wake-up
// queue beside the main queue when --wake-up-queue-url is set, since the check reads both.
func TestRunCheckHeadingNamesEveryQueueItChecks(t *testing.T) {
	const main, wake = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent", "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent-wake-up"
	withoutAWSCredentials(t)
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"main queue only", []string{"--wake-up-queue-url", ""}, "checks of region eu-west-1, queue " + main + ", table patch-agent:"},
		{"with a wake-up queue", []string{"--wake-up-queue-url", wake}, "checks of region eu-west-1, queue " + main + ", wake-up queue " + wake + ", table patch-agent:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, append(append([]string{"run", "--check"}, runArgs...), tc.extra...)...)
			requireExitCode(t, res.err, 1) // no credentials: the heading is printed before the checks run
			lines := strings.Split(res.stdout, "\n")
			require.GreaterOrEqual(t, len(lines), 2, res.stdout)
			require.Equal(t, tc.want, lines[1], "the line after the version line")
		})
	}
}
