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

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"

	"github.com/patch-agent/patch-agent/internal/awsapi"
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

// call runs one call through the rules: latency first, then the fault before the call, or (lost response of
// a mutating call) after it.
func call[O any](ctx context.Context, f *Faults, op string, mutating bool, do func(context.Context) (*O, error)) (*O, error) {
	d := f.decide(op, mutating)
	if err := f.pass(ctx, op, mutating); err != nil {
		return nil, err
	}
	if d.latency > 0 && f.clock != nil {
		f.clock.Advance(d.latency)
	}
	if d.err != nil && !d.lost {
		return nil, d.err
	}
	out, err := do(ctx)
	if d.err != nil {
		return nil, d.err
	}
	if err == nil {
		f.mu.Lock()
		f.stats.Successes[op]++
		f.mu.Unlock()
	}
	return out, err
}

// AutoScaling wraps api.
func (f *Faults) AutoScaling(api awsapi.AutoScaling) awsapi.AutoScaling { return faultyASG{api, f} }

// EC2 wraps api.
func (f *Faults) EC2(api awsapi.EC2) awsapi.EC2 { return faultyEC2{api, f} }

// ECS wraps api.
func (f *Faults) ECS(api awsapi.ECS) awsapi.ECS { return faultyECS{api, f} }

// SSM wraps api.
func (f *Faults) SSM(api awsapi.SSM) awsapi.SSM { return faultySSM{api, f} }

// SQS wraps api.
func (f *Faults) SQS(api awsapi.SQS) awsapi.SQS { return faultySQS{api, f} }

// CloudWatch wraps api.
func (f *Faults) CloudWatch(api awsapi.CloudWatch) awsapi.CloudWatch { return faultyCloudWatch{api, f} }

// EventBridge wraps api.
func (f *Faults) EventBridge(api awsapi.EventBridge) awsapi.EventBridge {
	return faultyEventBridge{api, f}
}

// EKS wraps api.
func (f *Faults) EKS(api awsapi.EKS) awsapi.EKS { return faultyEKS{api, f} }

// EC2InstanceTypes wraps api.
func (f *Faults) EC2InstanceTypes(api awsapi.EC2InstanceTypes) awsapi.EC2InstanceTypes {
	return faultyInstanceTypes{api, f}
}

// STS wraps api.
func (f *Faults) STS(api awsapi.STS) awsapi.STS { return faultySTS{api, f} }

// EKSUpgrade wraps api.
func (f *Faults) EKSUpgrade(api awsapi.EKSUpgrade) awsapi.EKSUpgrade { return faultyEKSUpgrade{api, f} }

type faultyASG struct {
	api awsapi.AutoScaling
	f   *Faults
}

func (c faultyASG) DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	return call(ctx, c.f, "autoscaling:DescribeAutoScalingGroups", false, func(ctx context.Context) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
		return c.api.DescribeAutoScalingGroups(ctx, in, o...)
	})
}

func (c faultyASG) DescribeWarmPool(ctx context.Context, in *autoscaling.DescribeWarmPoolInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	return call(ctx, c.f, "autoscaling:DescribeWarmPool", false, func(ctx context.Context) (*autoscaling.DescribeWarmPoolOutput, error) {
		return c.api.DescribeWarmPool(ctx, in, o...)
	})
}

func (c faultyASG) DescribeAutoScalingInstances(ctx context.Context, in *autoscaling.DescribeAutoScalingInstancesInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
	return call(ctx, c.f, "autoscaling:DescribeAutoScalingInstances", false, func(ctx context.Context) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
		return c.api.DescribeAutoScalingInstances(ctx, in, o...)
	})
}

func (c faultyASG) DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	return call(ctx, c.f, "autoscaling:DescribeLifecycleHooks", false, func(ctx context.Context) (*autoscaling.DescribeLifecycleHooksOutput, error) {
		return c.api.DescribeLifecycleHooks(ctx, in, o...)
	})
}

