// Package demo runs the real agent in-process against a simulated AWS account (internal/sim) on a simulated
// clock: an ECS cluster on an Auto Scaling group whose golden-AMI parameter changes, rolled to the new AMI
// one instance at a time while the invariants of docs/architecture.md are checked after every step.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
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

// Options configure a demo run.
type Options struct {
	// Out receives the live progress lines (nil: none).
	Out io.Writer
	// Log receives the agent's JSON logs (nil: discarded).
	Log *zap.Logger
	// Tick is the simulated time between two agent iterations. Default 5 s.
	Tick time.Duration
	// Deadline bounds the simulated duration. Default 3 h.
	Deadline time.Duration
	// Scenario names the demo scenario (Scenarios lists them); "" is "rollout".
	Scenario string
	// Store, when set, is the agent's store (so the caller can save it after the run); nil: a new one.
	Store *state.Memory
	// Timeline records Summary.Timeline, one sample per group and agent iteration (WriteTimelineSVG).
	Timeline bool
}

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
	Checker        *Checker
	// Restarts counts the agent incarnations replaced by Restart.
	Restarts int
	// AgentErrors counts the agent iterations that returned an error (only with Spec.Faults; see Step).
	AgentErrors int
	// pastMessages are the message counts of agent incarnations replaced by Restart.
	pastMessages MessageCounts
	// Kube plays the Kubernetes side of the EKS groups (nil without EKS groups).
	Kube *KubeSim

	clients   agent.Clients
	settings  agent.Settings
	log       *zap.Logger
	eksParams map[string]string // EKS group with an `auto` source -> the public parameter it resolves to
	arch      string            // architecture of the world's AMIs: that of the first group's instance type
	faults    *sim.Faults       // Spec.Faults
	fuse      *Fuse             // the fuse of the running incarnation (Restart), nil: unfused
	// nodegroups are Spec.Nodegroups (RepeatedEffects judges their updates).
	nodegroups []sim.EKSNodegroupSpec
}

// GroupSetup is one Auto Scaling group of a world: an ECS cluster's capacity, or an EKS self-managed node
// group, on a launch template.
type GroupSetup struct {
	Name, Cluster, Parameter string
	Min, Max, Desired        int32
	// Platform is lifecycle.PlatformECS (default) or lifecycle.PlatformEKS: the instances join EKS cluster
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
	KubeWorkload KubeWorkload
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
}

