package awsapi

import "context"

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
