package awsapi

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// Rate-limit classes: the buckets of RateLimits. EC2 keeps separate buckets for mutating and non-mutating
// actions; the other services one bucket each.
const (
	RateEC2Mutating = "ec2-mutating"
	RateEC2         = "ec2"
	RateAutoScaling = "autoscaling"
	RateECS         = "ecs"
	RateSSM         = "ssm"
	RateEKS         = "eks"
	RateCloudWatch  = "cloudwatch"
)

// RateLimit is one token bucket: Rate requests per second sustained, Burst requests at once. Rate <= 0
// leaves the class unlimited.
type RateLimit struct {
	Rate  float64 `json:"rate"`
	Burst int     `json:"burst"`
}

// RateLimits are the client-side request rates of the agent per AWS service (class), keyed by the Rate*
// constants. The agent waits for a token before each request attempt (retries included), so that a pass over
// many groups spreads its calls out (DescribeLifecycleHooks on every poll, DescribeLaunchTemplateVersions at
// the start of many rollouts) instead of bursting into the account's throttling.
type RateLimits map[string]RateLimit

// DefaultRateLimits are sized at about half of the account limits AWS documents, because the agent shares
// each account's buckets with everything else calling the same APIs in the Region (consoles, CI, other
// controllers):
//   - EC2 (Amazon EC2 Developer Guide, "Request throttling for the Amazon EC2 API"): token buckets per
//     action, non-mutating actions (Describe*) 100 tokens refilled at 20 per second, mutating actions
//     (CreateLaunchTemplateVersion, ...) 200 refilled at 5 per second. Default: 10/s burst 50 and 2.5/s
//     burst 100.
//   - ECS (Amazon ECS Developer Guide, "Request throttling for the Amazon ECS API"): sustained and burst rates
//     per action group, e.g. cluster reads 20 per second with a burst of 50. Default: 10/s burst 25.
//   - Systems Manager (AWS General Reference, "AWS Systems Manager endpoints and quotas"): Parameter Store's
//     default throughput is 40 transactions per second shared by GetParameter, GetParameters and
//     GetParametersByPath. Default: 20/s burst 20.
//   - Auto Scaling publishes no request rates; its API answers Throttling when exceeded (Amazon EC2 Auto
//     Scaling API Reference, Common Errors). Default: 10/s burst 20, the ECS figure.
//   - EKS and CloudWatch: 10/s burst 20 (EKS publishes no rates for its read actions; CloudWatch
//     DescribeAlarms and PutMetricData are far above it, AWS General Reference, "CloudWatch quotas").
//
// SQS, DynamoDB, STS and EventBridge are not limited: long polls, on-demand tables and rare calls.
func DefaultRateLimits() RateLimits {
	return RateLimits{
		RateEC2Mutating: {Rate: 2.5, Burst: 100},
		RateEC2:         {Rate: 10, Burst: 50},
		RateAutoScaling: {Rate: 10, Burst: 20},
		RateECS:         {Rate: 10, Burst: 25},
		RateSSM:         {Rate: 20, Burst: 20},
		RateEKS:         {Rate: 10, Burst: 20},
		RateCloudWatch:  {Rate: 10, Burst: 20},
	}
}

// MinRate is the smallest limit ParseRateLimits accepts, in requests per second: below it (1e-300, say) the
// first call would pass and every later one wait for hours, which stops the agent rather than limiting it.
const MinRate = 0.01

// ParseRateLimits applies specs of the form CLASS=RATE[/BURST] (`--rate-limit ec2=8/40`; RATE in requests
// per second, 0 to lift the limit, otherwise at least MinRate; NaN and Inf are refused; BURST defaults to RATE rounded up) to the defaults. Errors name the bad
// spec and the known classes.
func ParseRateLimits(specs []string) (RateLimits, error) {
	limits := DefaultRateLimits()
	for _, spec := range specs {
		class, value, ok := strings.Cut(spec, "=")
		if _, known := limits[class]; !ok || !known {
			return nil, fmt.Errorf("--rate-limit %q: want CLASS=RATE[/BURST] with CLASS one of %s", spec, strings.Join(limits.classes(), ", "))
		}
		r, b, hasBurst := strings.Cut(value, "/")
		perSecond, err := strconv.ParseFloat(r, 64)
		if err != nil || math.IsNaN(perSecond) || math.IsInf(perSecond, 0) || perSecond < 0 || (perSecond > 0 && perSecond < MinRate) {
			return nil, fmt.Errorf("--rate-limit %q: RATE must be a number of requests per second, 0 (no limit) or at least %g", spec, MinRate)
		}
		burst := int(perSecond + 0.999)
		if hasBurst {
			if burst, err = strconv.Atoi(b); err != nil || burst < 1 {
				return nil, fmt.Errorf("--rate-limit %q: BURST must be a whole number of requests, at least 1", spec)
			}
		}
		limits[class] = RateLimit{Rate: perSecond, Burst: max(burst, 1)}
	}
	return limits, nil
}