func (c faultyASG) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	return call(ctx, c.f, "autoscaling:CompleteLifecycleAction", true, func(ctx context.Context) (*autoscaling.CompleteLifecycleActionOutput, error) {
		return c.api.CompleteLifecycleAction(ctx, in, o...)
	})
}

func (c faultyASG) RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, o ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	return call(ctx, c.f, "autoscaling:RecordLifecycleActionHeartbeat", true, func(ctx context.Context) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
		return c.api.RecordLifecycleActionHeartbeat(ctx, in, o...)
	})
}

func (c faultyASG) StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	return call(ctx, c.f, "autoscaling:StartInstanceRefresh", true, func(ctx context.Context) (*autoscaling.StartInstanceRefreshOutput, error) {
		return c.api.StartInstanceRefresh(ctx, in, o...)
	})
}

func (c faultyASG) DescribeInstanceRefreshes(ctx context.Context, in *autoscaling.DescribeInstanceRefreshesInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error) {
	return call(ctx, c.f, "autoscaling:DescribeInstanceRefreshes", false, func(ctx context.Context) (*autoscaling.DescribeInstanceRefreshesOutput, error) {
		return c.api.DescribeInstanceRefreshes(ctx, in, o...)
	})
}

func (c faultyASG) CancelInstanceRefresh(ctx context.Context, in *autoscaling.CancelInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.CancelInstanceRefreshOutput, error) {
	return call(ctx, c.f, "autoscaling:CancelInstanceRefresh", true, func(ctx context.Context) (*autoscaling.CancelInstanceRefreshOutput, error) {
		return c.api.CancelInstanceRefresh(ctx, in, o...)
	})
}

func (c faultyASG) RollbackInstanceRefresh(ctx context.Context, in *autoscaling.RollbackInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.RollbackInstanceRefreshOutput, error) {
	return call(ctx, c.f, "autoscaling:RollbackInstanceRefresh", true, func(ctx context.Context) (*autoscaling.RollbackInstanceRefreshOutput, error) {
		return c.api.RollbackInstanceRefresh(ctx, in, o...)
	})
}

type faultyEC2 struct {
	api awsapi.EC2
	f   *Faults
}

func (c faultyEC2) DescribeLaunchTemplateVersions(ctx context.Context, in *ec2.DescribeLaunchTemplateVersionsInput, o ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplateVersionsOutput, error) {
	return call(ctx, c.f, "ec2:DescribeLaunchTemplateVersions", false, func(ctx context.Context) (*ec2.DescribeLaunchTemplateVersionsOutput, error) {
		return c.api.DescribeLaunchTemplateVersions(ctx, in, o...)
	})
}

func (c faultyEC2) CreateLaunchTemplateVersion(ctx context.Context, in *ec2.CreateLaunchTemplateVersionInput, o ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateVersionOutput, error) {
	return call(ctx, c.f, "ec2:CreateLaunchTemplateVersion", true, func(ctx context.Context) (*ec2.CreateLaunchTemplateVersionOutput, error) {
		return c.api.CreateLaunchTemplateVersion(ctx, in, o...)
	})
}

func (c faultyEC2) DescribeInstances(ctx context.Context, in *ec2.DescribeInstancesInput, o ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	return call(ctx, c.f, "ec2:DescribeInstances", false, func(ctx context.Context) (*ec2.DescribeInstancesOutput, error) {
		return c.api.DescribeInstances(ctx, in, o...)
	})
}

func (c faultyEC2) DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, o ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error) {
	return call(ctx, c.f, "ec2:DescribeImages", false, func(ctx context.Context) (*ec2.DescribeImagesOutput, error) {
		return c.api.DescribeImages(ctx, in, o...)
	})
}

type faultyInstanceTypes struct {
	api awsapi.EC2InstanceTypes
	f   *Faults
}

