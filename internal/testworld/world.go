package testworld

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld/checker"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"
)

// AMIs of the demo: the fleet starts on ImageA; the golden-AMI parameter then names ImageB.
const (
	ImageA = "ami-0a1a2a3a4a5a6a7a8"
	ImageB = "ami-0b1b2b3b4b5b6b7b8"
)

// Names used by the demo account.
const (
	Parameter = "/golden-ami/ecs/al2023"
	Cluster   = "demo"
	GroupName = "demo-ecs-asg"
	QueueName = "patch-agent"
	// WakeUpQueueName is the simulated wake-up queue of Spec.WakeUpQueue (the same dead-letter queue).
	WakeUpQueueName = "patch-agent-wake-up"
	HookName        = "patch-agent-drain"
	LaunchHookName  = "patch-agent-launch"
)

// GroupSummary is one group's line in the final summary.
//
// Group, Phase and Step are status's words for the group, its phase and its step (operator.StatusRow: the
// same values), so that a script reads the demo's summary and `status -o json` with one vocabulary. Name,
// State and Steps are the summary's older keys, kept for compatibility: Name and State carry the values of
// Group and Phase, Steps counts transitions.
type GroupSummary struct {
	Name                      string `json:"name"`
	Group                     string `json:"group"`
	Platform                  string `json:"platform"`
	TargetImageID             string `json:"targetImageId"`
	Desired                   int32  `json:"desired"`
	Instances                 int    `json:"instances"`
	OnTarget                  int    `json:"onTarget"`
	MinInServiceDuringRollout int    `json:"minInServiceDuringRollout"`
	// State is the rollout's phase (state.Phase; the table's PHASE column); Steps the transitions written
	// (state.Rollout.Steps; the table's TRANSITIONS column).
	State  string `json:"state"`
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
	Steps  int    `json:"steps"`
	// Step is the replacement step of the instance being replaced (state.Rollout.Current), "" when none.
	Step string `json:"step"`

	// StatusImageID and OnStatusImage are the AMI the table's TARGET AMI shows and ON TARGET counts, as status
	// shows them (state.Rollout.StatusImages: a rollback's is the AMI it goes to, where TargetImageID stays
	// the AMI rolled back from).
	StatusImageID string `json:"statusImageId"`
	OnStatusImage int    `json:"onStatusImage"`

	// AvailabilityZones counts the zones of the group's in-service instances at the end.
	AvailabilityZones int `json:"availabilityZones"`
}

// Summary is what `patch-agent demo --json` prints.
type Summary struct {
	Scenario string `json:"scenario"`
	// Expected is the state the scenario's group must end in for the demo to succeed.
	Expected string         `json:"expectedState"`
	Groups   []GroupSummary `json:"groups"`
	// Restarts counts agent restarts (the crash scenario kills the agent after every step transition).
	Restarts            int           `json:"restarts"`
	InvariantViolations int           `json:"invariantViolations"`
	Violations          []string      `json:"violations"`
	SimulatedSeconds    float64       `json:"simulatedSeconds"`
	Messages            MessageCounts `json:"messages"`
	// Metrics is the last value of each metric the demo published to the simulated CloudWatch, by
	// metrics.SeriesKey (counters: their increase over the run). The JSON has them as a list of
	// {name, dimensions, value} (MarshalJSON), not by these keys.
	Metrics map[string]float64 `json:"-"`
	// Timeline holds the samples of Options.Timeline (not in the JSON).
	Timeline []TimelineSample `json:"-"`
}

// MessageCounts are the consumer's counters at the end.
type MessageCounts struct {
	Processed int64 `json:"processed"`
	Ignored   int64 `json:"ignored"`
	Failed    int64 `json:"failed"`
}

// World is a simulated account with an agent, ready to run. Scenario tests build on it.
type World struct {
	Account  *sim.Account
	Agent    *agent.Agent
	Store    state.Store
	QueueURL string
	// WakeUpQueueURL is the wake-up queue of Spec.WakeUpQueue; "" without one.
	WakeUpQueueURL string
	Checker        *checker.Checker
	// Restarts counts the agent incarnations replaced by Restart.
	Restarts int
	// AgentErrors counts the agent iterations that returned an error (only with Spec.Faults; see Step).
	AgentErrors int
	// pastMessages are the message counts of agent incarnations replaced by Restart.
	pastMessages MessageCounts
	// Kube plays the Kubernetes side of the EKS groups (nil without EKS groups).
	Kube *kubesim.KubeSim

	Clients   agent.Clients
	settings  agent.Settings
	log       *zap.Logger
	eksParams map[string]string // EKS group with an `auto` source -> the public parameter it resolves to
	Arch      string            // architecture of the world's AMIs: that of the first group's instance type
	faults    *sim.Faults       // Spec.Faults
	fuse      *Fuse             // the fuse of the running incarnation (Restart), nil: unfused
	// oneAtATime: every incarnation's consumers handle one message at a time (oneMessageAtATime)
	oneAtATime bool
	// nodegroups are Spec.Nodegroups (RepeatedEffects judges their updates).
	Nodegroups []sim.EKSNodegroupSpec
}

