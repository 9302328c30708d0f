package awsapi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// TestUrgentRequestGoesBeforeWaitingFleetReads: with the Auto Scaling bucket empty and three fleet-pass reads
// already waiting for it, a lifecycle action's heartbeat (an urgent request) gets the next token, one refill
// later, and the fleet reads get theirs only after it — one per refill (fake clock: no real waiting).
func TestUrgentRequestGoesBeforeWaitingFleetReads(t *testing.T) {
	for _, tc := range []struct {
		name   string
		urgent bool
		first  string
	}{
		{"a heartbeat takes the next token before the waiting fleet reads", true, "heartbeat"},
		{"an unmarked request queues with the fleet reads", false, "fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
			l := awsapi.NewLimiterWithClock(awsapi.RateLimits{awsapi.RateAutoScaling: {Rate: 1, Burst: 1}}, clk)
			ctx := context.Background()
			require.NoError(t, l.Wait(ctx, "autoscaling", false), "the burst")
			got := make(chan string, 4)
			for range 3 {
				go func() {
					if l.Wait(ctx, "autoscaling", false) == nil {
						got <- "fleet"
					}
				}()
			}
			require.Eventually(t, func() bool { return clk.Waiters() == 3 }, 10*time.Second, time.Millisecond, "the fleet reads wait")
			hb := ctx
			if tc.urgent {
				hb = awsapi.WithUrgent(ctx)
			}
			go func() {
				if l.Wait(hb, "autoscaling", true) == nil {
					got <- "heartbeat"
				}
			}()
			require.Eventually(t, func() bool { return clk.Waiters() == 4 }, 10*time.Second, time.Millisecond, "the heartbeat waits")
			clk.Step(time.Second) // one refill: one token
			first := <-got
			if tc.urgent {
				require.Equal(t, tc.first, first)
				select {
				case g := <-got:
					t.Fatalf("a second request (%s) went through on one token", g)
				case <-time.After(50 * time.Millisecond):
				}
				require.Equal(t, time.Second, l.Waited(true), "the heartbeat waited one refill")
				return
			}
			// Unmarked, it is one of four equal waiters on the one token: not ahead of the fleet by rule.
			require.Contains(t, []string{"fleet", "heartbeat"}, first)
			require.Zero(t, l.Waited(true), "no request took the urgent lane")
		})
	}
}

// TestUrgentRequestGivesUpItsReservationWithTheContext: an urgent request cancelled while it waits returns the
// context's error and hands its reserved token back to the fleet.
func TestUrgentRequestGivesUpItsReservationWithTheContext(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
	l := awsapi.NewLimiterWithClock(awsapi.RateLimits{awsapi.RateECS: {Rate: 1, Burst: 1}}, clk)
	require.NoError(t, l.Wait(context.Background(), "ecs", false))
	ctx, cancel := context.WithCancel(awsapi.WithUrgent(context.Background()))
	errc := make(chan error, 1)
	go func() { errc <- l.Wait(ctx, "ecs", false) }()
	require.Eventually(t, func() bool { return clk.Waiters() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	clk.Step(time.Second)
	require.NoError(t, l.Wait(context.Background(), "ecs", false), "the cancelled reservation's token went back to the bucket")
}

// TestRequestOfASpentPassBudgetIsNotSentUnlessUrgent: a fleet request whose context carries a spent pass budget
// (awsapi.WithPassBudget) is refused with ErrPassBudgetSpent before it takes a token, even with tokens in the
// bucket; one waiting for a token when the budget runs out gives up within the limiter's poll of the budget
// (20 ms of the fake clock) instead of at the next refill (10 s here); an urgent request (a reaction, a
// lifecycle action, a heartbeat) is never cut by a budget it carries.
func TestRequestOfASpentPassBudgetIsNotSentUnlessUrgent(t *testing.T) {
	for _, tc := range []struct {
		name       string
		urgent     bool
		spentFirst bool // the budget is spent before the request
		wantCut    bool
	}{
		{"a fleet request of a spent budget is not sent, tokens or not", false, true, true},
		{"a fleet request waiting for a token gives up when the budget runs out", false, false, true},
		{"an urgent request of a spent budget is sent", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Unix(1_700_000_000, 0))
			l := awsapi.NewLimiterWithClock(awsapi.RateLimits{awsapi.RateEC2Mutating: {Rate: 0.1, Burst: 1}}, clk)
			var mu sync.Mutex
			spent := tc.spentFirst
			ctx := awsapi.WithPassBudget(context.Background(), func() bool { mu.Lock(); defer mu.Unlock(); return spent })
			if tc.urgent {
				ctx = awsapi.WithUrgent(ctx)
			}
			if tc.spentFirst {
				err := l.Wait(ctx, "ec2", true)
				if !tc.wantCut {
					require.NoError(t, err, "sent on the bucket's token")
					return
				}
				require.ErrorIs(t, err, awsapi.ErrPassBudgetSpent)
				require.True(t, awsapi.IsPassBudgetSpent(err))
				require.NoError(t, l.Wait(context.Background(), "ec2", true), "the refused request took no token")
				return
			}
			require.NoError(t, l.Wait(context.Background(), "ec2", true), "the burst")
			errc := make(chan error, 1)
			go func() { errc <- l.Wait(ctx, "ec2", true) }()
			require.Eventually(t, func() bool { return clk.Waiters() == 1 }, 10*time.Second, time.Millisecond, "it waits for a token")
			mu.Lock()
			spent = true
			mu.Unlock()
			clk.Step(20 * time.Millisecond)
			select {
			case err := <-errc:
				require.ErrorIs(t, err, awsapi.ErrPassBudgetSpent)
			case <-time.After(5 * time.Second):
				t.Fatal("the request kept waiting for a token after its pass budget ran out")
			}
		})
	}
}