func (c faultyInstanceTypes) DescribeInstanceTypes(ctx context.Context, in *ec2.DescribeInstanceTypesInput, o ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error) {
	return call(ctx, c.f, "ec2:DescribeInstanceTypes", false, func(ctx context.Context) (*ec2.DescribeInstanceTypesOutput, error) {
		return c.api.DescribeInstanceTypes(ctx, in, o...)
	})
}

type faultyECS struct {
	api awsapi.ECS
	f   *Faults
}

func (c faultyECS) ListContainerInstances(ctx context.Context, in *ecs.ListContainerInstancesInput, o ...func(*ecs.Options)) (*ecs.ListContainerInstancesOutput, error) {
	return call(ctx, c.f, "ecs:ListContainerInstances", false, func(ctx context.Context) (*ecs.ListContainerInstancesOutput, error) {
		return c.api.ListContainerInstances(ctx, in, o...)
	})
}

func (c faultyECS) DescribeContainerInstances(ctx context.Context, in *ecs.DescribeContainerInstancesInput, o ...func(*ecs.Options)) (*ecs.DescribeContainerInstancesOutput, error) {
	return call(ctx, c.f, "ecs:DescribeContainerInstances", false, func(ctx context.Context) (*ecs.DescribeContainerInstancesOutput, error) {
		return c.api.DescribeContainerInstances(ctx, in, o...)
	})
}

func (c faultyECS) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, o ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	return call(ctx, c.f, "ecs:UpdateContainerInstancesState", true, func(ctx context.Context) (*ecs.UpdateContainerInstancesStateOutput, error) {
		return c.api.UpdateContainerInstancesState(ctx, in, o...)
	})
}

func (c faultyECS) ListTasks(ctx context.Context, in *ecs.ListTasksInput, o ...func(*ecs.Options)) (*ecs.ListTasksOutput, error) {
	return call(ctx, c.f, "ecs:ListTasks", false, func(ctx context.Context) (*ecs.ListTasksOutput, error) {
		return c.api.ListTasks(ctx, in, o...)
	})
}

func (c faultyECS) DescribeTasks(ctx context.Context, in *ecs.DescribeTasksInput, o ...func(*ecs.Options)) (*ecs.DescribeTasksOutput, error) {
	return call(ctx, c.f, "ecs:DescribeTasks", false, func(ctx context.Context) (*ecs.DescribeTasksOutput, error) {
		return c.api.DescribeTasks(ctx, in, o...)
	})
}

func (c faultyECS) DescribeServices(ctx context.Context, in *ecs.DescribeServicesInput, o ...func(*ecs.Options)) (*ecs.DescribeServicesOutput, error) {
	return call(ctx, c.f, "ecs:DescribeServices", false, func(ctx context.Context) (*ecs.DescribeServicesOutput, error) {
		return c.api.DescribeServices(ctx, in, o...)
	})
}

type faultySSM struct {
	api awsapi.SSM
	f   *Faults
}

func (c faultySSM) GetParameters(ctx context.Context, in *ssm.GetParametersInput, o ...func(*ssm.Options)) (*ssm.GetParametersOutput, error) {
	return call(ctx, c.f, "ssm:GetParameters", false, func(ctx context.Context) (*ssm.GetParametersOutput, error) {
		return c.api.GetParameters(ctx, in, o...)
	})
}

// faultySQS: ReceiveMessage counts as mutating — it makes the messages it returns invisible — so a lost
// ReceiveMessage response leaves them invisible for their visibility timeout, as in SQS.
type faultySQS struct {
	api awsapi.SQS
	f   *Faults
}

func (c faultySQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return call(ctx, c.f, "sqs:ReceiveMessage", true, func(ctx context.Context) (*sqs.ReceiveMessageOutput, error) {
		return c.api.ReceiveMessage(ctx, in, o...)
	})
}

func (c faultySQS) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	return call(ctx, c.f, "sqs:DeleteMessage", true, func(ctx context.Context) (*sqs.DeleteMessageOutput, error) {
		return c.api.DeleteMessage(ctx, in, o...)
	})
}

