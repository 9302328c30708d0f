// Package sim is a stateful simulated AWS account — Amazon EC2 Auto Scaling, EC2 launch templates and instances,
// Amazon ECS container instances, services and tasks, Amazon EKS, SSM Parameter Store, Amazon SQS, CloudWatch,
// EventBridge and STS — behind the narrow interfaces of internal/awsapi. The agent's tests and `patch-agent demo`
// use it in place of real AWS, because no emulator offers Auto Scaling, launch templates or ECS container
// instances.
//
// Behaviour follows the AWS documentation; each modelled behaviour cites the guide and page it comes from.
// Time runs on an injected fake clock (k8s.io/utils/clock/testing): nothing happens until the caller moves time
// with Advance, so a 30-minute rollout simulates in milliseconds and every run is deterministic.
//
// The account is one shared world (world.go: the lock, the clock, identifiers, call counts, the scheduler of
// timed behaviour, the watchers and the control loops that settle it) and one type per service, each owning
// its state and the methods that model it:
//   - autoScalingService (autoscaling.go, autoscalingapi.go, activities.go, apply.go, autoscalinginstances.go,
//     launchconfig.go, refresh.go, warmpool.go, writers.go): groups, lifecycle hooks and actions, terminations,
//     completions, heartbeats, capacity writes, launch shortfalls, instance refreshes, warm pools, launch
//     configurations;
//   - ec2Service (ec2.go, images.go): launch templates, instances (Auto Scaling keeps its lifecycle state on
//     the instance records), AMIs;
//   - ecsService (ecs.go, ecsapi.go, ecsclusters.go, ecsdeployment.go, ecsrebalance.go, capacityprovider.go):
//     clusters, container instances, tasks, services, capacity providers, managed instance draining;
//   - eksService (eks.go, eksfargate.go, eksnodegroups.go, eksnodegroupupdate.go, eksupgrade.go): clusters, node
//     groups, Fargate profiles, updates, add-ons, insights;
//   - ssmService (ssm.go, ssmhistory.go), sqsService (sqs.go, sqsattributes.go), cloudWatchService
//     (cloudwatch.go, observability.go), eventBridgeService (eventbridge.go, observability.go) and stsService
//     (sts.go).
//
// One service reaches another through the world, by named methods (an Auto Scaling launch asks ec2 to add
// the instance and ecs to register it; ECS managed draining asks Auto Scaling to complete the lifecycle
// action). Each client (AutoScalingClient, EC2Client, ...) serves its awsapi interfaces over its own service.
// Account embeds the world and every service, so their exported setup and observation helpers are the
// Account's; it adds the clients' constructors, Clock, Options, Calls, ResetCalls and Observe. Organization
// (organization.go) and Faults (faults.go) stand beside the account with locks of their own.
//
// Lock discipline: only exported methods take the world's one lock, through call (an API operation, counted),
// lock (a setup or observation helper) or hold (bookkeeping that runs nothing due), and they release it before
// they return; the unexported methods of the world and its services, and View's methods, run with it held and
// never take it (TestOnlyExportedMethodsTakeTheLock). So the agent may call the account from several
// goroutines.
//
// Errors are smithy API errors (smithy.GenericAPIError, or the SDK's modelled error types where the SDK has
// one) so that internal/awsapi/errors.go classifies them as it classifies real AWS answers.
package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"
	"github.com/aws/smithy-go"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// Options tunes the simulated account. Zero values take the defaults given on each field.
type Options struct {
	// Region and AccountID appear in ARNs, queue URLs and notifications. Defaults: us-east-1, 111122223333.
	Region, AccountID string
	// BootDelay is the time from launch (RunInstances) until the instance is running and leaves Pending:
	// InService when the group has no launching lifecycle hook, Pending:Wait when it has one. Default 90s.
	BootDelay time.Duration
	// AgentConnectDelay is the time from the end of boot until the instance's ECS container agent has registered
	// the container instance ACTIVE and connected. Default 20s.
	AgentConnectDelay time.Duration
	// TaskStartDelay is the time a task spends PENDING before it is RUNNING. Default 10s.
	TaskStartDelay time.Duration
	// TaskStopStageDelay is the time a stopping task spends in each of DEACTIVATING, STOPPING and DEPROVISIONING
	// before it reaches STOPPED. Default 10s.
	TaskStopStageDelay time.Duration
	// TerminateDelay is the time from Terminating:Proceed (EC2 shutting-down) until Terminated. Default 30s.
	TerminateDelay time.Duration
	// MaxTasksPerInstance is how many non-daemon tasks fit on one container instance. Default 10.
	MaxTasksPerInstance int
	// Seed makes generated identifiers (instance ids, tokens, ARNs) differ between accounts. Default 1.
	Seed uint64
	// RefreshTerminatesFirst breaks the instance refresh model on purpose, for the invariant checker's own
	// tests: each old instance is terminated before its replacement launches, whatever MinHealthyPercentage
	// and MaxHealthyPercentage say (what AWS never does at MinHealthyPercentage 100). Never set elsewhere.
	RefreshTerminatesFirst bool
	// RefreshDrawsOutdatedPoolInstances: a scale out during an instance refresh draws warm pool instances that
	// are not on the refresh's configuration, as the group would without a refresh. The User Guide's warm pool
	// pages do not say which a refresh does; by default the model keeps them in the pool (refreshSkipsPoolInstance).
	// Tests of the agent's own guard against old instances from the pool set it.
	RefreshDrawsOutdatedPoolInstances bool
}