// GroupSetup is one Auto Scaling group of a world: an ECS cluster's capacity, or an EKS self-managed node
// group, on a launch template.
type GroupSetup struct {
	Name, Cluster, Parameter string
	Min, Max, Desired        int32
	// Platform is model.PlatformECS (default) or model.PlatformEKS: the instances join EKS cluster
	// Cluster as Kubernetes nodes (World.Kube), and Parameter may be "auto".
	Platform string
	// InstanceType of the launch template. Default m7g.large.
	InstanceType string
	// TemplateVersion is how the group references its launch template: "$Default" (default), "$Latest" or "1".
	TemplateVersion string
	// MixedInstances references the template through a mixed instances policy; Overrides are its instance
	// types.
	MixedInstances bool
	Overrides      []string
	// InstanceRequirements makes the mixed instances policy select instance types by attributes (MixedInstances
	// only).
	InstanceRequirements bool
	// HeartbeatTimeout of the group's terminating lifecycle hook to the agent's queue; 0 = 300 s; -1 = no hook.
	HeartbeatTimeout time.Duration
	// NoLaunchingHook leaves off the agent's launching lifecycle hook, which every group with a terminating
	// hook otherwise gets (LaunchHookName, to the agent's queue, the same HeartbeatTimeout, DefaultResult
	// ABANDON: each new instance waits in Pending:Wait until it serves in its cluster). Without it the group is
	// not rolled: its status names the missing hook.
	NoLaunchingHook bool
	// Unmanaged leaves the opt-in tag off: the agent must never touch the group.
	Unmanaged bool
	// Tags are added to the group's tags (policy tags such as patch-agent/min-ami-age).
	Tags map[string]string
	// CapacityProvider makes the group an ECS capacity provider (managed scaling, termination protection,
	// managed draining as set).
	CapacityProvider *sim.CapacityProviderSpec
}

// Spec describes a world: a simulated account and the agent running against it.
type Spec struct {
	Sim    sim.Options
	Policy model.Policy
	Groups []GroupSetup
	// Services are placed on the cluster of the first group: name -> task count (daemon services: -1).
	Services map[string]int
	// ServiceDeployments set the deployment configuration and placement rules of some of Services.
	ServiceDeployments map[string]sim.ServiceDeployment
	// InitialImage is the AMI every launch template and parameter starts on. Default ImageA.
	InitialImage string
	Log          *zap.Logger
	// Wrap, when set, wraps the agent's clients (fault injection in tests).
	Wrap func(agent.Clients) agent.Clients
	// Faults, when set, injects faults into every AWS call of the agent (its clients, and the EKS and
	// instance type calls of the EKS platform) and counts them; applied before Wrap.
	Faults *sim.Faults
	// Store, when set, is the agent's store (a memory store to inspect after a demo, the DynamoDB store on
	// kumo in integration tests); nil: a new memory store.
	Store state.Store
	// SQS and QueueURL, when set, make the agent consume that queue (kumo) instead of the simulated one.
	// Lifecycle hooks still notify the simulated queue, so use them with HeartbeatTimeout -1 groups.
	SQS      awsapi.SQS
	QueueURL string
	// Observer, when set, is the agent's observer (metrics, notifications).
	Observer model.Observer
	// WakeUpEvents routes the account's wake-up events to the agent's queue, as the stack's EventBridge rules
	// do (sim.Account.RouteWakeUpEvents), and makes the agent's reconcile interval the production safety poll
	// (config.SafetyPollInterval, 2 minutes). Drive such a world with RunEvents. LoseWakeUpEvents keeps the
	// safety poll but routes no event: every one is lost.
	WakeUpEvents, LoseWakeUpEvents bool
	// WakeUpQueue gives the agent a wake-up queue of its own (WakeUpQueueName, --wake-up-queue-url), as the
	// stack does: WakeUpEvents then routes the wake-up events there instead of to the agent's queue.
	WakeUpQueue bool
	// EKSVersion is the control plane version of the EKS clusters of EKS groups. Default EKSVersion.
	EKSVersion string
	// Kube, when set, is the Kubernetes API of the EKS groups (a real kube-apiserver in tests); nil: client-go's
	// fake clientset.
	Kube kubernetes.Interface
	// KubeWorkload runs on the EKS groups' nodes.
	KubeWorkload kubesim.KubeWorkload
	// AllowedAMIOwners is the agent's --allowed-ami-owners.
	AllowedAMIOwners []string
	// Nodegroups are EKS managed node groups (their clusters are created at EKSVersion when missing,
	// their tags opt them in or not): the agent gets the Amazon EKS client (agent.Clients.EKSNodegroups).
	// Their Auto Scaling groups are not the checker's managed groups: EKS, not the agent, drains and replaces
	// their nodes (and the account models no Kubernetes side for them). Publish their releases with
	// sim.Account.PublishEKSRelease.
	Nodegroups []sim.EKSNodegroupSpec
	// Workers is the agent's Settings.Workers (targets advanced at once); 0: 1, one target after another, so
	// that a run on the simulated clock makes the same calls in the same order every time.
	Workers int
	// PassClock is the agent's Settings.PassClock (what measures its pass budget); nil: the world's clock.
	PassClock clock.PassiveClock
	// LeaseTTL is the agent's Settings.LeaseTTL (`--lease-ttl`); 0: state.DefaultLeaseTTL.
	LeaseTTL time.Duration
}