func (c faultySQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return call(ctx, c.f, "sqs:DeleteMessageBatch", true, func(ctx context.Context) (*sqs.DeleteMessageBatchOutput, error) {
		return c.api.DeleteMessageBatch(ctx, in, o...)
	})
}

func (c faultySQS) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	return call(ctx, c.f, "sqs:ChangeMessageVisibility", true, func(ctx context.Context) (*sqs.ChangeMessageVisibilityOutput, error) {
		return c.api.ChangeMessageVisibility(ctx, in, o...)
	})
}

// OperatorQueue wraps api (the operator commands' wake-up). SendMessage counts as mutating: a lost response
// leaves the message sent.
func (f *Faults) OperatorQueue(api awsapi.OperatorQueue) awsapi.OperatorQueue {
	return faultyOperatorQueue{api, f}
}

type faultyOperatorQueue struct {
	api awsapi.OperatorQueue
	f   *Faults
}

func (c faultyOperatorQueue) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return call(ctx, c.f, "sqs:SendMessage", true, func(ctx context.Context) (*sqs.SendMessageOutput, error) {
		return c.api.SendMessage(ctx, in, o...)
	})
}

type faultyCloudWatch struct {
	api awsapi.CloudWatch
	f   *Faults
}

func (c faultyCloudWatch) DescribeAlarms(ctx context.Context, in *cloudwatch.DescribeAlarmsInput, o ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error) {
	return call(ctx, c.f, "cloudwatch:DescribeAlarms", false, func(ctx context.Context) (*cloudwatch.DescribeAlarmsOutput, error) {
		return c.api.DescribeAlarms(ctx, in, o...)
	})
}

func (c faultyCloudWatch) PutMetricData(ctx context.Context, in *cloudwatch.PutMetricDataInput, o ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	return call(ctx, c.f, "cloudwatch:PutMetricData", true, func(ctx context.Context) (*cloudwatch.PutMetricDataOutput, error) {
		return c.api.PutMetricData(ctx, in, o...)
	})
}

type faultyEventBridge struct {
	api awsapi.EventBridge
	f   *Faults
}

func (c faultyEventBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, o ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return call(ctx, c.f, "eventbridge:PutEvents", true, func(ctx context.Context) (*eventbridge.PutEventsOutput, error) {
		return c.api.PutEvents(ctx, in, o...)
	})
}

type faultyEKS struct {
	api awsapi.EKS
	f   *Faults
}

func (c faultyEKS) DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, o ...func(*eks.Options)) (*eks.DescribeClusterOutput, error) {
	return call(ctx, c.f, "eks:DescribeCluster", false, func(ctx context.Context) (*eks.DescribeClusterOutput, error) {
		return c.api.DescribeCluster(ctx, in, o...)
	})
}

type faultyEKSUpgrade struct {
	api awsapi.EKSUpgrade
	f   *Faults
}

