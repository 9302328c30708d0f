package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/health"
)

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

func ok(context.Context) error { return nil }

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func TestHealthzAnswersWhateverTheDependencies(t *testing.T) {
	s := &health.Server{Checks: map[string]health.Check{"queue": func(context.Context) error { return errors.New("down") }}}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
}

func TestReadyz(t *testing.T) {
	clk := testingclock.NewFakePassiveClock(t0)
	fail := func(context.Context) error {
		return errors.New("AccessDenied: not authorized to perform sqs:GetQueueAttributes")
	}
	for _, tc := range []struct {
		name      string
		queue     health.Check
		lastTick  time.Time
		ready     bool
		failing   string
		errorPart string
	}{
		{"ready when both checks pass and the loop ticked", ok, t0.Add(-20 * time.Second), true, "", ""},
		{"not ready when the queue is unreachable", fail, t0.Add(-5 * time.Second), false, "queue", "sqs:GetQueueAttributes"},
		{"not ready when the loop is stale", ok, t0.Add(-46 * time.Second), false, health.LoopCheckName, "more than 3 intervals"},
		{"not ready before the first tick", ok, time.Time{}, false, health.LoopCheckName, "no reconcile tick"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &health.Server{Checks: map[string]health.Check{"queue": tc.queue, "table": ok},
				LastTick: func() time.Time { return tc.lastTick }, Interval: 15 * time.Second, Clock: clk}
			srv := httptest.NewServer(s.Handler())
			defer srv.Close()
			code, body := get(t, srv.URL+"/readyz")
			var rd health.Readiness
			require.NoError(t, json.Unmarshal([]byte(body), &rd), body)
			require.Equal(t, tc.ready, rd.Ready)
			require.Len(t, rd.Checks, 3)
			if tc.ready {
				require.Equal(t, http.StatusOK, code)
				return
			}
			require.Equal(t, http.StatusServiceUnavailable, code)
			for _, c := range rd.Checks {
				require.Equal(t, c.Name != tc.failing, c.OK, c.Name)
				if c.Name == tc.failing {
					require.Contains(t, c.Error, tc.errorPart)
				}
			}
		})
	}
}

func TestAHangingCheckIsCutOffByItsTimeout(t *testing.T) {
	hang := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	s := &health.Server{Checks: map[string]health.Check{"table": hang, "queue": ok}, CheckTimeout: 50 * time.Millisecond}
	began := time.Now()
	rd := s.Ready(context.Background())
	require.Less(t, time.Since(began), 2*time.Second)
	require.False(t, rd.Ready)
	require.Equal(t, []health.CheckResult{{Name: "queue", OK: true}, {Name: "table", Error: context.DeadlineExceeded.Error()}}, rd.Checks)
}

func TestMetricsAreServedOnlyWhenConfigured(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("patch_agent_heartbeat 1\n")) })
	with := httptest.NewServer((&health.Server{Metrics: metrics}).Handler())
	defer with.Close()
	code, body := get(t, with.URL+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "patch_agent_heartbeat 1\n", body)

	without := httptest.NewServer((&health.Server{}).Handler())
	defer without.Close()
	code, _ = get(t, without.URL+"/metrics")
	require.Equal(t, http.StatusNotFound, code)
}

func TestServeShutsDownGracefullyOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	release := make(chan struct{})
	var inFlight atomic.Bool
	slow := func(context.Context) error { inFlight.Store(true); <-release; return nil }
	s := &health.Server{Checks: map[string]health.Check{"slow": slow}, CheckTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	url := "http://" + ln.Addr().String()
	answered := make(chan int, 1)
	go func() {
		resp, err := http.Get(url + "/readyz")
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	require.Eventually(t, inFlight.Load, 5*time.Second, time.Millisecond)
	cancel()
	time.Sleep(50 * time.Millisecond)
	close(release)
	require.Equal(t, http.StatusOK, <-answered, "the request in flight finished")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	_, err = net.DialTimeout("tcp", ln.Addr().String(), 200*time.Millisecond)
	require.Error(t, err, "the port is closed")
}

func TestListenAndServeOnATakenPortFailsClearly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = (&health.Server{}).ListenAndServe(context.Background(), ln.Addr().String())
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "health server listening on "+ln.Addr().String()), err.Error())
}
