package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// TestRefreshLookTrace prints, for the 10-instance rollout by instance refresh with wake-up events (refreshSpec,
// memory store, the wake-ups on the agent's queue so that the trace names them), every step of the loop that made
// an AWS call other than SQS: the simulated time, the wake-up messages the step received (detail-type and what
// they name), the rollout's position after the step and the calls it made by operation
// (PATCH_AGENT_BENCH=1 go test ./internal/bench -run TestRefreshLookTrace -v). It is the "which wake-up caused
// each look" trace; it asserts nothing but the rollout's end.
func TestRefreshLookTrace(t *testing.T) {
	if os.Getenv("PATCH_AGENT_BENCH") == "" {
		t.Skip("measurements run with PATCH_AGENT_BENCH=1")
	}
	spec := refreshSpec(10, true)
	spec.WakeUpQueue = false
	lookTrace(t, 10, spec, 10*time.Hour)
}

// lookTrace rolls the group "roll" of spec (n instances, wake-up events) to ImageB within limit and logs each
// step that made an AWS call other than SQS.
func lookTrace(t *testing.T, n int, spec testworld.Spec, limit time.Duration) {
	ctx := context.Background()
	w, err := testworld.Build(spec)
	require.NoError(t, err)
	_, err = w.RunEvents(ctx, 30*time.Second, func() bool { return false })
	require.NoError(t, err)
	w.Account.ResetCalls()
	w.PublishAMI("/golden-ami/roll", testworld.ImageB)
	clk := w.Account.Clock()
	start := clk.Now()
	end := start.Add(limit)
	var b strings.Builder
	looks, same := 0, 0
	prev := map[string]int{}
	for clk.Now().Before(end) && w.Rollout(ctx, "roll").Phase != state.PhaseCompleted {
		msgs := summarize(w.Account.QueueMessages(w.QueueURL))
		next, err := w.Agent.Step(ctx)
		require.NoError(t, err)
		w.Checker.Check()
		cur := w.Account.Calls()
		var ops []string
		for op, c := range cur {
			if d := c - prev[op]; d > 0 && !strings.HasPrefix(op, "sqs:") {
				ops = append(ops, fmt.Sprintf("%s=%d", op[strings.Index(op, ":")+1:], d))
			}
		}
		prev = cur
		if len(ops) > 0 {
			sort.Strings(ops)
			r := w.Rollout(ctx, "roll")
			if cur["autoscaling:DescribeAutoScalingGroups"] > 0 {
				looks++
			}
			fmt.Fprintf(&b, "%7.1fs %-28s wakes=[%s]\n          %s\n", clk.Since(start).Seconds(), position(r), strings.Join(msgs, "; "), strings.Join(ops, " "))
		}
		if visible, _ := w.Account.QueueDepth(w.QueueURL); visible > 0 && same < 10 {
			same++
			continue
		}
		same = 0
		now := clk.Now()
		to := now.Add(20 * time.Second)
		if next.After(now) && next.Before(to) {
			to = next
		}
		if at, ok := w.Account.NextEventAt(); ok && at.After(now) && at.Before(to) {
			to = at
		}
		if !to.After(now) {
			to = now.Add(time.Millisecond)
		}
		w.Account.Advance(to.Sub(now))
		w.Checker.Check()
	}
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, "roll").Phase)
	require.Empty(t, w.Checker.Finish())
	t.Logf("calls by operation per instance: %v\nwake-ups sent: %v\n%s", perInstance(w.Account.Calls(), n), w.Account.WakeUpEventsSent(), b.String())
}

func position(r state.Rollout) string {
	if r.Current == nil {
		return string(r.Phase)
	}
	return fmt.Sprintf("%s/%s %s", r.Phase, r.Current.Step, r.Current.OldInstanceID)
}

func perInstance(m map[string]int, n int) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = float64(v) / float64(n)
	}
	return out
}

// summarize names each queued message by its detail-type and what it names.
func summarize(bodies []string) []string {
	var out []string
	for _, body := range bodies {
		var m struct {
			DetailType string         `json:"detail-type"`
			Detail     map[string]any `json:"detail"`
		}
		if json.Unmarshal([]byte(body), &m) != nil || m.DetailType == "" {
			out = append(out, "?")
			continue
		}
		s := m.DetailType
		for _, k := range []string{"EC2InstanceId", "instance-id", "ec2InstanceId", "state", "status", "runningTasksCount", "pendingTasksCount", "LifecycleTransition"} {
			if v, ok := m.Detail[k]; ok {
				s += fmt.Sprintf(" %s=%v", k, v)
			}
		}
		out = append(out, s)
	}
	return out
}