func (c faultyEKSUpgrade) DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, o ...func(*eks.Options)) (*eks.DescribeClusterOutput, error) {
	return call(ctx, c.f, "eks:DescribeCluster", false, func(ctx context.Context) (*eks.DescribeClusterOutput, error) {
		return c.api.DescribeCluster(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) UpdateClusterVersion(ctx context.Context, in *eks.UpdateClusterVersionInput, o ...func(*eks.Options)) (*eks.UpdateClusterVersionOutput, error) {
	return call(ctx, c.f, "eks:UpdateClusterVersion", true, func(ctx context.Context) (*eks.UpdateClusterVersionOutput, error) {
		return c.api.UpdateClusterVersion(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) DescribeUpdate(ctx context.Context, in *eks.DescribeUpdateInput, o ...func(*eks.Options)) (*eks.DescribeUpdateOutput, error) {
	return call(ctx, c.f, "eks:DescribeUpdate", false, func(ctx context.Context) (*eks.DescribeUpdateOutput, error) {
		return c.api.DescribeUpdate(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) ListUpdates(ctx context.Context, in *eks.ListUpdatesInput, o ...func(*eks.Options)) (*eks.ListUpdatesOutput, error) {
	return call(ctx, c.f, "eks:ListUpdates", false, func(ctx context.Context) (*eks.ListUpdatesOutput, error) {
		return c.api.ListUpdates(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) ListInsights(ctx context.Context, in *eks.ListInsightsInput, o ...func(*eks.Options)) (*eks.ListInsightsOutput, error) {
	return call(ctx, c.f, "eks:ListInsights", false, func(ctx context.Context) (*eks.ListInsightsOutput, error) {
		return c.api.ListInsights(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) DescribeInsight(ctx context.Context, in *eks.DescribeInsightInput, o ...func(*eks.Options)) (*eks.DescribeInsightOutput, error) {
	return call(ctx, c.f, "eks:DescribeInsight", false, func(ctx context.Context) (*eks.DescribeInsightOutput, error) {
		return c.api.DescribeInsight(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) ListAddons(ctx context.Context, in *eks.ListAddonsInput, o ...func(*eks.Options)) (*eks.ListAddonsOutput, error) {
	return call(ctx, c.f, "eks:ListAddons", false, func(ctx context.Context) (*eks.ListAddonsOutput, error) {
		return c.api.ListAddons(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) DescribeAddon(ctx context.Context, in *eks.DescribeAddonInput, o ...func(*eks.Options)) (*eks.DescribeAddonOutput, error) {
	return call(ctx, c.f, "eks:DescribeAddon", false, func(ctx context.Context) (*eks.DescribeAddonOutput, error) {
		return c.api.DescribeAddon(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) DescribeAddonVersions(ctx context.Context, in *eks.DescribeAddonVersionsInput, o ...func(*eks.Options)) (*eks.DescribeAddonVersionsOutput, error) {
	return call(ctx, c.f, "eks:DescribeAddonVersions", false, func(ctx context.Context) (*eks.DescribeAddonVersionsOutput, error) {
		return c.api.DescribeAddonVersions(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) UpdateAddon(ctx context.Context, in *eks.UpdateAddonInput, o ...func(*eks.Options)) (*eks.UpdateAddonOutput, error) {
	return call(ctx, c.f, "eks:UpdateAddon", true, func(ctx context.Context) (*eks.UpdateAddonOutput, error) {
		return c.api.UpdateAddon(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) ListNodegroups(ctx context.Context, in *eks.ListNodegroupsInput, o ...func(*eks.Options)) (*eks.ListNodegroupsOutput, error) {
	return call(ctx, c.f, "eks:ListNodegroups", false, func(ctx context.Context) (*eks.ListNodegroupsOutput, error) {
		return c.api.ListNodegroups(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) DescribeNodegroup(ctx context.Context, in *eks.DescribeNodegroupInput, o ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error) {
	return call(ctx, c.f, "eks:DescribeNodegroup", false, func(ctx context.Context) (*eks.DescribeNodegroupOutput, error) {
		return c.api.DescribeNodegroup(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) UpdateNodegroupVersion(ctx context.Context, in *eks.UpdateNodegroupVersionInput, o ...func(*eks.Options)) (*eks.UpdateNodegroupVersionOutput, error) {
	return call(ctx, c.f, "eks:UpdateNodegroupVersion", true, func(ctx context.Context) (*eks.UpdateNodegroupVersionOutput, error) {
		return c.api.UpdateNodegroupVersion(ctx, in, o...)
	})
}

type faultySTS struct {
	api awsapi.STS
	f   *Faults
}

func (c faultySTS) GetCallerIdentity(ctx context.Context, in *sts.GetCallerIdentityInput, o ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error) {
	return call(ctx, c.f, "sts:GetCallerIdentity", false, func(ctx context.Context) (*sts.GetCallerIdentityOutput, error) {
		return c.api.GetCallerIdentity(ctx, in, o...)
	})
}

// EKSNodegroups wraps api (the managed node group rollouts' EKS calls).
func (f *Faults) EKSNodegroups(api awsapi.EKSNodegroups) awsapi.EKSNodegroups {
	return faultyEKSNodegroups{api, f}
}

type faultyEKSNodegroups struct {
	api awsapi.EKSNodegroups
	f   *Faults
}

func (c faultyEKSNodegroups) ListClusters(ctx context.Context, in *eks.ListClustersInput, o ...func(*eks.Options)) (*eks.ListClustersOutput, error) {
	return call(ctx, c.f, "eks:ListClusters", false, func(ctx context.Context) (*eks.ListClustersOutput, error) {
		return c.api.ListClusters(ctx, in, o...)
	})
}

func (c faultyEKSNodegroups) ListNodegroups(ctx context.Context, in *eks.ListNodegroupsInput, o ...func(*eks.Options)) (*eks.ListNodegroupsOutput, error) {
	return call(ctx, c.f, "eks:ListNodegroups", false, func(ctx context.Context) (*eks.ListNodegroupsOutput, error) {
		return c.api.ListNodegroups(ctx, in, o...)
	})
}

func (c faultyEKSNodegroups) DescribeNodegroup(ctx context.Context, in *eks.DescribeNodegroupInput, o ...func(*eks.Options)) (*eks.DescribeNodegroupOutput, error) {
	return call(ctx, c.f, "eks:DescribeNodegroup", false, func(ctx context.Context) (*eks.DescribeNodegroupOutput, error) {
		return c.api.DescribeNodegroup(ctx, in, o...)
	})
}

func (c faultyEKSNodegroups) DescribeCluster(ctx context.Context, in *eks.DescribeClusterInput, o ...func(*eks.Options)) (*eks.DescribeClusterOutput, error) {
	return call(ctx, c.f, "eks:DescribeCluster", false, func(ctx context.Context) (*eks.DescribeClusterOutput, error) {
		return c.api.DescribeCluster(ctx, in, o...)
	})
}

func (c faultyEKSNodegroups) UpdateNodegroupVersion(ctx context.Context, in *eks.UpdateNodegroupVersionInput, o ...func(*eks.Options)) (*eks.UpdateNodegroupVersionOutput, error) {
	return call(ctx, c.f, "eks:UpdateNodegroupVersion", true, func(ctx context.Context) (*eks.UpdateNodegroupVersionOutput, error) {
		return c.api.UpdateNodegroupVersion(ctx, in, o...)
	})
}

func (c faultyEKSNodegroups) DescribeUpdate(ctx context.Context, in *eks.DescribeUpdateInput, o ...func(*eks.Options)) (*eks.DescribeUpdateOutput, error) {
	return call(ctx, c.f, "eks:DescribeUpdate", false, func(ctx context.Context) (*eks.DescribeUpdateOutput, error) {
		return c.api.DescribeUpdate(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) ListFargateProfiles(ctx context.Context, in *eks.ListFargateProfilesInput, o ...func(*eks.Options)) (*eks.ListFargateProfilesOutput, error) {
	return call(ctx, c.f, "eks:ListFargateProfiles", false, func(ctx context.Context) (*eks.ListFargateProfilesOutput, error) {
		return c.api.ListFargateProfiles(ctx, in, o...)
	})
}

func (c faultyEKSUpgrade) DescribeFargateProfile(ctx context.Context, in *eks.DescribeFargateProfileInput, o ...func(*eks.Options)) (*eks.DescribeFargateProfileOutput, error) {
	return call(ctx, c.f, "eks:DescribeFargateProfile", false, func(ctx context.Context) (*eks.DescribeFargateProfileOutput, error) {
		return c.api.DescribeFargateProfile(ctx, in, o...)
	})
}