// DemoSpec is the default demo: ECS cluster "demo" on group "demo-ecs-asg" (desired/min 3, max 6) running
// ImageA with a terminating lifecycle hook to the agent's queue, a service of 6 tasks and a daemon service;
// and EKS self-managed node group "demo-eks-nodes" (desired/min 3, max 6, arm64 m7g.large) of cluster
// "demo-eks" (Kubernetes 1.31) with AMI source `auto`, the same hook, a Deployment of 6 pods under a
// PodDisruptionBudget minAvailable 5 and a DaemonSet.
func DemoSpec() Spec {
	return Spec{
		Policy: model.DefaultPolicy(),
		Groups: []GroupSetup{{Name: GroupName, Cluster: Cluster, Parameter: Parameter, Min: 3, Max: 6, Desired: 3},
			{Name: EKSGroupName, Platform: model.PlatformEKS, Cluster: EKSCluster, Parameter: providers.ParameterAuto, Min: 3, Max: 6, Desired: 3}},
		Services:     map[string]int{"web": 6, "log-router": -1},
		KubeWorkload: kubesim.KubeWorkload{Replicas: 6, MinAvailable: 5, DaemonSet: true},
	}
}

// NewWorld builds the default demo world.
func NewWorld(log *zap.Logger) (*World, error) {
	s := DemoSpec()
	s.Log = log
	return Build(s)
}

