package sim

import (
	"context"
	"strings"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// AccountLimits are the request token buckets of a simulated account, per rate class (awsapi.RateEC2, ...),
// as AWS keeps them per account and Region.
type AccountLimits = awsapi.RateLimits

// AWSAccountLimits are the account limits AWS documents, the ones the agent's client-side defaults
// (awsapi.DefaultRateLimits) stay below: EC2 non-mutating actions 100 tokens refilled at 20 per second and
// mutating actions 200 at 5 per second (Amazon EC2 Developer Guide, "Request throttling for the Amazon EC2
// API"); ECS 20 per second with a burst of 50 (Amazon ECS Developer Guide, "Request throttling for the Amazon
// ECS API", cluster reads); Parameter Store 40 transactions per second (AWS General Reference, "AWS Systems
// Manager endpoints and quotas"); Auto Scaling, EKS and CloudWatch publish none for these calls and get ECS's
// figure here.
func AWSAccountLimits() AccountLimits {
	return AccountLimits{
		awsapi.RateEC2Mutating: {Rate: 5, Burst: 200},
		awsapi.RateEC2:         {Rate: 20, Burst: 100},
		awsapi.RateAutoScaling: {Rate: 20, Burst: 50},
		awsapi.RateECS:         {Rate: 20, Burst: 50},
		awsapi.RateSSM:         {Rate: 40, Burst: 40},
		awsapi.RateEKS:         {Rate: 20, Burst: 50},
		awsapi.RateCloudWatch:  {Rate: 20, Burst: 50},
	}
}

// Wire is what lies between the agent and the simulated account in a Faults injector, besides its rules:
// the agent's client-side rate limiter, the account's token buckets and the round trip of every call. The
// zero value (no limiter, no buckets, no latency) is what the tests use: calls take no time.
type Wire struct {
	// Client is the agent's client-side rate limiter (awsapi.Limiter), waited on before each call; nil waits
	// for nothing.
	Client *awsapi.Limiter
	// Account are the account's buckets (AWSAccountLimits): a call finding its class's bucket empty fails with
	// the service's throttling code (FaultThrottling for Auto Scaling, FaultRequestLimit for EC2,
	// FaultThrottlingException for the others), which awsapi.IsThrottled classifies as transient. Nil or an
	// absent class: never throttled.
	Account AccountLimits
	// Latency is the round trip of every call, spent in real time (a timer, not the simulated clock), so that
	// concurrent callers overlap as they would against AWS. Zero: none.
	Latency time.Duration
	// Clock refills the account's buckets; nil: the real clock.
	Clock clock.PassiveClock
	// Trace, when set, is told of every call that crossed the wire once it is answered (or gave up waiting
	// for its client-side token): the bench's per-call timing of a pass. Called on the caller's goroutine.
	Trace func(WireCall)
}

// WireCall is one call over a Wire, timed in real time: Op ("ec2:CreateLaunchTemplateVersion"), whether it
// took the limiter's priority lane (Urgent), when it began, how long it waited for its client-side token
// (Waited) and in all (Took), and the error the wire gave it (nil, the limiter's, or the throttling).
type WireCall struct {
	Op           string
	Urgent       bool
	Start        time.Time
	Waited, Took time.Duration
	Err          error
}

// wireState is a Wire in use: the account's buckets as rate.Limiters (refilled by Clock).
type wireState struct {
	Wire
	buckets map[string]*rate.Limiter
}

// SetWire puts w between the callers of f's clients and the account (the limiter, buckets and latency of
// Wire); the zero Wire takes them away. Throttled calls are counted in FaultStats.Throttled.
func (f *Faults) SetWire(w Wire) {
	s := &wireState{Wire: w, buckets: map[string]*rate.Limiter{}}
	if s.Clock == nil {
		s.Clock = clock.RealClock{}
	}
	for class, l := range w.Account {
		if l.Rate > 0 {
			b := rate.NewLimiter(rate.Limit(l.Rate), max(l.Burst, 1))
			b.AllowN(s.Clock.Now(), 0) // the bucket starts full at the wire's clock
			s.buckets[class] = b
		}
	}
	f.mu.Lock()
	f.wire = s
	f.mu.Unlock()
}

// throttleCode is the error code a service answers a request above its rate with (faults.go, Fault*).
func throttleCode(service string) string {
	switch service {
	case "autoscaling":
		return FaultThrottling
	case "ec2":
		return FaultRequestLimit
	}
	return FaultThrottlingException
}

// pass sends one call op over the wire (counting it in FaultStats.Urgent when its context takes the priority
// lane): it waits for the client-side token, takes the account's token (or
// gets the throttling error), and spends the round trip. Errors are ctx's (while waiting) or the throttling.
func (f *Faults) pass(ctx context.Context, op string, mutating bool) (err error) {
	var waited time.Duration
	f.mu.Lock()
	w := f.wire
	if awsapi.IsUrgent(ctx) {
		f.stats.Urgent[op]++
	}
	f.mu.Unlock()
	if w == nil {
		return nil
	}
	service, _, _ := strings.Cut(op, ":")
	if w.Trace != nil {
		start := time.Now()
		defer func() {
			w.Trace(WireCall{Op: op, Urgent: awsapi.IsUrgent(ctx), Start: start, Waited: waited, Took: time.Since(start), Err: err})
		}()
	}
	began := time.Now()
	err = w.Client.Wait(ctx, service, mutating)
	waited = time.Since(began)
	if err != nil {
		return err
	}
	var throttled error
	if b, ok := w.buckets[awsapi.RateClass(service, mutating)]; ok && !b.AllowN(w.Clock.Now(), 1) {
		throttled = faultError(op, throttleCode(service), "Rate exceeded")
		f.mu.Lock()
		f.stats.Throttled[op]++
		f.mu.Unlock()
	}
	if w.Latency > 0 {
		t := time.NewTimer(w.Latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return throttled
}
