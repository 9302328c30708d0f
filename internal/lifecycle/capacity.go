package lifecycle

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/state"
)

// capacityPrefix starts the Reason of a rollout whose replacement could not launch for lack of EC2 capacity.
const capacityPrefix = "launch short of EC2 capacity"

// Health windows after a launch short of capacity: each is 1.5 times the last (from --health-timeout), at most
// an hour, so the scaling activities are read less often while the shortage lasts.
const (
	capacityBackoffFactor = 1.5
	capacityBackoffCap    = time.Hour
)

// capacityFailure matches the StatusMessage of a scaling activity whose launch failed for lack of EC2 capacity,
// On-Demand or Spot (Amazon EC2 Auto Scaling User Guide, "Troubleshoot Amazon EC2 Auto Scaling: EC2 instance
// launch failures": "We currently do not have sufficient <type> capacity in the Availability Zone you
// requested", InsufficientInstanceCapacity; "There is no Spot capacity available that matches your request";
// Amazon EC2 API error codes InsufficientInstanceCapacity, InsufficientCapacity, InsufficientHostCapacity,
// InsufficientReservedInstanceCapacity, UnfulfillableCapacity). Any other failure (an invalid AMI, a missing
// key pair, an instance profile, a limit) is not matched: it halts as before.
var capacityFailure = regexp.MustCompile(`(?i)insufficient\w*capacity|do not have sufficient .* capacity|no spot capacity|unfulfillablecapacity`)

// IsCapacityFailure reports whether a failed scaling activity's StatusMessage (or StatusCode, or an EC2
// Instance Launch Unsuccessful event's StatusMessage) says EC2 had no capacity for the launch.
func IsCapacityFailure(statusMessage string) bool { return capacityFailure.MatchString(statusMessage) }

// healthWindow is how long the current replacement may take to be healthy before the rollout halts:
// Policy.HealthTimeout, stretched by capacityBackoffFactor per launch retried for lack of capacity.
func (o *Orchestrator) healthWindow(cur *state.Replacement) time.Duration {
	if cur == nil || cur.CapacityRetries == 0 {
		return o.Policy.HealthTimeout
	}
	d := time.Duration(float64(o.Policy.HealthTimeout) * math.Pow(capacityBackoffFactor, float64(cur.CapacityRetries)))
	return min(max(d, o.Policy.HealthTimeout), capacityBackoffCap)
}

// retryIfShortOfCapacity is called when a health window ended with no replacement launched. It reads the
// group's scaling activities since the window began (DescribeScalingActivities, newest first, one page): when
// the newest failed launch failed for lack of capacity, the replacement is not a bad AMI — no halt, no
// rollback: the surge stays, Auto Scaling keeps trying, the window starts again longer (healthWindow), the
// status says why and one LaunchCapacity alert is sent. short reports whether it retried. Without the call
// (no awsapi.ScalingActivities), short is false.
func (o *Orchestrator) retryIfShortOfCapacity(ctx context.Context, t Target, v GroupView, r state.Rollout) (next state.Rollout, short bool, err error) {
	if o.Activities == nil {
		return r, false, nil
	}
	cur := r.Current
	failed, err := NewestFailedLaunch(ctx, o.Activities, v.Name, cur.StepStartedAt)
	if err != nil {
		return r, false, fmt.Errorf("no replacement launched: %w", err)
	}
	if failed == nil || !IsCapacityFailure(failed.StatusMessage+" "+failed.Description) {
		return r, false, nil
	}
	now := o.Clock.Now()
	cur.CapacityRetries++
	cur.StepStartedAt = now
	msg := failed.StatusMessage
	r.Reason = fmt.Sprintf("%s (retry %d, next look by %s): %s", capacityPrefix, cur.CapacityRetries,
		now.Add(o.healthWindow(cur)).UTC().Format(time.RFC3339), truncate(msg, 300))
	o.Log.Warn("replacement could not launch for lack of EC2 capacity; not a bad AMI: waiting for Auto Scaling's retries",
		zap.String(logging.Group, v.Name), zap.Int(logging.Attempt, cur.CapacityRetries), zap.String(logging.Reason, msg))
	saved, err := o.save(ctx, r, "waiting")
	if err != nil {
		return saved, true, err
	}
	SendAlert(o.Observer, Alert{Kind: AlertLaunchCapacity, Target: t, Detail: msg, ImageID: r.TargetImageID, At: now})
	return saved, true, errWait
}