// Build creates the simulated account of spec, starting at 2026-11-30T02:00Z, and an agent on it with an
// in-memory store.
func Build(spec Spec) (*World, error) {
	log := spec.Log
	if log == nil {
		log = zap.NewNop()
	}
	image := spec.InitialImage
	if image == "" {
		image = ImageA
	}
	clk := testingclock.NewFakeClock(time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC))
	acct := sim.New(clk, spec.Sim)
	queue := acct.CreateQueue(QueueName, 5, QueueName+"-dlq")
	baseline := map[string]int32{}
	w := &World{Account: acct, eksParams: map[string]string{}}
	eksVersion := spec.EKSVersion
	if eksVersion == "" {
		eksVersion = EKSVersion
	}
	for _, g := range spec.Groups {
		platform, ecsCluster := model.PlatformECS, g.Cluster
		instanceType := g.InstanceType
		if instanceType == "" {
			instanceType = "m7g.large"
		}
		param := g.Parameter
		if g.Platform == model.PlatformEKS {
			platform, ecsCluster = model.PlatformEKS, ""
			acct.CreateEKSCluster(g.Cluster, eksVersion)
			if w.Kube == nil {
				w.Kube = kubesim.NewKubeSim(acct, spec.Kube, spec.KubeWorkload)
			}
			w.Kube.AddGroup(g.Name, g.Cluster)
			if param == providers.ParameterAuto {
				// A source that cannot be built (C12 tests) gets no parameter: the agent refuses the group.
				if path, err := AutoParameter(context.Background(), w, eksVersion, instanceType, g.Tags); err == nil {
					param, w.eksParams[g.Name] = path, path
				}
			}
		} else {
			acct.CreateECSCluster(g.Cluster)
		}
		lt := acct.CreateLaunchTemplate(g.Name+"-lt", image, instanceType)
		if param != providers.ParameterAuto {
			acct.PutParameter(param, image)
		}
		version := g.TemplateVersion
		if version == "" {
			version = "$Default"
		}
		tags := map[string]string{model.TagEnabled: "true", model.TagPlatform: platform,
			model.TagCluster: g.Cluster, model.TagParameter: g.Parameter}
		if g.Unmanaged {
			tags = map[string]string{"team": "other"}
		}
		for k, v := range g.Tags {
			tags[k] = v
		}
		gs := sim.GroupSpec{Name: g.Name, Min: g.Min, Max: g.Max, Desired: g.Desired, LaunchTemplateID: lt,
			LaunchTemplateVersion: version, MixedInstances: g.MixedInstances, Overrides: g.Overrides, InstanceRequirements: g.InstanceRequirements, Tags: tags, ECSCluster: ecsCluster,
			CapacityProvider: g.CapacityProvider}
		if cp := g.CapacityProvider; cp != nil && cp.ManagedTerminationProtection {
			gs.NewInstancesProtectedFromScaleIn = true
		}
		if g.HeartbeatTimeout >= 0 {
			hb := g.HeartbeatTimeout
			if hb == 0 {
				hb = 300 * time.Second
			}
			gs.Hooks = []sim.HookSpec{{Name: HookName, Transition: sim.TransitionTerminating, HeartbeatTimeout: hb,
				DefaultResult: sim.ResultContinue, QueueURL: queue}}
			if !g.NoLaunchingHook {
				gs.Hooks = append(gs.Hooks, sim.HookSpec{Name: LaunchHookName, Transition: sim.TransitionLaunching, HeartbeatTimeout: hb,
					DefaultResult: sim.ResultAbandon, QueueURL: queue})
			}
		}
		if err := acct.CreateGroup(gs); err != nil {
			return nil, fmt.Errorf("creating group %s: %w", g.Name, err)
		}
		if !g.Unmanaged {
			baseline[g.Name] = g.Desired
		}
	}
	w.Nodegroups = spec.Nodegroups
	clusters := map[string]bool{}
	for _, g := range spec.Groups {
		clusters[g.Cluster] = g.Platform == model.PlatformEKS
	}
	for _, ng := range spec.Nodegroups {
		if !clusters[ng.Cluster] {
			acct.CreateEKSCluster(ng.Cluster, eksVersion)
			clusters[ng.Cluster] = true
		}
		if _, err := acct.CreateEKSNodegroup(ng); err != nil {
			return nil, fmt.Errorf("creating managed node group %s: %w", ng.Name, err)
		}
	}
	w.Arch = "x86_64"
	if len(spec.Groups) > 0 {
		it := spec.Groups[0].InstanceType
		if it == "" {
			it = "m7g.large"
		}
		if arch, err := (&eks.Architectures{API: acct.EC2InstanceTypes()}).For(context.Background(), []string{it}); err == nil {
			w.Arch = arch
		}
	}
	for _, id := range []string{image, ImageA, ImageB} {
		w.RegisterImage(id, false)
	}
	w.Checker = checker.NewChecker(acct, baseline)
	if w.Kube != nil {
		if err := w.Kube.Setup(context.Background()); err != nil {
			return nil, err
		}
		if err := w.Kube.Sync(context.Background(), true); err != nil {
			return nil, fmt.Errorf("simulated Kubernetes: %w", err)
		}
		w.Checker.EKS = map[string]bool{}
		for _, g := range spec.Groups {
			if g.Platform == model.PlatformEKS && !g.Unmanaged {
				w.Checker.EKS[g.Name] = true
			}
		}
		kube := w.Kube
		w.Checker.Nodes = func() (map[string]kubesim.NodeObservation, error) { return kube.Observe(context.Background()) }
	}
	if len(spec.Groups) > 0 && spec.Groups[0].Platform != model.PlatformEKS {
		names := make([]string, 0, len(spec.Services))
		for n := range spec.Services {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			count := spec.Services[n]
			acct.CreateService(spec.Groups[0].Cluster, n, max(count, 0), count < 0)
			if d, ok := spec.ServiceDeployments[n]; ok {
				acct.SetServiceDeployment(spec.Groups[0].Cluster, n, d)
			}
			if count > 0 {
				if w.Checker.Workloads == nil {
					w.Checker.Workloads = map[string]int{}
				}
				w.Checker.Workloads[spec.Groups[0].Cluster+"/"+n] = count
			}
		}
	}
	for _, g := range spec.Groups {
		if cp := g.CapacityProvider; cp != nil && cp.ManagedScaling {
			if w.Checker.Managed == nil {
				w.Checker.Managed = map[string]bool{}
			}
			w.Checker.Managed[g.Name] = true
		}
		if cp := g.CapacityProvider; cp != nil && cp.ManagedDraining {
			if w.Checker.ECSDrains == nil {
				w.Checker.ECSDrains = map[string]bool{}
			}
			w.Checker.ECSDrains[g.Name] = true
		}
	}
	policy := spec.Policy
	if policy == (model.Policy{}) {
		policy = model.DefaultPolicy()
	}
	w.Checker.ClusterBudget = max(policy.ClusterBudget, 1) // invariant 3 per cluster holds the agent to its budget
	for _, g := range spec.Groups {
		if b, err := model.ParseBatchSize(g.Tags[model.TagBatchSize]); err == nil && !g.Unmanaged && b != (model.BatchSize{}) {
			if w.Checker.BatchSizes == nil {
				w.Checker.BatchSizes = map[string]int{}
			}
			w.Checker.BatchSizes[g.Name] = b.Of(g.Desired) // invariant 3 per group holds it to its own batch size
		}
	}
	store := spec.Store
	if store == nil {
		store = state.NewMemory()
	}
	clients := agent.Clients{AutoScaling: acct.AutoScaling(), EC2: acct.EC2(), ECS: acct.ECS(), SSM: acct.SSM(), SQS: acct.SQS(),
		CloudWatch: acct.CloudWatch(), InstanceTypes: acct.EC2InstanceTypes()}
	hookQueue := queue
	if spec.SQS != nil {
		clients.SQS, queue = spec.SQS, spec.QueueURL
	}
	if f := spec.Faults; f != nil {
		clients = agent.Clients{AutoScaling: f.AutoScaling(clients.AutoScaling), EC2: f.EC2(clients.EC2), ECS: f.ECS(clients.ECS),
			SSM: f.SSM(clients.SSM), SQS: f.SQS(clients.SQS), CloudWatch: f.CloudWatch(clients.CloudWatch),
			InstanceTypes: f.EC2InstanceTypes(clients.InstanceTypes)}
		w.faults = f
	}
	if len(spec.Nodegroups) > 0 {
		clients.EKSNodegroups = acct.EKSNodegroups()
		if f := spec.Faults; f != nil {
			clients.EKSNodegroups = f.EKSNodegroups(clients.EKSNodegroups)
		}
	}
	if spec.Wrap != nil {
		clients = spec.Wrap(clients)
	}
	settings := agent.Settings{QueueURL: queue, ReconcileInterval: 5 * time.Second, Policy: policy, Observer: spec.Observer,
		AccountID: acct.Options().AccountID, AllowedAMIOwners: spec.AllowedAMIOwners, Workers: max(spec.Workers, 1), PassClock: spec.PassClock, LeaseTTL: spec.LeaseTTL} // a kumo queue URL names another account
	wakeQueue := queue
	if spec.WakeUpQueue {
		wakeQueue = acct.CreateQueue(WakeUpQueueName, 5, QueueName+"-dlq")
		settings.WakeUpQueueURL, w.WakeUpQueueURL = wakeQueue, wakeQueue
	}
	if spec.WakeUpEvents || spec.LoseWakeUpEvents {
		settings.ReconcileInterval = config.SafetyPollInterval
		if !spec.LoseWakeUpEvents {
			acct.RouteWakeUpEvents(wakeQueue) // from now on: the setup sends none
		}
	}
	w.Store, w.QueueURL, w.Clients, w.settings, w.log = store, queue, clients, settings, log
	w.Checker.Held = func(group, instance, hook string) bool {
		rec, err := store.GetHook(context.Background(), model.ActionKey(group, instance, hook))
		return err == nil && rec.State != state.HookCompleted && !rec.DrainHeldAt.IsZero()
	}
	w.Agent = agent.New(clients, w.agentSettings(nil), store, clk, log)
	if w.faults != nil {
		// One message at a time: the injector's draws then follow the same calls in every run of a seed
		// (messages handled concurrently would take each other's draws in any order).
		w.oneAtATime = true
		w.oneMessageAtATime()
	}
	w.Checker.DrainTimeout, w.Checker.HealthTimeout = policy.DrainTimeout, policy.HealthTimeout
	w.Checker.Queue = hookQueue // the hooks notify the simulated queue, also when the agent consumes another
	w.Checker.Start()
	return w, nil
}

