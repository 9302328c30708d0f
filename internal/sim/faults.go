package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go"
)

// Fault codes a FaultRule injects. The throttling codes are the ones each service documents for request
// rate limits: Auto Scaling answers "Throttling" (Amazon EC2 Auto Scaling API Reference, Common Errors), ECS,
// SSM, CloudWatch, EventBridge and EKS "ThrottlingException" (their API References, Common Errors), EC2
// "RequestLimitExceeded" (Amazon EC2 API Reference, "Request throttling for the Amazon EC2 API"). The server
// faults are the HTTP 500 / 503 answers of every service's Common Errors ("InternalFailure",
// "ServiceUnavailable"), sent as smithy API errors with smithy.FaultServer, as the SDK decodes them. Any
// other code (AccessDenied, ValidationError with FaultRule.Message ...) is sent as a client fault.
const (
	FaultThrottling          = "Throttling"
	FaultThrottlingException = "ThrottlingException"
	FaultRequestLimit        = "RequestLimitExceeded"
	FaultInternalFailure     = "InternalFailure"
	FaultServiceUnavailable  = "ServiceUnavailable"
	// FaultTimeout is no AWS answer at all: the request timed out on the wire. The caller gets what the SDK
	// returns then, a *smithy.OperationError around a *url.Error whose Timeout() is true (and which
	// errors.Is os.ErrDeadlineExceeded).
	FaultTimeout = "timeout"
)

// TransientFaults are the faults a healthy AWS account shows now and then: throttling, 5xx and timeouts.
var TransientFaults = []string{FaultThrottling, FaultThrottlingException, FaultRequestLimit, FaultInternalFailure,
	FaultServiceUnavailable, FaultTimeout}

// FaultRule says which calls fail and how.
type FaultRule struct {
	// Op selects the operations: "service:Operation" as Account.Calls names them
	// ("autoscaling:SetDesiredCapacity", "ecs:DescribeTasks"), "service:*" for every operation of a service,
	// or "*" for every operation.
	Op string
	// Every makes the rule fire on every Every-th matching call, counted per operation (calls Every, 2*Every,
	// ... of "ecs:ListTasks" fire, independently of "ecs:DescribeTasks"). Deterministic.
	Every int
	// Except names operations Op matches that the rule leaves alone.
	Except []string
	// Across counts Every over all matching calls together instead of per operation: every Every-th ECS
	// call fails, whichever operation it is.
	Across bool
	// Probability makes the rule fire on each matching call with this probability (0..1), drawn from the
	// injector's seeded random numbers: one stream per operation, so that a run is reproducible as long as
	// each operation's calls come in the same order.
	Probability float64
	// Codes are the faults injected when the rule fires, one picked at random per fault (the Fault* constants,
	// or any AWS error code). Empty with Latency set: the rule only delays calls.
	Codes []string
	// Message is the error message of injected API errors; default "injected fault".
	Message string
	// Latency is how long a call the rule fires on takes: the injector moves the clock given to NewFaults by
	// this much before the call is made. Without a clock latency is not modelled (in-process calls take no
	// time on the fake clock).
	Latency time.Duration
	// ResponseLost makes the fault of a mutating call (one that changes the account) happen after the call:
	// the effect is applied, the caller gets the error, as when a response is lost on the way back. Read-only
	// calls fail before the call as usual.
	ResponseLost bool
	// Max bounds how many times the rule fires (0: no bound).
	Max int
}

// Advancer moves simulated time (Account.Advance).
type Advancer interface{ Advance(time.Duration) }

// FaultStats counts the calls that went through an injector, by operation ("service:Operation").
type FaultStats struct {
	// Calls counts every call made to the wrapped client.
	Calls map[string]int
	// Successes counts calls that returned no error to the caller.
	Successes map[string]int
	// Injected counts the faults injected (response-lost faults included).
	Injected map[string]int
	// Lost counts the mutating calls whose effect was applied while the caller got an injected error.
	Lost map[string]int
	// Throttled counts the calls the account's token buckets refused (Wire.Account, throttle.go).
	Throttled map[string]int
	// Urgent counts the calls made with a context marked awsapi.WithUrgent (the client-side limiter's
	// priority lane, throttle.go).
	Urgent map[string]int
}