// DemoSpec is the default demo: ECS cluster "demo" on group "demo-ecs-asg" (desired/min 3, max 6) running
// ImageA with a terminating lifecycle hook to the agent's queue, a service of 6 tasks and a daemon service;
// and EKS self-managed node group "demo-eks-nodes" (desired/min 3, max 6, arm64 m7g.large) of cluster
// "demo-eks" (Kubernetes 1.31) with AMI source `auto`, the same hook, a Deployment of 6 pods under a
// PodDisruptionBudget minAvailable 5 and a DaemonSet.
func DemoSpec() Spec {
	return Spec{
		Policy: engine.DefaultPolicy(),
		Groups: []GroupSetup{{Name: GroupName, Cluster: Cluster, Parameter: Parameter, Min: 3, Max: 6, Desired: 3},
			{Name: EKSGroupName, Platform: model.PlatformEKS, Cluster: EKSCluster, Parameter: providers.ParameterAuto, Min: 3, Max: 6, Desired: 3}},
		Services:     map[string]int{"web": 6, "log-router": -1},
		KubeWorkload: KubeWorkload{Replicas: 6, MinAvailable: 5, DaemonSet: true},
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
				w.Kube = NewKubeSim(acct, spec.Kube, spec.KubeWorkload)
			}
			w.Kube.AddGroup(g.Name, g.Cluster)
			if param == providers.ParameterAuto {
				// A source that cannot be built (C12 tests) gets no parameter: the agent refuses the group.
				if path, err := autoParameter(context.Background(), w, eksVersion, instanceType, g.Tags); err == nil {
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
	w.nodegroups = spec.Nodegroups
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
	w.arch = "x86_64"
	if len(spec.Groups) > 0 {
		it := spec.Groups[0].InstanceType
		if it == "" {
			it = "m7g.large"
		}
		if arch, err := (&eks.Architectures{API: acct.EC2InstanceTypes()}).For(context.Background(), []string{it}); err == nil {
			w.arch = arch
		}
	}
	for _, id := range []string{image, ImageA, ImageB} {
		w.registerImage(id, false)
	}
	w.Checker = NewChecker(acct, baseline)
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
		w.Checker.Nodes = func() (map[string]NodeObservation, error) { return kube.Observe(context.Background()) }
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
		policy = engine.DefaultPolicy()
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
		AccountID: acct.Options().AccountID, AllowedAMIOwners: spec.AllowedAMIOwners, Workers: max(spec.Workers, 1), PassClock: spec.PassClock} // a kumo queue URL names another account
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
	w.Store, w.QueueURL, w.clients, w.settings, w.log = store, queue, clients, settings, log
	w.Checker.Held = func(group, instance, hook string) bool {
		rec, err := store.GetHook(context.Background(), model.ActionKey(group, instance, hook))
		return err == nil && rec.State != state.HookCompleted && !rec.DrainHeldAt.IsZero()
	}
	w.Agent = agent.New(clients, w.agentSettings(nil), store, clk, log)
	if w.faults != nil {
		// One message at a time: the injector's draws then follow the same calls in every run of a seed
		// (messages handled concurrently would take each other's draws in any order).
		for _, c := range w.Agent.Consumers() {
			c.Concurrency = 1
		}
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
func (w *World) registerImage(id string, public bool) {
	if id == "" || w.Account.ImageRegistered(id) {
		return
	}
	created := w.Account.Clock().Now().Add(-24 * time.Hour)
	name := fmt.Sprintf("al2023-ami-ecs-hvm-2023.0.%s-kernel-6.1-%s", created.Format("20060102"), w.arch)
	spec := sim.ImageSpec{ID: id, Name: name, Architecture: w.arch, Created: created,
		Description: "Amazon Linux AMI 2023.0 " + w.arch + " ECS HVM EBS"}
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
	w.registerImage(image, false)
	w.Account.PutParameter(param, image)
	now := w.Account.Clock().Now().UTC().Format(time.RFC3339)
	body := fmt.Sprintf(`{"version":"0","id":"%d","detail-type":"Parameter Store Change","source":"aws.ssm","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:ssm:us-east-1:111122223333:parameter%s"],"detail":{"operation":"Update","name":%q,"type":"String","description":"Golden AMI for ECS hosts"}}`,
		w.Account.Clock().Now().UnixNano(), now, param, param)
	w.Account.SendMessage(w.QueueURL, body)
}

// RegisterAMI makes EC2 know image as an available AMI of the account (the AMI gate asks), without touching
// any parameter: for tests that set a parameter without its change event.
func (w *World) RegisterAMI(image string) { w.registerImage(image, false) }

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
	w.registerImage(image, true)
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
	if err := w.syncKube(ctx); err != nil {
		return err
	}
	w.Checker.Check()
	return nil
}

// Run plays a demo scenario (opts.Scenario, default "rollout"): the fleet settles on ImageA, the parameter
// changes to ImageB, and the agent rolls the group under the scenario's conditions. It returns the summary;
// an error only when the demo itself could not run.
func Run(ctx context.Context, opts Options) (Summary, error) {
	if opts.Tick <= 0 {
		opts.Tick = 5 * time.Second
	}
	if opts.Deadline <= 0 {
		opts.Deadline = 3 * time.Hour
	}
	sc, err := lookupScenario(opts.Scenario)
	if err != nil {
		return Summary{}, err
	}
	spec := DemoSpec()
	spec.Log = opts.Log
	if opts.Store != nil { // a nil *state.Memory must not become a non-nil state.Store
		spec.Store = opts.Store
	}
	if sc.setup != nil {
		sc.setup(&spec)
	}
	reg := metrics.NewRegistry(nil)
	spec.Observer = reg
	w, err := Build(spec)
	if err != nil {
		return Summary{}, err
	}
	reg.Clock = w.Account.Clock()
	reg.Consumer = w.messageStats
	var fuse *Fuse
	if sc.crash {
		fuse = crashEveryWrite()
		w.Restart(fuse)
		w.Restarts = 0
	}
	start := w.Account.Clock().Now()
	p := newPrinter(opts.Out, w, start)
	p.record = opts.Timeline
	p.linef("scenario %s: %s", sc.name, sc.description)
	hooks := "the agent's launching and terminating lifecycle hooks"
	p.linef("simulated account: ECS cluster %q, group %s (3 instances on %s, %s), service web (6 tasks) + daemon log-router", Cluster, GroupName, ImageA, hooks)
	if w.Kube != nil {
		p.linef("simulated account: EKS cluster %q (Kubernetes %s), self-managed group %s (3 nodes on %s, AMI source auto = %s, %s), Deployment web (6 pods, PodDisruptionBudget minAvailable 5) + DaemonSet node-agent",
			EKSCluster, EKSVersion, EKSGroupName, ImageA, w.EKSParameter(EKSGroupName), hooks)
	}
	provider := ""
	for _, g := range spec.Groups {
		if g.Name == GroupName && g.CapacityProvider != nil && g.CapacityProvider.ManagedScaling {
			provider = g.CapacityProvider.Name
		}
	}
	if line := zoneLine(w, GroupName, provider); line != "" {
		p.linef("%s", line)
	}
	if sc.prepare != nil {
		sc.prepare(w)
	}
	// iterate runs one agent iteration (restarting a crashed agent), checks the invariants and moves time.
	iterate := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// One message at a time (the agent handles up to 4 at once): the order of the simulated account's
		// calls, hence its instance ids and the printed text, is then the same from run to run.
		w.Agent.Consumer.Concurrency = 1
		if err := w.Agent.RunOnce(ctx); err != nil && (fuse == nil || !fuse.Blown()) {
			return err
		}
		if fuse != nil && fuse.Blown() {
			fuse = crashEveryWrite()
			w.Restart(fuse)
			p.linef("agent killed right after a step transition; a fresh agent resumes from the store (restart %d)", w.Restarts)
		}
		w.Checker.Check()
		// What the agent just did is printed at the time it did it, before the operator's actions of the same
		// moment (a pause seen after a drain began must not read as if it came first).
		p.progress(ctx)
		if sc.during != nil {
			if err := sc.during(ctx, w, p); err != nil {
				return err
			}
		}
		w.Account.Advance(opts.Tick)
		if err := w.syncKube(ctx); err != nil {
			return err
		}
		w.Checker.Check()
		return nil
	}
	for range 3 {
		if err := iterate(); err != nil {
			return Summary{}, err
		}
	}
	p.linef("golden-AMI parameter %s now names %s; Parameter Store Change event sent to the queue", Parameter, ImageB)
	w.PublishAMI(Parameter, ImageB)
	if param := w.EKSParameter(EKSGroupName); param != "" {
		p.linef("public parameter %s now names %s; the scheduled rule's tick sent to the queue (public parameters send no events)", param, ImageB)
		w.PublishPublicAMI(param, ImageB)
	}
	stop := sc.stop
	if stop == nil {
		stop = func(r state.Rollout, _ *World) bool { return r.TargetImageID == ImageB && !r.Active() }
	}
	for w.Account.Clock().Since(start) < opts.Deadline {
		// The world's changes since the last iteration (an instance that began to serve) are printed with the
		// next iteration's record, at the same simulated time: one line per group and moment.
		if err := iterate(); err != nil {
			return Summary{}, err
		}
		if w.allStopped(ctx, stop) {
			break
		}
	}
	// Let the last lifecycle actions and messages settle (the crash scenario no longer kills the agent).
	if fuse != nil {
		w.replaceAgent(nil) // an unfused agent, not a crash: not counted as a restart
	}
	w.Agent.Consumer.Concurrency = 1
	for range 24 {
		if err := w.Step(ctx, opts.Tick); err != nil {
			return Summary{}, err
		}
	}
	p.progress(ctx)
	if line := zoneLine(w, GroupName, provider); line != "" {
		p.linef("%s", line)
	}
	w.Checker.Finish()
	s := w.Summarize(ctx, start)
	s.Scenario, s.Expected = sc.name, string(sc.expect)
	pub := &metrics.Publisher{API: w.Account.CloudWatch(), Registry: reg}
	if err := pub.Publish(ctx); err != nil {
		return Summary{}, fmt.Errorf("publishing the demo's metrics: %w", err)
	}
	s.Metrics = pub.Snapshot()
	s.Timeline = p.timeline
	p.table(s)
	return s, nil
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
	all := append(append([]Violation(nil), w.Checker.Violations...), w.Checker.final...)
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
func (w *World) messageStats() *events.Stats {
	var stats []*events.Stats
	for _, c := range w.Agent.Consumers() {
		stats = append(stats, &c.Stats)
	}
	return events.SumStats(stats...)
}

// printer writes one line per rollout step change.
type printer struct {
	out   io.Writer
	w     *World
	start time.Time
	last  map[string]string // last progress line per group
	// pause scenario bookkeeping
	paused   bool
	pausedAt time.Time
	// alarm-gate scenario bookkeeping (gates.go)
	alarmCleared bool
	// record keeps timeline samples (Options.Timeline).
	record   bool
	timeline []TimelineSample
}

func newPrinter(out io.Writer, w *World, start time.Time) *printer {
	return &printer{out: out, w: w, start: start}
}

// linef writes a line of the narrative, stamped with the simulated time since the start, wrapped at lineWidth.
func (p *printer) linef(format string, args ...any) { p.stamped(fmt.Sprintf(format, args...), "") }

// stamped writes text stamped with the simulated time since the start, wrapped at lineWidth (writeWrapped:
// breakAt starts its own line when the text does not fit on one).
func (p *printer) stamped(text, breakAt string) {
	if p.out == nil {
		return
	}
	el := p.w.Account.Clock().Since(p.start).Round(time.Second)
	writeWrapped(p.out, fmt.Sprintf("[+%8s] ", el), text, breakAt)
}

func (p *printer) progress(ctx context.Context) {
	names := make([]string, 0, len(p.w.Checker.Baseline))
	for n := range p.w.Checker.Baseline {
		names = append(names, n)
	}
	sort.Strings(names)
	var nodes map[string]NodeObservation
	if p.w.Kube != nil && (p.out != nil || p.record) {
		nodes, _ = p.w.Kube.Observe(ctx)
	}
	for _, name := range names {
		p.groupProgress(ctx, name, nodes)
	}
}

// groupProgress prints one group's line when it changed.
func (p *printer) groupProgress(ctx context.Context, group string, nodes map[string]NodeObservation) {
	if p.out == nil && !p.record {
		return
	}
	r, err := p.w.Store.GetRollout(ctx, group)
	if err != nil {
		return
	}
	g := p.w.Account.Group(group)
	shown, _, _ := r.StatusImages() // on-target counts the AMI status shows: a rollback's, the one it goes to
	serving, onTarget, draining := 0, 0, 0
	for _, i := range g.Instances {
		if p.w.Checker.EKS[group] {
			if n, ok := nodes[i.ID]; ok && i.LifecycleState == "InService" && n.Ready && !n.Cordoned {
				serving++
			} else if ok && n.Cordoned {
				draining++
			}
		} else if i.LifecycleState == "InService" && i.ContainerInstanceStatus == "ACTIVE" && i.AgentConnected {
			serving++
		} else if i.ContainerInstanceStatus == "DRAINING" {
			draining++
		}
		if i.LifecycleState == "InService" && i.ImageID == shown {
			onTarget++
		}
	}
	line := progressLine(group, r, g.Desired, g.Max, serving, onTarget)
	if p.record {
		p.timeline = append(p.timeline, TimelineSample{At: p.w.Account.Clock().Since(p.start), Group: group, Desired: int(g.Desired),
			Serving: serving, OnTarget: onTarget, Draining: draining, Gate: gateOf(r)})
	}
	if p.out == nil {
		return
	}
	if p.last == nil {
		p.last = map[string]string{}
	}
	if key := changeKey(line); key != p.last[group] {
		p.last[group] = key
		p.stamped(line, " reason=") // the reason goes below the counts when the line does not fit
	}
}

// progressLine is a group's progress line: where its rollout stands, in the words of the state package's
// vocabulary (Position.String: "Replacing/ReplacementHealthy"), then counts a reader can check against each
// other: instances serving, desired capacity, maximum size and instances in service on the target AMI out of
// desired capacity; then the replacement in flight and the reason. The position and the counts come first, so
// that they stay on the first line when the line is wrapped.
func progressLine(group string, r state.Rollout, desired, maxSize int32, serving, onTarget int) string {
	pos := r.Phase.String()
	detail := ""
	if c := r.Current; c != nil {
		pos += "/" + c.Step.String()
		if c.OldInstanceID != "" { // an instance refresh picks the old instances itself
			detail += " old=" + c.OldInstanceID
		}
	}
	line := fmt.Sprintf("%-14s %-28s serving=%d desired=%d max=%d on-target=%d/%d%s", group, pos,
		serving, desired, maxSize, onTarget, desired, detail)
	if r.Reason != "" {
		line += " reason=" + r.Reason
	}
	return line
}

// durationWords are the running times a reason carries ("is 12m0s old", "InProgress for 5m45s"): they change
// at every look while nothing else does.
var durationWords = regexp.MustCompile(`\b\d+(\.\d+)?(h|m|s|ms)(\d+(\.\d+)?(h|m|s|ms))*\b`)

// changeKey is what a progress line must change in to be printed again: the line without the running times
// of its reason, so that a gate that holds prints one line, not one a minute.
func changeKey(line string) string { return durationWords.ReplaceAllString(line, "#") }

func (p *printer) table(s Summary) {
	if p.out == nil {
		return
	}
	fmt.Fprintln(p.out)
	fmt.Fprintf(p.out, "%-14s %-8s %-22s %-8s %-10s %-9s %-12s %s\n", "GROUP", "PLATFORM", "TARGET AMI", "DESIRED", "ON TARGET", "MIN SERV", "PHASE", "TRANSITIONS")
	for _, g := range s.Groups {
		fmt.Fprintf(p.out, "%-14s %-8s %-22s %-8d %-10s %-9d %-12s %d\n", g.Name, g.Platform, g.StatusImageID, g.Desired,
			fmt.Sprintf("%d/%d", g.OnStatusImage, g.Desired), g.MinInServiceDuringRollout, g.State, g.Steps)
	}
	fmt.Fprintf(p.out, "\ninvariant violations: %d", s.InvariantViolations)
	if len(s.Violations) > 0 {
		fmt.Fprintf(p.out, "\n  %s", strings.Join(s.Violations, "\n  "))
	}
	fmt.Fprintf(p.out, "\nmessages: %d processed, %d ignored, %d failed; simulated time %s\n", s.Messages.Processed, s.Messages.Ignored,
		s.Messages.Failed, time.Duration(s.SimulatedSeconds*float64(time.Second)).Round(time.Second))
	for _, l := range explainCounts(s) {
		writeWrapped(p.out, "  ", l, "")
	}
}

// zoneLine says, for a group that is the ECS capacity provider provider (managed scaling), its in-service
// instances per Availability Zone and the service's tasks: what the capacity-provider scenario claims to keep.
// "" without a provider.
func zoneLine(w *World, group, provider string) string {
	if provider == "" {
		return ""
	}
	g := w.Account.Group(group)
	perAZ := map[string]int{}
	for _, i := range g.Instances {
		if i.LifecycleState == "InService" {
			perAZ[i.AvailabilityZone]++
		}
	}
	zones := sortedNames(perAZ)
	parts := make([]string, 0, len(zones))
	n := 0
	for _, z := range zones {
		parts = append(parts, fmt.Sprintf("%s %d", z, perAZ[z]))
		n += perAZ[z]
	}
	return fmt.Sprintf("zones: %s, capacity provider %s (managed scaling, managed termination protection): %d instance(s) in %d zone(s): %s; "+
		"service web: %d tasks RUNNING, Availability Zone rebalancing on", group, provider, n, len(zones), strings.Join(parts, ", "),
		w.Account.ServiceTasks(Cluster, "web"))
}

// explainCounts says what the summary's restarts, ignored and failed messages mean, one line each that is
// not zero: a count without its meaning reads as a problem at 3 a.m.
func explainCounts(s Summary) []string {
	var out []string
	if s.Restarts > 0 {
		out = append(out, fmt.Sprintf("restarts: the agent was killed %d time(s) right after a step transition; each fresh agent resumed from the store", s.Restarts))
	}
	if s.Messages.Ignored > 0 {
		out = append(out, "ignored: messages that need no action (the lifecycle hooks' test notifications, events of groups the agent does not manage); deleted")
	}
	if s.Messages.Failed > 0 {
		why := "its handling returned an error"
		if s.Restarts > 0 {
			why = "its handling was cut short by a simulated crash"
		}
		out = append(out, "failed: "+why+"; such a message is not deleted, so SQS delivered it again and it was handled then (nothing lost)")
	}
	return out
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
	return agent.New(w.clients, s, w.Store, w.Account.Clock(), w.log)
}

// NewReplicaWith starts another agent replica named owner like NewReplica, on its own clock and store (a
// wrapper of the world's store): replicas whose clocks are skewed, or that stall, in lease tests.
func (w *World) NewReplicaWith(owner string, clk clock.Clock, store state.Store) *agent.Agent {
	s := w.agentSettings(nil)
	s.OwnerID = owner
	return agent.New(w.clients, s, store, clk, w.log)
}

// allStopped reports whether stop holds for the rollout of every managed group.
func (w *World) allStopped(ctx context.Context, stop func(state.Rollout, *World) bool) bool {
	for name := range w.Checker.Baseline {
		r, err := w.Store.GetRollout(ctx, name)
		if err != nil || !stop(r, w) {
			return false
		}
	}
	return true
}