// registerImage registers id, when EC2 does not know it yet, as a release of the world's AMI line: Amazon
// Linux 2023 for ECS of the world's architecture, available, owned by Amazon when public (an AWS public
// parameter's AMI) and else by the account (a golden AMI built on it), so that it passes the AMI gate.
// Scenarios that test the gate register their AMIs themselves first.
func (w *World) RegisterImage(id string, public bool) {
	if id == "" || w.Account.ImageRegistered(id) {
		return
	}
	created := w.Account.Clock().Now().Add(-24 * time.Hour)
	name := fmt.Sprintf("al2023-ami-ecs-hvm-2023.0.%s-kernel-6.1-%s", created.Format("20060102"), w.Arch)
	spec := sim.ImageSpec{ID: id, Name: name, Architecture: w.Arch, Created: created,
		Description: "Amazon Linux AMI 2023.0 " + w.Arch + " ECS HVM EBS"}
	if !public {
		spec.OwnerID = w.Account.Options().AccountID
		spec.Name = "golden-" + name
		spec.Description = "Golden AMI built on " + name
	}
	w.Account.RegisterImage(spec)
}

// PublishAMI sets the parameter to image and puts the EventBridge "Parameter Store Change" event for it on
// the agent's queue, as EventBridge would for a parameter in the account. An image EC2 does not know yet is
// registered as the account's golden AMI (registerImage).
func (w *World) PublishAMI(param, image string) {
	w.RegisterImage(image, false)
	w.Account.PutParameter(param, image)
	now := w.Account.Clock().Now().UTC().Format(time.RFC3339)
	body := fmt.Sprintf(`{"version":"0","id":"%d","detail-type":"Parameter Store Change","source":"aws.ssm","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:ssm:us-east-1:111122223333:parameter%s"],"detail":{"operation":"Update","name":%q,"type":"String","description":"Golden AMI for ECS hosts"}}`,
		w.Account.Clock().Now().UnixNano(), now, param, param)
	w.Account.SendMessage(w.QueueURL, body)
}

