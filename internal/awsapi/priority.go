package awsapi

import (
	"context"
	"errors"
	"time"
)

// urgentKey marks a context whose AWS requests take the Limiter's priority lane.
type urgentKey struct{}

// WithUrgent returns ctx marked so that its AWS requests go before the fleet's in the client-side rate limiter
// (Limiter.Wait): the work of a reaction — a golden-AMI parameter change for its groups, a lifecycle action and
// its heartbeats (RecordLifecycleActionHeartbeat must reach Auto Scaling before the heartbeat timeout, Amazon
// EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling lifecycle hooks") — whose latency a user or a
// deadline sees, where a whole-fleet pass only needs its throughput.
func WithUrgent(ctx context.Context) context.Context {
	return context.WithValue(ctx, urgentKey{}, true)
}

// IsUrgent tells whether ctx was marked by WithUrgent.
func IsUrgent(ctx context.Context) bool {
	v, _ := ctx.Value(urgentKey{}).(bool)
	return v
}

// yieldKey marks a context whose fleet-lane requests give way once a pass's time budget is spent.
type yieldKey struct{}

// ErrPassBudgetSpent is what Limiter.Wait returns, without sending the request, for a request of a context
// marked WithPassBudget once that budget is spent (IsPassBudgetSpent): the step stops at this call as at a
// throttled one, and its target is looked at first in the next pass (internal/agent passbudget.go).
var ErrPassBudgetSpent = errors.New("the pass's time budget is spent: request not sent, the target is looked at first in the next pass")

// yieldPoll bounds each of a marked fleet request's sleeps for a token, so that a budget spent while it
// waits ends the wait within yieldPoll (one refill of the EC2 mutating bucket at 2.5 per second is 400 ms).
const yieldPoll = 20 * time.Millisecond

// WithPassBudget returns ctx marked so that each of its fleet-lane requests first asks spent (a pass's time
// budget, safe for concurrent use) and, once it answers true, fails with ErrPassBudgetSpent instead of
// waiting for a token or being sent: a target still in flight when its pass's budget ends lets the pass end
// within one call's latency instead of holding it open for its whole step. Urgent requests (WithUrgent)
// ignore the mark: a reaction, a lifecycle action and its heartbeats are never cut.
func WithPassBudget(ctx context.Context, spent func() bool) context.Context {
	return context.WithValue(ctx, yieldKey{}, spent)
}

// budgetSpent tells whether ctx carries a pass budget (WithPassBudget) that is spent.
func budgetSpent(ctx context.Context) (marked, spent bool) {
	f, ok := ctx.Value(yieldKey{}).(func() bool)
	if !ok || f == nil {
		return false, false
	}
	return true, f()
}