func (o *Options) defaults() {
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.AccountID == "" {
		o.AccountID = "111122223333"
	}
	if o.BootDelay <= 0 {
		o.BootDelay = 90 * time.Second
	}
	if o.AgentConnectDelay <= 0 {
		o.AgentConnectDelay = 20 * time.Second
	}
	if o.TaskStartDelay <= 0 {
		o.TaskStartDelay = 10 * time.Second
	}
	if o.TaskStopStageDelay <= 0 {
		o.TaskStopStageDelay = 10 * time.Second
	}
	if o.TerminateDelay <= 0 {
		o.TerminateDelay = 30 * time.Second
	}
	if o.MaxTasksPerInstance <= 0 {
		o.MaxTasksPerInstance = 10
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
}

// Account is one simulated AWS account in one region. Create it with New. It is the shared world and its
// services together: the embedded services' exported setup and observation helpers are the Account's.
type Account struct {
	*world
	*autoScalingService
	*ec2Service
	*ecsService
	*eksService
	*ssmService
	*sqsService
	*cloudWatchService
	*eventBridgeService
	*stsService
}

// New returns an empty account whose time is clk. Options left zero take their defaults.
func New(clk *testingclock.FakeClock, opts Options) *Account {
	opts.defaults()
	w := &world{
		clk:   clk,
		opts:  opts,
		rng:   rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15)),
		calls: map[string]int{},
	}
	w.autoScaling = &autoScalingService{world: w,
		groups:        map[string]*group{},
		actions:       map[string]*lifecycleAction{},
		launchConfigs: map[string]*launchConfiguration{},
		lcGroups:      map[string]*launchConfiguration{},
	}
	w.ec2 = &ec2Service{world: w,
		templates:       map[string]*launchTemplate{},
		instances:       map[string]*instance{},
		unhealthyImages: map[string]bool{},
		images:          map[string]*image{},
	}
	w.ecs = &ecsService{world: w, clusters: map[string]*cluster{}}
	w.eks = &eksService{world: w,
		nodegroups:      map[string]map[string]*nodegroup{},
		fargateProfiles: map[string]map[string]*ekstypes.FargateProfile{},
		eksUpgrades: &eksUpgradeState{updates: map[string]*eksUpdate{}, tokens: map[string]string{}, addons: map[string]map[string]*eksAddon{},
			catalog: map[string][]EKSAddonVersion{}, insights: map[string]map[string]*eksInsight{}},
	}
	w.ssm = &ssmService{world: w, params: map[string]*parameter{}}
	w.sqs = &sqsService{world: w, queues: map[string]*queue{}, queueByName: map[string]*queue{}}
	w.cloudWatch = &cloudWatchService{world: w, alarms: map[string]string{}}
	w.eventBridge = &eventBridgeService{world: w}
	w.sts = &stsService{world: w}
	return &Account{world: w, autoScalingService: w.autoScaling, ec2Service: w.ec2, ecsService: w.ecs, eksService: w.eks,
		ssmService: w.ssm, sqsService: w.sqs, cloudWatchService: w.cloudWatch, eventBridgeService: w.eventBridge, stsService: w.sts}
}

// Clock returns the fake clock the account runs on.
func (a *Account) Clock() *testingclock.FakeClock { return a.clk }

// Options returns the effective options (defaults filled in).
func (a *Account) Options() Options { return a.opts }

// AutoScaling returns the account's Amazon EC2 Auto Scaling API.
func (a *Account) AutoScaling() awsapi.AutoScaling { return &AutoScalingClient{s: a.autoScaling} }

// EC2 returns the account's Amazon EC2 API (launch templates, instances).
func (a *Account) EC2() awsapi.EC2 { return &EC2Client{s: a.ec2} }

// ECS returns the account's Amazon ECS API.
func (a *Account) ECS() awsapi.ECS { return &ECSClient{s: a.ecs} }

// SSM returns the account's AWS Systems Manager Parameter Store API.
func (a *Account) SSM() awsapi.SSM { return &SSMClient{s: a.ssm} }

// SQS returns the account's Amazon SQS API.
func (a *Account) SQS() awsapi.SQS { return &SQSClient{s: a.sqs} }

// CloudWatch returns the account's CloudWatch client (alarms).
func (a *Account) CloudWatch() awsapi.CloudWatch { return &CloudWatchClient{s: a.cloudWatch} }

// Calls returns how many API calls were made per operation, keyed "service:Operation"
// (for example "autoscaling:DescribeAutoScalingGroups"). Setup and observation helpers are not counted.
func (a *Account) Calls() map[string]int {
	defer a.hold()()
	out := make(map[string]int, len(a.calls))
	for k, v := range a.calls {
		out[k] = v
	}
	return out
}

// ResetCalls sets every API call count back to zero.
func (a *Account) ResetCalls() {
	defer a.hold()()
	a.calls = map[string]int{}
}

// apiError returns a client-fault smithy API error with AWS's code and message.
func apiError(code, format string, args ...any) error {
	return &smithy.GenericAPIError{Code: code, Message: fmt.Sprintf(format, args...), Fault: smithy.FaultClient}
}

// awsTime formats t as AWS notifications do: RFC 3339 in UTC with milliseconds ("2024-03-04T09:15:31.102Z").
func awsTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func ptr[T any](v T) *T { return &v }