// RegisterAMI makes EC2 know image as an available AMI of the account (the AMI gate asks), without touching
// any parameter: for tests that set a parameter without its change event.
func (w *World) RegisterAMI(image string) { w.RegisterImage(image, false) }

// DeleteAMIParameter deletes an AMI parameter and puts the Parameter Store Change event of the deletion
// (detail operation "Delete"; AWS Systems Manager User Guide, "Monitoring Systems Manager events with Amazon
// EventBridge") on the agent's queue.
func (w *World) DeleteAMIParameter(param string) {
	w.Account.DeleteParameter(param)
	now := w.Account.Clock().Now().UTC().Format(time.RFC3339)
	body := fmt.Sprintf(`{"version":"0","id":"del-%d","detail-type":"Parameter Store Change","source":"aws.ssm","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:ssm:us-east-1:111122223333:parameter%s"],"detail":{"operation":"Delete","name":%q,"type":"String","description":"Golden AMI for ECS hosts"}}`,
		w.Account.Clock().Now().UnixNano(), now, param, param)
	w.Account.SendMessage(w.QueueURL, body)
}

// PublishPublicAMI sets a public parameter (/aws/service/...) to image. Public parameters send no events
// into an account; the EventBridge schedule rule's "Scheduled Event" is put on the agent's queue, so the
// agent resolves every parameter now instead of at its next poll. An image EC2 does not know yet is registered
// as Amazon's (registerImage).
func (w *World) PublishPublicAMI(param, image string) {
	w.RegisterImage(image, true)
	w.Account.PutParameter(param, image)
	now := w.Account.Clock().Now().UTC().Format(time.RFC3339)
	body := fmt.Sprintf(`{"version":"0","id":"tick-%d","detail-type":"Scheduled Event","source":"aws.events","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:events:us-east-1:111122223333:rule/patch-agent-schedule"],"detail":{}}`,
		w.Account.Clock().Now().UnixNano(), now)
	w.Account.SendMessage(w.QueueURL, body)
}

// Step runs one agent iteration, checks the invariants, then advances simulated time by tick (and lets the
// simulated Kubernetes nodes of EKS groups follow).
//
// With Spec.Faults an agent iteration that fails (an injected fault reached the top of the loop) is counted
// in AgentErrors and the world goes on, as Run logs it and goes on with the next tick. An incarnation whose
// Fuse (Restart) blew is replaced by a fresh, unfused one on the same store, queue and account.
func (w *World) Step(ctx context.Context, tick time.Duration) error {
	if err := w.Agent.RunOnce(ctx); err != nil {
		switch {
		case w.fuse != nil && w.fuse.Blown(): // the incarnation crashed: restarted below
		case w.faults == nil:
			return err
		default:
			w.AgentErrors++
		}
	}
	if w.fuse != nil && w.fuse.Blown() {
		w.Restart(nil) // a fresh, unfused incarnation resumes from the store
	}
	w.Checker.Check()
	w.Account.Advance(tick)
	if err := w.SyncKube(ctx); err != nil {
		return err
	}
	w.Checker.Check()
	return nil
}