func (l RateLimits) classes() []string {
	out := make([]string, 0, len(l))
	for c := range l {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Limiter waits for the client-side token of each AWS request (RateLimits). Safe for concurrent use; a nil
// *Limiter limits nothing.
//
// It has two lanes per class. A request whose context is marked WithUrgent reserves the next token in arrival
// order among the urgent ones; every other request (a fleet pass) takes a token only when one is there now
// and no urgent request has reserved it, and otherwise sleeps until the bucket refills and asks again. Fleet
// requests therefore never queue reservations ahead of an urgent one: an urgent request waits at most for
// the other urgent requests before it plus one refill (1/Rate), however many fleet requests wait.
type Limiter struct {
	buckets map[string]*rate.Limiter
	clock   clock.Clock
	// waited sums, per lane, the time requests spent waiting for their token (Waited).
	mu     sync.Mutex
	waited [2]time.Duration
}

// NewLimiter returns a Limiter over limits on the real clock; classes with Rate <= 0 are unlimited.
func NewLimiter(limits RateLimits) *Limiter { return NewLimiterWithClock(limits, clock.RealClock{}) }

// NewLimiterWithClock is NewLimiter with the clock that refills the buckets and times the waits (a fake
// clock in tests).
func NewLimiterWithClock(limits RateLimits, clk clock.Clock) *Limiter {
	l := &Limiter{buckets: map[string]*rate.Limiter{}, clock: clk}
	for class, r := range limits {
		if r.Rate > 0 {
			b := rate.NewLimiter(rate.Limit(r.Rate), max(r.Burst, 1))
			b.AllowN(clk.Now(), 0) // the bucket starts full at the clock's time
			l.buckets[class] = b
		}
	}
	return l
}

// Waited returns the total time requests of the urgent lane (urgent true) or of the fleet lane spent waiting
// for their client-side token (the bench's per-stage timing of a reaction).
func (l *Limiter) Waited(urgent bool) time.Duration {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if urgent {
		return l.waited[1]
	}
	return l.waited[0]
}

// RateClass returns the class of a request: service as the simulated account and the SDK name it ("ec2",
// "autoscaling", "ecs", "ssm", "eks", "cloudwatch", or the SDK's service ids "EC2", "Auto Scaling", ...) and
// whether the operation changes the account. "" for services that are not limited.
func RateClass(service string, mutating bool) string {
	switch strings.ToLower(strings.ReplaceAll(service, " ", "")) {
	case "ec2":
		if mutating {
			return RateEC2Mutating
		}
		return RateEC2
	case "autoscaling":
		return RateAutoScaling
	case "ecs":
		return RateECS
	case "ssm":
		return RateSSM
	case "eks":
		return RateEKS
	case "cloudwatch":
		return RateCloudWatch
	}
	return ""
}

// IsMutating tells by its name whether an AWS operation changes the account: every action but Describe*,
// List*, Get* (EC2's own split of mutating and non-mutating actions follows the same names).
func IsMutating(operation string) bool {
	for _, p := range []string{"Describe", "List", "Get"} {
		if strings.HasPrefix(operation, p) {
			return false
		}
	}
	return true
}

// Wait blocks until the request may be sent (a token of its class; urgent requests first, see Limiter), or
// returns ctx's error.
func (l *Limiter) Wait(ctx context.Context, service string, mutating bool) error {
	if l == nil {
		return nil
	}
	b, ok := l.buckets[RateClass(service, mutating)]
	if !ok {
		return nil
	}
	start, urgent := l.clock.Now(), IsUrgent(ctx)
	err := l.take(ctx, b, urgent)
	l.mu.Lock()
	if urgent {
		l.waited[1] += l.clock.Since(start)
	} else {
		l.waited[0] += l.clock.Since(start)
	}
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("waiting for the client-side rate limit of %s: %w", service, err)
	}
	return nil
}

// take waits for one token of b: an urgent request reserves it, a fleet request takes one only when the
// bucket holds it now (so it never queues ahead of an urgent reservation), and gives up with
// ErrPassBudgetSpent once the pass budget its context carries is spent (WithPassBudget).
func (l *Limiter) take(ctx context.Context, b *rate.Limiter, urgent bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if urgent {
		now := l.clock.Now()
		r := b.ReserveN(now, 1)
		d := r.DelayFrom(now)
		if d <= 0 {
			return nil
		}
		if err := l.sleep(ctx, d); err != nil {
			r.CancelAt(l.clock.Now())
			return err
		}
		return nil
	}
	for {
		marked, spent := budgetSpent(ctx)
		if spent {
			return ErrPassBudgetSpent
		}
		now := l.clock.Now()
		if b.AllowN(now, 1) {
			return nil
		}
		// Until the bucket holds one token again (urgent reservations make it negative); a request of a
		// pass with a budget looks at it again at least every yieldPoll.
		d := max(time.Duration((1-b.TokensAt(now))/float64(b.Limit())*float64(time.Second)), time.Millisecond)
		if marked {
			d = min(d, yieldPoll)
		}
		if err := l.sleep(ctx, d); err != nil {
			return err
		}
	}
}

func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	t := l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Middleware returns the SDK middleware that waits on l before every attempt of every request of a client
// built with it (append it to aws.Config.APIOptions): it runs in the finalize step after the retryer, so
// retries take tokens too, and before signing, so a long wait does not age the signature.
func (l *Limiter) Middleware() func(*middleware.Stack) error {
	mw := middleware.FinalizeMiddlewareFunc("PatchAgentRateLimit", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		op := awsmiddleware.GetOperationName(ctx)
		if err := l.Wait(ctx, awsmiddleware.GetServiceID(ctx), IsMutating(op)); err != nil {
			return middleware.FinalizeOutput{}, middleware.Metadata{}, err
		}
		return next.HandleFinalize(ctx, in)
	})
	return func(s *middleware.Stack) error {
		if err := s.Finalize.Insert(mw, "Retry", middleware.After); err == nil {
			return nil
		}
		return s.Finalize.Add(mw, middleware.Before)
	}
}
