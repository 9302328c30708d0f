package runcmd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// pacedSQS makes the simulated queue's long polls take a moment, as SQS's do, instead of answering at once.
type pacedSQS struct{ awsapi.SQS }

func (p pacedSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if in.WaitTimeSeconds > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return p.SQS.ReceiveMessage(ctx, in, o...)
}

// lazyEventBridge sends to the world's simulated EventBridge once the world exists.
type lazyEventBridge struct{ w **testworld.World }

func (l lazyEventBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, o ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return (*l.w).Account.EventBridge().PutEvents(ctx, in, o...)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestRunServesHealthAndMetricsAndFlushesWhenStopped(t *testing.T) {
	cfg := config.Default()
	cfg.HealthAddr, cfg.Prometheus, cfg.MetricsInterval, cfg.ReconcileInterval = freeAddr(t), true, time.Hour, 5*time.Second
	// The observability is built before the world (the agent takes its observer), then set on the world's
	// clock.
	var w *testworld.World
	obs := newObservability(cfg, zap.NewNop(), lazyEventBridge{&w}, nil)
	spec := testworld.DemoSpec()
	spec.Wrap = func(c agent.Clients) agent.Clients { c.SQS = pacedSQS{c.SQS}; return c }
	spec.Observer = obs.observer
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	obs.clock, obs.registry.Clock = w.Account.Clock(), w.Account.Clock()
	w.Account.PutParameter(testworld.Parameter, testworld.ImageB) // the agent's first tick detects it

	ok := func(context.Context) error { return nil }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- obs.run(ctx, w.Agent, w.Account.CloudWatch(), map[string]health.Check{"queue": ok, "table": ok})
	}()

	base := "http://" + cfg.HealthAddr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var rd health.Readiness
		return json.NewDecoder(resp.Body).Decode(&rd) == nil && resp.StatusCode == http.StatusOK && rd.Ready
	}, 10*time.Second, 20*time.Millisecond, "ready after the first reconcile tick")
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), `patch_agent_group_instances{group="demo-ecs-asg",platform="ecs"} 3`)
	require.Contains(t, string(body), `patch_agent_rollout_in_progress{group="demo-ecs-asg",platform="ecs"} 1`)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop")
	}
	var heartbeat bool
	for _, m := range w.Account.PublishedMetrics() {
		heartbeat = heartbeat || m.Namespace == metrics.Namespace && m.Name == metrics.AgentHeartbeat
	}
	require.True(t, heartbeat, "metrics published once more on shutdown")
	started := false
	for _, e := range w.Account.PublishedEvents() {
		started = started || e.DetailType == notify.DetailTypeRollout &&
			strings.Contains(e.Detail, `"event":"started"`) && strings.Contains(e.Detail, `"group":"`+testworld.GroupName+`"`)
	}
	require.True(t, started, "the rollout's start was sent on shutdown")
	_, err = net.DialTimeout("tcp", cfg.HealthAddr, 200*time.Millisecond)
	require.Error(t, err, "the health server stopped")
}
