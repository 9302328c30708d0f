package events_test

import (
	"context"
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

// doneHandler completes every event it is handed (the agent deletes an ignored message at once) and counts them.
type doneHandler struct {
	mu    sync.Mutex
	kinds []events.Kind
}

func (h *doneHandler) Handle(_ context.Context, ev events.Event) (events.Disposition, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kinds = append(h.kinds, ev.Kind)
	return events.Done, nil
}

// A lifecycle action that is not as Auto Scaling writes it — members in camelCase from a custom forwarder, a
// test notification that also carries an action, a group name no group can have — is neither handed on (and
// ignored, so deleted) nor guessed at: it stays on the queue and, after maxReceiveCount receives, the redrive
// policy moves it to the dead-letter queue. Nothing is dropped.
func TestLifecycleActionsNotAsAutoScalingWritesThemReachTheDeadLetterQueue(t *testing.T) {
	const action = `"LifecycleHookName":"patch-agent-drain","EC2InstanceId":"i-0a1b2c3d4e5f60718","LifecycleActionToken":"5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13",` +
		`"LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"`
	bodies := []string{
		`{"lifecycleHookName":"patch-agent-drain","autoScalingGroupName":"ecs-prod","ec2InstanceId":"i-0a1b2c3d4e5f60718",` +
			`"lifecycleActionToken":"5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13","lifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`,
		`{"Event":"autoscaling:TEST_NOTIFICATION","AutoScalingGroupName":"ecs-prod",` + action + `}`,
		`{"AutoScalingGroupName":"g\u001b[2J\u001b[31mEVIL",` + action + `}`,
	}
	ctx := context.Background()
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	acct := sim.New(clk, sim.Options{})
	const maxReceiveCount = 3
	url := acct.CreateQueue("patch-agent", maxReceiveCount, "patch-agent-dlq")
	dlq := strings.Replace(url, "patch-agent", "patch-agent-dlq", 1)
	for _, b := range bodies {
		acct.SendMessage(url, b)
	}
	h := &doneHandler{}
	c := &events.Consumer{SQS: acct.SQS(), QueueURL: url, Handler: h, Clock: clk, Log: zap.NewNop(), Concurrency: 1,
		VisibilityTimeout: time.Minute}
	for range maxReceiveCount + 1 {
		_, err := c.PollOnce(ctx, 0)
		require.NoError(t, err)
		clk.Step(2 * time.Minute)
	}
	require.Empty(t, h.kinds, "never handed on")
	require.Equal(t, int64(len(bodies)*maxReceiveCount), c.Stats.Failed.Load(), "malformed at every receive")
	require.Empty(t, acct.QueueMessages(url))
	require.ElementsMatch(t, bodies, acct.QueueMessages(dlq), "every one is in the dead-letter queue")
}
