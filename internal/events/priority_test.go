package events_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// orderHandler records the kinds it was handed, in order, and holds lifecycle actions (a drain under way).
type orderHandler struct {
	mu    sync.Mutex
	kinds []events.Kind
}

func (h *orderHandler) Handle(_ context.Context, ev events.Event) (events.Disposition, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kinds = append(h.kinds, ev.Kind)
	if ev.Kind == events.KindLifecycleAction {
		return events.Hold, nil
	}
	return events.Done, nil
}

// TestLifecycleActionIsHandledBeforeABurstOfWakeUpsInOneReceive: nine wake-up events and
// one lifecycle action arrive in one receive, the action last; the action is handled first, within that
// receive, and on the next receive its heartbeat look (the held action) comes before the new wake-ups.
func TestLifecycleActionIsHandledBeforeABurstOfWakeUpsInOneReceive(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent", 5, "patch-agent-dlq")
	wake, err := os.ReadFile("testdata/instance-launch-successful.json")
	require.NoError(t, err)
	hook, err := os.ReadFile("testdata/asg-hook-direct-terminating.json")
	require.NoError(t, err)
	for range 9 {
		acct.SendMessage(url, string(wake))
	}
	acct.SendMessage(url, string(hook))

	h := &orderHandler{}
	c := &events.Consumer{SQS: acct.SQS(), QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop(), Concurrency: 1}
	n, err := c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 10, n, "one receive")
	require.Len(t, h.kinds, 10)
	require.Equal(t, events.KindLifecycleAction, h.kinds[0], "the lifecycle action is handled before the wake-ups: %v", h.kinds)
	require.Equal(t, int64(1), c.Stats.Held.Load())

	h.kinds = nil
	for range 3 {
		acct.SendMessage(url, string(wake))
	}
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []events.Kind{events.KindLifecycleAction, events.KindWakeUp, events.KindWakeUp, events.KindWakeUp}, h.kinds,
		"the held action's look (its heartbeat) comes before the new wake-ups")
	visible, _ := acct.QueueDepth(url)
	require.Zero(t, visible)
	require.Equal(t, 1, strings.Count(strings.Join(acct.QueueMessages(url), "\n"), "LifecycleActionToken"), "the held action stays on the queue")
}