// Total sums the counts of m.
func Total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Faults injects AWS faults into the calls made through the clients it wraps: throttling, 5xx, timeouts,
// latency and lost responses, per operation, from seeded random numbers or a deterministic every-Nth pattern.
// It wraps any implementation of the internal/awsapi interfaces (the simulated account's clients in the tests)
// and counts calls, successes and faults per operation. Create it with NewFaults; safe for concurrent use.
type Faults struct {
	mu      sync.Mutex
	seed    uint64
	clock   Advancer
	rules   []FaultRule
	fired   []int                 // per rule
	counts  []map[string]int      // per rule: matching calls per operation
	streams map[string]*rand.Rand // per operation
	stats   FaultStats
	off     bool
	wire    *wireState // client limiter, account buckets, latency (throttle.go); nil: none
}

// NewFaults returns an injector whose random choices derive from seed. clock, when not nil, takes the
// rules' latency (pass the Account); rules are evaluated in order: latencies add up, the first fault wins.
func NewFaults(seed uint64, clock Advancer, rules ...FaultRule) *Faults {
	f := &Faults{seed: seed, clock: clock, streams: map[string]*rand.Rand{},
		stats: FaultStats{Calls: map[string]int{}, Successes: map[string]int{}, Injected: map[string]int{}, Lost: map[string]int{}, Throttled: map[string]int{}, Urgent: map[string]int{}}}
	f.SetRules(rules...)
	return f
}

// SetRules replaces the rules (their counters start again); no rule injects nothing.
func (f *Faults) SetRules(rules ...FaultRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append([]FaultRule(nil), rules...)
	f.fired = make([]int, len(rules))
	f.counts = make([]map[string]int, len(rules))
	for i := range f.counts {
		f.counts[i] = map[string]int{}
	}
}

// Pause stops (true) or resumes (false) injecting; calls are counted either way.
func (f *Faults) Pause(off bool) {
	f.mu.Lock()
	f.off = off
	f.mu.Unlock()
}

// Stats returns a copy of the counters.
func (f *Faults) Stats() FaultStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		out := make(map[string]int, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return FaultStats{Calls: cp(f.stats.Calls), Successes: cp(f.stats.Successes), Injected: cp(f.stats.Injected), Lost: cp(f.stats.Lost),
		Throttled: cp(f.stats.Throttled), Urgent: cp(f.stats.Urgent)}
}

// String summarises the counters, one operation a line: calls, successes, injected faults.
func (s FaultStats) String() string {
	ops := make([]string, 0, len(s.Calls))
	for op := range s.Calls {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	for _, op := range ops {
		fmt.Fprintf(&b, "%-45s calls %5d  ok %5d  injected %4d\n", op, s.Calls[op], s.Successes[op], s.Injected[op])
	}
	return b.String()
}

func matches(pattern, op string) bool {
	if pattern == "*" || pattern == op {
		return true
	}
	if svc, ok := strings.CutSuffix(pattern, ":*"); ok {
		return strings.HasPrefix(op, svc+":")
	}
	return false
}

// stream returns the random numbers of op (callers hold f.mu).
func (f *Faults) stream(op string) *rand.Rand {
	r, ok := f.streams[op]
	if !ok {
		h := fnv.New64a()
		h.Write([]byte(op))
		r = rand.New(rand.NewPCG(f.seed, h.Sum64()))
		f.streams[op] = r
	}
	return r
}

// decision is what the rules decided for one call.
type decision struct {
	latency time.Duration
	err     error
	lost    bool
}

func (f *Faults) decide(op string, mutating bool) decision {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Calls[op]++
	var d decision
	if f.off {
		return d
	}
	for i, r := range f.rules {
		if !matches(r.Op, op) || slices.Contains(r.Except, op) || (r.Max > 0 && f.fired[i] >= r.Max) {
			continue
		}
		key := op
		if r.Across {
			key = r.Op
		}
		f.counts[i][key]++
		fire := r.Every > 0 && f.counts[i][key]%r.Every == 0
		if !fire && r.Probability > 0 {
			fire = f.stream(op).Float64() < r.Probability
		}
		if !fire {
			continue
		}
		f.fired[i]++
		d.latency += r.Latency
		if d.err == nil && len(r.Codes) > 0 {
			code := r.Codes[f.stream(op).IntN(len(r.Codes))]
			d.err, d.lost = faultError(op, code, r.Message), r.ResponseLost && mutating
			f.stats.Injected[op]++
			if d.lost {
				f.stats.Lost[op]++
			}
		}
	}
	return d
}

// timeoutError is the transport error of a request that got no answer in time: what net/http returns when
// a deadline passes while it reads the response.
func timeoutError(op string) error {
	service, operation, _ := strings.Cut(op, ":")
	return &smithy.OperationError{ServiceID: service, OperationName: operation, Err: &url.Error{Op: "Post",
		URL: "https://" + service + ".amazonaws.com/", Err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}}}
}