// Summarize builds the summary of every group of the checker, with the violations recorded so far (and those of
// the checker's Finish, once it ran).
func (w *World) Summarize(ctx context.Context, start time.Time) Summary {
	s := Summary{SimulatedSeconds: w.Account.Clock().Since(start).Seconds()}
	names := make([]string, 0, len(w.Checker.Baseline))
	for n := range w.Checker.Baseline {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		g := w.Account.Group(name)
		r, _ := w.Store.GetRollout(ctx, name)
		gs := GroupSummary{Name: name, Platform: r.Platform, TargetImageID: r.TargetImageID, Desired: g.Desired,
			Instances: len(g.Instances), MinInServiceDuringRollout: w.Checker.MinServing[name], State: r.Phase.String(),
			Reason: r.Reason, Steps: r.Steps, Group: name, Phase: r.Phase.String()}
		if r.Current != nil {
			gs.Step = string(r.Current.Step)
		}
		gs.StatusImageID, _, _ = r.StatusImages()
		zones := map[string]bool{}
		for _, i := range g.Instances {
			if i.LifecycleState == "InService" && i.ImageID == r.TargetImageID {
				gs.OnTarget++
			}
			if i.LifecycleState == "InService" && i.ImageID == gs.StatusImageID {
				gs.OnStatusImage++
			}
			if i.LifecycleState == "InService" {
				zones[i.AvailabilityZone] = true
			}
		}
		gs.AvailabilityZones = len(zones)
		s.Groups = append(s.Groups, gs)
	}
	all := append(append([]checker.Violation(nil), w.Checker.Violations...), w.Checker.Final...)
	for _, v := range all {
		s.Violations = append(s.Violations, v.String())
	}
	s.InvariantViolations = len(all)
	s.Restarts = w.Restarts
	s.Messages = w.pastMessages
	for _, c := range w.Agent.Consumers() {
		s.Messages.Processed += c.Stats.Processed.Load()
		s.Messages.Ignored += c.Stats.Ignored.Load()
		s.Messages.Failed += c.Stats.Failed.Load()
	}
	return s
}

// messageStats is the message counters of the demo's metrics, as `patch-agent run` wires them: every consumer
// of the current agent added up (agent.Agent.Consumers: the main queue's and, with Spec.WakeUpQueue, the
// wake-up queue's), read afresh at each collect so that it follows an agent Restart replaced.
func (w *World) MessageStats() *events.Stats {
	var stats []*events.Stats
	for _, c := range w.Agent.Consumers() {
		stats = append(stats, &c.Stats)
	}
	return events.SumStats(stats...)
}

// JSON renders the summary for --json (MarshalJSON).
func (s Summary) JSON() ([]byte, error) { return json.MarshalIndent(s, "", "  ") }

// RunUntil steps the world (agent iteration, invariant check, tick of simulated time) until done reports
// true or limit simulated time has passed. It reports whether done became true.
func (w *World) RunUntil(ctx context.Context, tick, limit time.Duration, done func() bool) (bool, error) {
	end := w.Account.Clock().Now().Add(limit)
	for w.Account.Clock().Now().Before(end) {
		if done() {
			return true, nil
		}
		if err := w.Step(ctx, tick); err != nil {
			return false, err
		}
	}
	return done(), nil
}

// Rollout returns a group's rollout record (the zero record when there is none).
func (w *World) Rollout(ctx context.Context, group string) state.Rollout {
	r, _ := w.Store.GetRollout(ctx, group)
	return r
}

// NewReplica starts another agent replica named owner on the world's store, queue and account (for
// multi-replica scenarios). The world's own agent keeps running.
func (w *World) NewReplica(owner string) *agent.Agent {
	s := w.agentSettings(nil)
	s.OwnerID = owner
	return w.sameRuns(agent.New(w.Clients, s, w.Store, w.Account.Clock(), w.log))
}

// NewReplicaWith starts another agent replica named owner like NewReplica, on its own clock and store (a
// wrapper of the world's store): replicas whose clocks are skewed, or that stall, in lease tests.
func (w *World) NewReplicaWith(owner string, clk clock.Clock, store state.Store) *agent.Agent {
	s := w.agentSettings(nil)
	s.OwnerID = owner
	return w.sameRuns(agent.New(w.Clients, s, store, clk, w.log))
}

