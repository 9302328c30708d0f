package events_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// sentAtHandler records the SentAt of every lifecycle action it is handed and holds them (a drain under way).
type sentAtHandler struct {
	mu   sync.Mutex
	sent []time.Time
}

func (h *sentAtHandler) Handle(_ context.Context, ev events.Event) (events.Disposition, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Kind == events.KindLifecycleAction {
		h.sent = append(h.sent, ev.Lifecycle.SentAt)
		return events.Hold, nil
	}
	return events.Done, nil
}

// Field case C4: a lifecycle action that comes by message carries when SQS accepted the message (its
// SentTimestamp system attribute), on the first handling and on every later look at the held message, so the
// first heartbeat is counted from the action's start, not from a late receive. A parsed message alone (no
// receive) has none.
func TestC4LifecycleActionCarriesItsMessagesSentTimestamp(t *testing.T) {
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	url := acct.CreateQueue("patch-agent", 5, "patch-agent-dlq")
	hook, err := os.ReadFile("testdata/asg-hook-direct-terminating.json")
	require.NoError(t, err)
	sent := clk.Now()
	acct.SendMessage(url, string(hook))
	clk.Step(90 * time.Second) // received late: a backlog, a restart

	h := &sentAtHandler{}
	c := &events.Consumer{SQS: acct.SQS(), QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop(), Concurrency: 1}
	_, err = c.PollOnce(ctx, 0)
	require.NoError(t, err)
	clk.Step(10 * time.Second)
	_, err = c.PollOnce(ctx, 0) // the held message looked at again
	require.NoError(t, err)
	require.Len(t, h.sent, 2)
	for _, at := range h.sent {
		require.True(t, at.Equal(sent), "SentAt %s, sent at %s", at, sent)
	}

	ev, err := events.Parse(hook)
	require.NoError(t, err)
	require.True(t, ev.Lifecycle.SentAt.IsZero(), "the body alone says nothing of when it was sent")
}