func faultError(op, code, message string) error {
	if message == "" {
		message = "injected fault"
	}
	switch code {
	case FaultTimeout:
		return timeoutError(op)
	case FaultInternalFailure, FaultServiceUnavailable:
		return &smithy.GenericAPIError{Code: code, Message: message, Fault: smithy.FaultServer}
	}
	return &smithy.GenericAPIError{Code: code, Message: message, Fault: smithy.FaultClient}
}

// mutatingOps are the operations that change the account: their injected fault can come after the call
// (FaultRule.ResponseLost), and the account's token buckets and the client-side limiter count them apart from
// the reads. ReceiveMessage is one: it makes the messages it returns invisible, so a lost ReceiveMessage
// response leaves them invisible for their visibility timeout, as in SQS. SendMessage (the operator commands'
// wake-up) is one too: a lost response leaves the message sent.
var mutatingOps = map[string]bool{
	"autoscaling:CompleteLifecycleAction":        true,
	"autoscaling:RecordLifecycleActionHeartbeat": true,
	"autoscaling:StartInstanceRefresh":           true,
	"autoscaling:CancelInstanceRefresh":          true,
	"autoscaling:RollbackInstanceRefresh":        true,
	"ec2:CreateLaunchTemplateVersion":            true,
	"ecs:UpdateContainerInstancesState":          true,
	"sqs:ReceiveMessage":                         true,
	"sqs:DeleteMessage":                          true,
	"sqs:DeleteMessageBatch":                     true,
	"sqs:ChangeMessageVisibility":                true,
	"sqs:SendMessage":                            true,
	"cloudwatch:PutMetricData":                   true,
	"eventbridge:PutEvents":                      true,
	"eks:UpdateClusterVersion":                   true,
	"eks:UpdateAddon":                            true,
	"eks:UpdateNodegroupVersion":                 true,
}

// The wrappers of faults_gen.go send every call of the awsapi interfaces through call, named
// "service:Operation"; Faults gets a method per interface that wraps an implementation.
//go:generate go run ../../tools/wrapgen -o faults_gen.go -call call -with *Faults -prefix faulty -ctor ../awsapi AutoScaling EC2 EC2InstanceTypes ECS SSM SQS OperatorQueue CloudWatch EventBridge EKS EKSUpgrade EKSNodegroups STS

// call runs one call op of a wrapped client through the rules: latency first, then the fault before the
// call, or (lost response of a mutating call) after it.
func call[T any](ctx context.Context, f *Faults, op string, do func(context.Context) (T, error)) (T, error) {
	var zero T
	mutating := mutatingOps[op]
	d := f.decide(op, mutating)
	if err := f.pass(ctx, op, mutating); err != nil {
		return zero, err
	}
	if d.latency > 0 && f.clock != nil {
		f.clock.Advance(d.latency)
	}
	if d.err != nil && !d.lost {
		return zero, d.err
	}
	out, err := do(ctx)
	if d.err != nil {
		return zero, d.err
	}
	if err == nil {
		f.mu.Lock()
		f.stats.Successes[op]++
		f.mu.Unlock()
	}
	return out, err
}