// sameRuns makes a of a world that asks for it (oneAtATime: faults, a fuse) handle one message at a time, as
// the world's own incarnations do (oneMessageAtATime), and returns it.
func (w *World) sameRuns(a *agent.Agent) *agent.Agent {
	if w.oneAtATime {
		for _, c := range a.Consumers() {
			c.Concurrency = 1
		}
	}
	return a
}

// allStopped reports whether stop holds for the rollout of every managed group.
func (w *World) AllStopped(ctx context.Context, stop func(state.Rollout, *World) bool) bool {
	for name := range w.Checker.Baseline {
		r, err := w.Store.GetRollout(ctx, name)
		if err != nil || !stop(r, w) {
			return false
		}
	}
	return true
}

// RunFor runs the agent for d of simulated time: iterations of at most agentTick each (World.Step).
func (w *World) RunFor(ctx context.Context, d time.Duration) error {
	for d > 0 {
		tick := min(d, agentTick)
		if err := w.Step(ctx, tick); err != nil {
			return err
		}
		d -= tick
	}
	return ctx.Err()
}

// agentTick is the longest simulated time between two agent iterations of AgentUpgradeRunner's waits.
const agentTick = 15 * time.Second

// groupNames returns the managed groups of the world, sorted.
func (w *World) GroupNames() []string {
	names := make([]string, 0, len(w.Checker.Baseline))
	for n := range w.Checker.Baseline {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// consumerLongPoll is how long the agent's consumer waits on one receive (events.Consumer.Run): held
// lifecycle actions are looked at again at least this often, so RunEvents never moves the clock further in
// one step.
const consumerLongPoll = 20 * time.Second

// sameInstantSteps bounds how many steps RunEvents takes without moving the clock while messages arrive.
const sameInstantSteps = 10

// RunEvents drives the agent as Run does when wake-up events end its waits (Spec.WakeUpEvents): each step
// is one agent.Agent.Step (receive, then the safety poll when due, else the woken targets); while the queue
// has visible messages (a long poll would return them at once) the next step follows at the same instant,
// otherwise the clock moves to the first of: the account's next timed event (a boot, an agent connecting, a task's next
// lastStatus — which may send a wake-up event), the agent's next look (safety poll, end of a timed wait),
// and one long poll later. It stops when done returns true or limit has passed, and reports whether done.
// The checker judges every step, and a crashed incarnation (a blown Fuse) is replaced, as in Step.
func (w *World) RunEvents(ctx context.Context, limit time.Duration, done func() bool) (bool, error) {
	clk := w.Account.Clock()
	end := clk.Now().Add(limit)
	same := 0 // steps at the same instant
	for clk.Now().Before(end) {
		if done() {
			return true, nil
		}
		next, err := w.Agent.Step(ctx)
		if w.fuse != nil && w.fuse.Blown() {
			w.Restart(nil) // the incarnation crashed: a fresh, unfused one resumes from the store (as Step)
			err = nil
		}
		if err != nil {
			return false, err
		}
		w.Checker.Check()
		// A long poll returns as soon as a message is visible: look again at once, a few times at most (a
		// message the agent leaves visible must not stop time).
		if w.queuesVisible() > 0 && same < sameInstantSteps {
			same++
			continue
		}
		same = 0
		now := clk.Now()
		to := now.Add(consumerLongPoll)
		if end.Before(to) {
			to = end
		}
		if next.After(now) && next.Before(to) {
			to = next
		}
		if at, ok := w.Account.NextEventAt(); ok && at.After(now) && at.Before(to) {
			to = at
		}
		if !to.After(now) {
			to = now.Add(time.Millisecond) // the agent looked already: let the world move on
		}
		w.Account.Advance(to.Sub(now))
		if err := w.SyncKube(ctx); err != nil {
			return false, err
		}
		w.Checker.Check()
	}
	return done(), nil
}

// queuesVisible returns how many messages are visible on the agent's queue and its wake-up queue.
func (w *World) queuesVisible() int {
	visible, _ := w.Account.QueueDepth(w.QueueURL)
	if w.WakeUpQueueURL != "" {
		wake, _ := w.Account.QueueDepth(w.WakeUpQueueURL)
		visible += wake
	}
	return visible
}

// oneMessageAtATime makes the running incarnation's consumers handle one message of a batch at a time when the
// world asks for it (oneAtATime): a run is then the same run every time, which fault draws and the crash
// matrix's effect numbers rely on. Messages handled concurrently — two terminating actions of one scale-in, say
// — claim the cluster's drain budget, and so drain and complete, in whichever order the goroutines run.
func (w *World) oneMessageAtATime() { w.sameRuns(w.Agent) }
