// Package agent wires the parts of patch-agent together: the queue consumer hands events to the agent, and a
// reconcile loop discovers the managed groups, resolves their AMI sources and advances each rollout one
// durable step at a time.
package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/engine"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/lifecycleaction"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Clients are the AWS APIs the agent calls: real SDK clients in production, the simulated account in tests
// and the demo.
type Clients struct {
	AutoScaling awsapi.AutoScaling
	EC2         awsapi.EC2
	ECS         awsapi.ECS
	SSM         awsapi.SSM
	SQS         awsapi.SQS
	// CloudWatch serves the alarm gates; nil disables them (targets naming alarms then wait with a reason).
	CloudWatch awsapi.CloudWatch
	// InstanceTypes tells the AMI gate the architectures of instance types; nil: EC2, when it has the call.
	InstanceTypes awsapi.EC2InstanceTypes
	// EKSNodegroups makes EKS managed node groups rollout targets (nodegroups.go); nil: none are.
	EKSNodegroups awsapi.EKSNodegroups
}

// Settings are the agent's timing and policy settings.
type Settings struct {
	QueueURL string
	// WakeUpQueueURL is the queue the stack's wake-up rules target (`--wake-up-queue-url`): a second
	// consumer receives it beside the main one, so a lifecycle action on QueueURL never waits behind any
	// number of wake-ups. Empty: wake-ups arrive on QueueURL, as with stacks that have no wake-up queue.
	WakeUpQueueURL    string
	ReconcileInterval time.Duration // default 15 s
	PollInterval      time.Duration // default 10 min
	VisibilityTimeout time.Duration // default 2 min
	Policy            model.Policy
	// OwnerID names this replica in leases; default "patch-agent".
	OwnerID string
	// LeaseTTL is how long this replica's lease on a target or lifecycle action lasts without renewal
	// (`--lease-ttl`); <= 0: state.DefaultLeaseTTL (2 minutes).
	LeaseTTL time.Duration
	// Platforms adds or replaces platform implementations (EKS); ECS is always built from Clients.ECS.
	Platforms model.Platforms
	// Sources complete the targets' AMI sources at discovery (providers.EKSSources: `auto` for EKS groups,
	// and the node-not-newer-than-control-plane rule); nil: parameters are taken as tagged.
	Sources []providers.SourceResolver
	// Observer is told every transition, observation and completed lifecycle action (metrics,
	// notifications); nil observes nothing.
	Observer model.Observer
	// AllowedAMIOwners are AMI owners (account ids, owner aliases) the AMI gate accepts for every group, on
	// top of the agent's own account and, for AWS public parameters, Amazon (--allowed-ami-owners).
	AllowedAMIOwners []string
	// AccountID is the agent's AWS account, whose AMIs the gate accepts; default: the account in QueueURL's path.
	AccountID string
	// Workers is how many targets one reconcile pass advances at once (`--workers`); <= 0: DefaultWorkers
	// (8). One target is never advanced by two of them at once (pool.go).
	Workers int
	// PassBudget is how long one pass hands out targets before it yields; the targets it left are looked at
	// next, first (passbudget.go). <= 0: DefaultPassBudget (8 s).
	PassBudget time.Duration
	// PassClock measures PassBudget; nil: the agent's clock (the bench passes the real clock, its passes
	// running on a simulated one).
	PassClock clock.PassiveClock
	// HookChecksPerPass bounds the managed groups whose lifecycle hooks (DescribeLifecycleHooks) one pass
	// checks for the missing-hook warning (hookcheck.go); each group is checked again once PollInterval has
	// passed since its last check. <= 0: DefaultHookChecksPerPass (25), raised so that every group is
	// checked within about PollInterval + ReconcileInterval.
	HookChecksPerPass int
	// Backoff is the retry backoff of a target whose rollout step failed and of a lifecycle action whose
	// drain check failed: they are tried again after it, not on every tick or poll. Zero:
	// model.DefaultBackoff (5 s, times 1.5 up to 2 minutes, 20 % jitter).
	Backoff wait.Backoff
}

// Agent is one running patch-agent.
type Agent struct {
	clients      Clients
	settings     Settings
	store        state.Store
	clock        clock.Clock
	log          *zap.Logger
	resolver     providers.Resolver
	orchestrator *engine.Orchestrator
	hooks        *lifecycleaction.Hooks
	// Consumer receives the queue; exported for its Stats.
	Consumer *events.Consumer
	// WakeUpConsumer receives the wake-up queue (Settings.WakeUpQueueURL); nil without one.
	WakeUpConsumer *events.Consumer

	// fleet is what the agent last learned of its groups and their AMI sources (fleet.go)
	fleet fleetView
	// images caches the AMI of each instance looked at (fleet.go)
	images imageCache
	// hookChecks holds what the hook check found per group (hookcheck.go)
	hookChecks hookChecks
	// alerted remembers the problems last alerted per group, so each is alerted once per change (alerts.go)
	alerted  alertMemory
	lastTick atomic.Int64 // unix nanoseconds of the last finished Reconcile (health.Server's loop check)
	// retries backs off targets whose rollout step (or cluster observation) failed, by group
	retries *model.Retries
	// wakes holds the groups and clusters wake-up events named since the last look (wake.go)
	wakes wakeSet
	// ticks holds the scheduled ticks waiting for a whole-fleet pass (tick.go)
	ticks tickRequests
	// waits holds when each target's next timed wait ends (timers.go)
	waits timedWaits
	// pauseEnds holds when the pause last read for each target ends (timers.go)
	pauseEnds pauseEnds
	// order is the order of the next full pass, as the last cut pass left it (passbudget.go)
	order passOrder
	// sweep is what the lifecycle sweep between full passes needs (hooksweep.go)
	sweep hookSweep
	// pauseLocks is the last listing of the pause locks, shared by passes and looks for lockShareMaxAge (pool.go)
	pauseLocks lockShare

	pass    sync.Mutex  // the scheduler's: serialises whole-fleet passes (ticks, scheduled ticks, wake-up looks)
	pollMu  sync.Mutex  // the scheduler's: serialises the parameter poll and the hook check of concurrent passes
	targets targetGuard // one target advanced by one goroutine at a time (pool.go)
	// records keeps each target's rollout record as last read or written, for looks at a few targets (records.go)
	records recordCache
	steps   atomic.Uint64
}

// instanceImages returns the AMI and launch time of every instance of the discovered groups and of the
// extra ones (warm pool instances), asking EC2 only for instances not seen within imageCacheTTL. Only a full
// discovery (full) forgets the cached instances it does not list: a look at a few groups lists only theirs.
func (a *Agent) instanceImages(ctx context.Context, d providers.Discovered, extra []string, full bool) (map[string]string, map[string]time.Time, error) {
	live := map[string]bool{}
	for _, g := range d.Groups {
		for _, i := range g.Instances {
			live[*i.InstanceId] = true
		}
	}
	for _, id := range extra {
		live[id] = true
	}
	return a.images.lookup(ctx, a.clock.Now(), live, full, func(ctx context.Context, ids []string) (map[string]string, map[string]time.Time, error) {
		return providers.ImageIDs(ctx, a.clients.EC2, ids)
	})
}

// checkHooks reports managed groups whose terminations would skip the drain (no terminating lifecycle
// hook), each group once per poll interval and at most hookChecksPerPass groups a pass (hookChecks.due), read
// on Settings.Workers goroutines within HookCheckBudget (the groups it did not reach stay due): a warning log
// line and a reason on the group's status. The caller holds a.pollMu.
func (a *Agent) checkHooks(ctx context.Context, d providers.Discovered) {
	due := a.hookChecks.due(d, a.clock.Now(), a.settings.PollInterval, a.hookChecksPerPass(len(d.Targets)))
	ctx = awsapi.WithPassBudget(ctx, a.hookCheckSpent()) // hookcheck.go: a small budget of its own
	forEachTarget(ctx, a.settings.Workers, due, func(name string) {
		own := model.HookOwnership{QueueURL: a.settings.QueueURL, Listed: d.Targets[name].LifecycleHooks}
		c, err := a.hooks.CheckOwnedHooks(ctx, name, a.settings.Policy.DrainTimeout, own)
		if awsapi.IsPassBudgetSpent(err) {
			return // its budget ran out: still due, checked first next pass
		}
		if err != nil {
			a.log.Warn("checking lifecycle hooks failed", zap.String(logging.Group, name), zap.Error(err))
			return // still due: checked first next pass
		}
		missing := c.Note()
		before := a.hookChecks.record(name, a.clock.Now(), missing)
		if c.Missing != "" && before != missing {
			a.log.Warn("managed group has no terminating lifecycle hook", zap.String(logging.Group, name), zap.String(logging.Reason, c.Missing))
		}
		a.alertCapped(d.Targets[name], before, c)
		a.sweep.note(name, c.Heartbeat) // hooksweep.go: how often the lifecycle sweep looks
	})
}

// HookProblem says what a managed group lacks for drained terminations ("" when nothing), as of the last check.
func (a *Agent) HookProblem(group string) string { return a.hookChecks.problem(group) }

// New builds an agent. log may be zap.NewNop().
func New(c Clients, s Settings, store state.Store, clk clock.Clock, log *zap.Logger) *Agent {
	if s.ReconcileInterval <= 0 {
		s.ReconcileInterval = 15 * time.Second
	}
	if s.PollInterval <= 0 {
		s.PollInterval = 10 * time.Minute
	}
	if s.OwnerID == "" {
		s.OwnerID = "patch-agent"
	}
	if s.Observer == nil {
		s.Observer = model.NopObserver{}
	}
	platforms := model.Platforms{model.PlatformECS: providers.ECSPlatform{Drainer: ecsdrain.New(c.ECS)}}
	for name, p := range s.Platforms {
		platforms[name] = p
	}
	if s.Backoff.Duration <= 0 {
		s.Backoff = model.DefaultBackoff()
	}
	templates := providers.Templates{EC2: c.EC2, AutoScaling: c.AutoScaling}
	var alarms model.AlarmChecker = noAlarmAPI{}
	if c.CloudWatch != nil {
		alarms = providers.CloudWatchAlarms{API: c.CloudWatch}
	}
	if s.AccountID == "" {
		s.AccountID = providers.AccountFromQueueURL(s.QueueURL)
	}
	instanceTypes := c.InstanceTypes
	if it, ok := c.EC2.(awsapi.EC2InstanceTypes); ok && instanceTypes == nil {
		instanceTypes = it
	}
	gate := &providers.AMIGate{EC2: c.EC2, InstanceTypes: instanceTypes, AccountID: s.AccountID, AllowedOwners: s.AllowedAMIOwners, Clock: clk}
	a := &Agent{clients: c, settings: s, store: store, clock: clk, log: log,
		resolver: providers.Resolver{SSM: c.SSM},
		orchestrator: &engine.Orchestrator{Owner: s.OwnerID, LeaseTTL: s.LeaseTTL, Store: store, AutoScaling: c.AutoScaling, Templates: templates, Platforms: platforms, Alarms: alarms, Observer: s.Observer,
			Clock: clk, Log: log, Policy: s.Policy, AMIGate: gate, Versions: engine.NewVersionMemo(),
			RefreshMemo: engine.NewRefreshMemo(), QueueURL: s.QueueURL},
		hooks: &lifecycleaction.Hooks{Owner: s.OwnerID, LeaseTTL: s.LeaseTTL, Store: store, AutoScaling: c.AutoScaling, EC2: c.EC2, Platforms: platforms, Observer: s.Observer, Clock: clk, Log: log, Policy: s.Policy,
			Retries: &model.Retries{Backoff: s.Backoff, Clock: clk}, QueueURL: s.QueueURL},
		retries: &model.Retries{Backoff: s.Backoff, Clock: clk},
	}
	a.orchestrator.HookKept = a.hooks.Kept                           // a held drain's record, as the lifecycle actions keep it
	a.orchestrator.KnownHooks = a.hooks.KnownHooks                   // a refresh whose group lost the agent's hooks is cancelled
	a.hooks.HeartbeatTimeoutRead = a.sweep.shorten                   // a lowered HeartbeatTimeout shortens the sweep at once
	a.hooks.RolloutKept = func(group string) (state.Rollout, bool) { // records.go: the record the agent keeps
		r, ok, _ := a.records.get(group)
		return r, ok
	}
	a.settings.Observer = waitsObserver{Observer: s.Observer, a: a} // timers.go: each target's next timed wait
	if c.EKSNodegroups != nil {
		a.orchestrator.Nodegroups = providers.NodegroupClient{EKS: c.EKSNodegroups, SSM: c.SSM}
	}
	a.Consumer = &events.Consumer{SQS: c.SQS, QueueURL: s.QueueURL, Handler: a, Clock: clk, Log: log, VisibilityTimeout: s.VisibilityTimeout}
	if s.WakeUpQueueURL != "" {
		a.WakeUpConsumer = &events.Consumer{SQS: c.SQS, QueueURL: s.WakeUpQueueURL, Handler: a, Clock: clk, Log: log.With(zap.String(logging.Queue, "wake-up")),
			VisibilityTimeout: s.VisibilityTimeout, WakeUpQueue: true}
	}
	return a
}

// Consumers returns the agent's queue consumers: the main one, then the wake-up queue's when there is one.
func (a *Agent) Consumers() []*events.Consumer {
	if a.WakeUpConsumer == nil {
		return []*events.Consumer{a.Consumer}
	}
	return []*events.Consumer{a.Consumer, a.WakeUpConsumer}
}

// pollQueues receives each queue once without waiting: the main queue first (lifecycle actions, parameter
// changes, ticks), then the wake-up queue, so that a backlog of wake-ups never comes before a lifecycle
// action. Both errors are returned joined.
func (a *Agent) pollQueues(ctx context.Context) error {
	_, err := a.Consumer.PollOnce(ctx, 0)
	if a.WakeUpConsumer != nil {
		_, wakeErr := a.WakeUpConsumer.PollOnce(ctx, 0)
		err = errors.Join(err, wakeErr)
	}
	return err
}

// Store returns the agent's state store.
func (a *Agent) Store() state.Store { return a.store }

// RunOnce polls the queue once without waiting, then reconciles every target: one iteration of the agent's
// loop. The demo and the scenario tests drive the agent with it on a simulated clock. As in Run, a failed
// poll does not keep the targets from being reconciled; both errors are returned.
func (a *Agent) RunOnce(ctx context.Context) error {
	pollErr := a.pollQueues(ctx)
	return errors.Join(pollErr, a.Reconcile(ctx))
}

// Run consumes the queue (long polls) and, with Settings.WakeUpQueueURL, the wake-up queue on a consumer of
// its own beside it, and reconciles every ReconcileInterval until ctx is cancelled; then it hands held
// messages back to the queues and returns.
func (a *Agent) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, c := range a.Consumers() {
		wg.Go(func() {
			if err := c.Run(ctx, backoff); err != nil {
				a.log.Warn("releasing held messages on shutdown", zap.Error(err))
			}
		})
	}
	for {
		if err := a.Reconcile(ctx); err != nil && ctx.Err() == nil {
			a.log.Error("reconcile failed; retrying next tick", zap.Error(err))
		}
		// Wake-up events make the loop look at their targets at once, between the polls (wake.go), and so
		// does the end of a timed wait the agent set itself (timers.go); neither postpones the next poll,
		// which stays the safety net.
		next := a.clock.After(a.settings.ReconcileInterval)
		for waiting := true; waiting; {
			timer, sweep := a.waitTimer(), a.sweepTimer()
			select {
			case <-ctx.Done():
				timer.Stop()
				sweep.Stop()
				wg.Wait()
				return nil
			case <-sweep.C(): // lifecycle actions between the polls (hooksweep.go)
				a.SweepLifecycle(ctx)
			case <-a.wakes.signal():
				a.ReconcileWoken(ctx)
				a.sweepIfDue(ctx) // early, on the look's answer, when it is nearly due (hooksweep.go)
			case <-timer.C():
				a.wakeTimedWaits()
				a.ReconcileWoken(ctx)
				a.sweepIfDue(ctx)
			case <-a.waits.changedSignal(): // an earlier timed wait: set the timer again
			case <-a.ticks.signal(): // a scheduled tick resolved the parameters: the whole-fleet pass now
				waiting = false
			case <-next:
				waiting = false
			}
			timer.Stop()
			sweep.Stop()
		}
	}
}

// backoff is capped exponential backoff for workflow retries: 1 s, 2 s, 4 s ... up to 60 s.
func backoff(attempt int) time.Duration {
	d := time.Second << min(attempt-1, 6)
	return min(d, time.Minute)
}

// Reconcile discovers the managed groups, resolves their AMI parameters when a poll is due, and advances
// every target's rollout. Errors of one target are logged and do not stop the others.
func (a *Agent) Reconcile(ctx context.Context) error {
	a.pass.Lock()
	defer a.pass.Unlock()
	defer func() { a.lastTick.Store(a.clock.Now().UnixNano()) }()
	a.wakes.take() // a full pass looks at every target the wake-ups named
	seq := a.ticks.begin()
	err := a.reconcilePass(ctx, nil)
	a.ticks.end(seq, err) // the scheduled ticks waiting for this pass are done (tick.go)
	return err
}

// LastTick returns when the last Reconcile (a tick of the loop) finished, successful or not; zero before the
// first. The health server's readiness check reads it to tell a stuck loop.
func (a *Agent) LastTick() time.Time {
	if ns := a.lastTick.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// reconcilePass is one pass: it discovers the managed groups, polls the AMI parameters and checks the hooks
// when a poll is due, reads the rollout records once (a full pass with the pause locks in the same read, when
// the store can: readRecords; else the pause locks when a target's first new destructive step needs them:
// pass.pauseLocks), and advances every target (only: those
// named; nil: all, plus the recovery of drained instances and the adoption of waiting lifecycle actions) on
// Settings.Workers goroutines (reconcileTarget). Passes may run beside each other (a tick and a parameter
// change): the target guard keeps one target to one goroutine, and the agent's shared
// state (fleet, images, hookChecks, alerted, order) locks itself only inside its methods. Full passes (only == nil) are serialised by a.pass, which the caller holds.
func (a *Agent) reconcilePass(ctx context.Context, only map[string]bool) error {
	began := a.passClock().Now() // the pass budget counts from here (passbudget.go)
	d, all, err := a.discover(ctx, only)
	if err != nil {
		return err
	}
	a.sweep.offer(d, a.clock.Now()) // hooksweep.go: a sweep right after this pass uses its answer (the groups it described)
	for g, err := range d.Misconfigured {
		a.log.Warn("opted-in group skipped", zap.String(logging.Group, g), zap.Error(err))
	}
	a.alertMisconfigured(d.Misconfigured, only)
	if !awsapi.IsUrgent(ctx) {
		// A reaction never runs the fleet's poll (every parameter, every group's hooks) nor waits for one.
		a.pollIfDue(ctx, all)
	}
	// One read of every rollout record per full pass instead of one per target, none for a look at targets
	// whose record this process kept (records.go); the conditional writes catch a record that changed since,
	// and a target stepped by another pass since is taken as kept or read again (reconcileTarget).
	readAt, readTime, locksGen := a.steps.Load(), a.clock.Now(), a.pauseLocks.generation()
	records, epochs, locks, locksRead, err := a.readRecords(ctx, only)
	if err != nil {
		return err
	}
	if locksRead {
		a.pauseLocks.offer(locks, readTime, locksGen) // read with the records: the pass's pause checks use it (pool.go)
	}
	a.recordNotRolled(ctx, d, records, only) // nodegroups.go: status says why an opted-in group is not rolled
	// Warm pools (field case C18) of groups under a rollout: DescribeAutoScalingGroups does not list their
	// instances. A pool that cannot be described leaves its target out of this tick.
	pools, poolIDs, poolFailed := map[string]providers.WarmPool{}, []string(nil), map[string]bool{}
	for _, name := range d.Names() {
		if (only != nil && !only[name]) || !records[name].Active() || !providers.HasWarmPool(d.Groups[name]) {
			continue
		}
		p, err := providers.WarmPoolInstances(ctx, a.clients.AutoScaling, name)
		if err != nil {
			a.log.Error("describing the warm pool failed; group skipped this tick", zap.String(logging.Group, name), zap.Error(err))
			poolFailed[name] = true
			continue
		}
		pools[name], poolIDs = p, append(poolIDs, p.IDs()...)
	}
	images, launched, err := a.instanceImages(ctx, d, poolIDs, only == nil)
	if err != nil {
		return err
	}
	p := &pass{d: d, store: a.store, records: records, readAt: readAt, epochs: epochs, pools: pools, images: images, launched: launched,
		nodes: map[string]*clusterView{}, look: only != nil, locks: &a.pauseLocks, clock: a.clock}
	var names []string
	for _, name := range d.Names() {
		if (only == nil || only[name]) && !poolFailed[name] {
			names = append(names, name)
		}
	}
	// A pass that has run PassBudget yields: the rest are woken and come first in the next pass (passbudget.go).
	names, from := a.order.next(names)
	budget := a.newPassBudget(began)
	budget.from = from
	forEachTarget(ctx, a.settings.Workers, names, func(name string) {
		if ok, free := budget.take(name); ok {
			tctx := ctx
			if !free {
				tctx = awsapi.WithPassBudget(ctx, budget.spent) // stopped at its next call once the budget is spent
			}
			budget.finished(name, a.reconcileTarget(tctx, p, name))
		}
	})
	a.yielded(budget, only == nil)
	if a.clients.EKSNodegroups != nil {
		locks, err := p.pauseLocks(ctx)
		if err != nil {
			return err
		}
		a.reconcileNodegroups(ctx, locks, records, only) // nodegroups.go
	}
	if only == nil {
		// Instances the agent drained for lifecycle actions that are back InService go back in service.
		if err := a.hooks.Recover(ctx, d, records); err != nil {
			a.log.Warn("recovering drained instances failed; retrying next tick", zap.Error(err))
		}
		// Lifecycle actions waiting on the agent's hooks whose message did not come (a lost receive).
		a.hooks.AdoptWaiting(ctx, d)
		a.sweep.looked(a.clock.Now()) // the lifecycle sweep (hooksweep.go) counts from here
	}
	return nil
}

// discover describes the groups a pass looks at: for a full pass (only nil) every opted-in group
// (providers.Discover, every page), for a look at a few targets only those named (providers.DiscoverNamed:
// one DescribeAutoScalingGroups per hundred names instead of every page of the fleet), each decided afresh
// from its own description (instances, lifecycle states, tags), so the look acts on nothing it did not just
// describe. It returns what the pass acts on (d) and the whole fleet as now known (all: the last full
// discovery with the named groups replaced), which it records in a.fleet. A look before any full
// discovery describes every group.
func (a *Agent) discover(ctx context.Context, only map[string]bool) (d, all providers.Discovered, err error) {
	known := a.fleet.discovery()
	var names []string
	for n := range only {
		if !strings.HasPrefix(n, nodegroupKeyPrefix) { // managed node groups are described by EKS (nodegroups.go)
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if only == nil || known.Targets == nil {
		d, err = providers.Discover(ctx, a.clients.AutoScaling, a.settings.Sources...)
		if err != nil {
			return d, d, err
		}
		a.fleet.replace(d)
		return d, d, nil
	}
	d, err = providers.DiscoverNamed(ctx, a.clients.AutoScaling, names, a.settings.Sources...)
	if err != nil {
		return d, d, err
	}
	return d, a.fleet.merge(names, d), nil // into the latest discovery, which a pass beside this one may have replaced
}

// pollIfDue reads every AMI parameter when the poll interval has passed since the last successful poll, and
// checks the lifecycle hooks of the groups due for it (a bounded number, checkHooks). One pass polls at
// a time; a pass that finds a poll under way waits for it and then finds it no longer due.
func (a *Agent) pollIfDue(ctx context.Context, d providers.Discovered) {
	a.pollMu.Lock()
	defer a.pollMu.Unlock()
	if a.fleet.pollDue(a.clock.Now(), a.settings.PollInterval) {
		if err := a.resolve(ctx, a.fleet.parameters()); err != nil {
			a.log.Warn("resolving AMI parameters failed; keeping the last known values", zap.Error(err))
		} else {
			a.fleet.polled(a.clock.Now())
		}
	}
	a.checkHooks(ctx, d)
}

// reconcileTarget advances one target of pass p: the per-target body of a pass, run by its workers. It holds
// the target's guard throughout, so a target is never advanced twice at once in this process; when another
// pass stepped the target after p read the records, the record is read again from the store. It returns
// awsapi.ErrPassBudgetSpent when the pass's budget stopped the step at a call (passBudget: no backoff, the
// target comes first in the next pass), nil otherwise (a failed step is backed off here).
func (a *Agent) reconcileTarget(ctx context.Context, p *pass, name string) error {
	slot := a.targets.lock(name)
	defer slot.mu.Unlock()
	if !a.retries.Due(name) {
		return nil // its last step failed: tried again after the backoff (deadlines and lease bound it)
	}
	t := p.d.Targets[name]
	key := t.Platform + "/" + t.Cluster
	// Stepped by a pass that ran beside this one: what p read may be older than what was written.
	rec, known, epoch, err := a.recordFor(ctx, p, name, slot.last > p.readAt)
	if err != nil {
		a.stepFailed(name, rec, "reading rollout failed", err)
		return nil
	}
	if !known {
		rec = state.Rollout{Group: name, Platform: t.Platform, Cluster: t.Cluster}
	}
	defer func() { slot.last = a.steps.Add(1) }()
	// Idle targets need no cluster view: deciding that an AMI changed takes only the instances' AMIs. Nor does
	// a rollout whose instance refresh is under way (refreshUnderWay).
	cv := p.cluster(key)
	cv.mu.Lock()
	if !cv.seen && (rec.Active() || rec.Phase == state.PhaseHalted) && !refreshUnderWay(rec) {
		platform, err := a.orchestrator.Platforms.For(t)
		if err != nil {
			cv.mu.Unlock()
			a.log.Error("group skipped", zap.String(logging.Group, name), zap.Error(err))
			return nil
		}
		n, err := observeCluster(ctx, p, platform, t)
		if err != nil {
			cv.mu.Unlock()
			if awsapi.IsPassBudgetSpent(err) {
				return err
			}
			a.stepFailed(name, rec, "observing cluster failed", err, zap.String(logging.Cluster, t.Cluster))
			return nil
		}
		cv.nodes, cv.seen = n, true
	}
	nodes := cv.nodes
	cv.mu.Unlock()
	v := providers.BuildView(p.d.Groups[name], p.images, p.launched, nodes, a.clock.Now())
	if pool, ok := p.pools[name]; ok {
		v = providers.WithWarmPool(v, pool, p.images, p.launched)
	}
	ami, problem := a.fleet.source(t.Parameter)
	warning := a.hookChecks.problem(name)
	o := a.rollouts()
	r, err := o.Reconcile(ctx, t, model.Inputs{View: v, AMI: ami, Record: &rec, Warning: warning,
		PauseRead: func(ctx context.Context) (*state.Lock, error) {
			locks, err := p.pauseLocks(ctx)
			if err != nil {
				return nil, err
			}
			l := pauseFor(locks, name, a.clock.Now())
			var until time.Time
			if l != nil {
				until = l.Until
			}
			a.pauseEnds.note(name, until) // timers.go: the target is woken when the pause ends
			return l, nil
		}, PauseSeen: func(l state.Lock) { a.pauseEnds.note(name, l.Until) }, SourceProblem: problem})
	stored, ok := o.Stored()
	a.keep(name, stored, ok, epoch)
	if awsapi.IsPassBudgetSpent(err) {
		if r.Group != "" {
			p.setRecord(name, r)
		}
		return err // stopped before a call, as a crash there would stop it: looked at first in the next pass
	}
	if err != nil {
		if r.Group == "" {
			r = rec
		}
		a.stepFailed(name, r, "rollout step failed", err)
	} else {
		a.retries.Succeeded(name)
	}
	if r.Group != "" {
		p.setRecord(name, r)
	}
	a.alertSource(t, problem, ami)
	a.settings.Observer.TargetObserved(t, v, r, ami)
	return nil
}

// refreshUnderWay reports whether r is a rollout whose instance refresh was sent (Replacing/InstanceRefresh
// with its id): Auto Scaling replaces the instances and the agent's lifecycle hooks look at the cluster for
// each launch and drain, so the rollout's look reads only the group and the refresh (their lifecycle states,
// the refresh's status), never the cluster's container instances or nodes, and a look at it lists no cluster.
func refreshUnderWay(r state.Rollout) bool {
	return r.Phase == state.PhaseReplacing && r.Current != nil && r.Current.Step == state.StepInstanceRefresh &&
		r.Refresh != nil && r.Refresh.ID != ""
}

// observeCluster reads the cluster view of t's cluster for pass p. A full pass (the safety poll) lists the
// cluster (Platform.Observe); a look at a few targets describes the members it knows without listing when
// the platform can (model.KnownObserver: ECS), for the instances of every group of the pass in that
// cluster, and lists whenever the membership may have changed.
func observeCluster(ctx context.Context, p *pass, platform model.Platform, t model.Target) (map[string]model.NodeState, error) {
	ko, ok := platform.(model.KnownObserver)
	if !p.look || !ok {
		return platform.Observe(ctx, t.Cluster)
	}
	var ids []string
	for _, name := range p.d.Names() {
		if o := p.d.Targets[name]; o.Platform == t.Platform && o.Cluster == t.Cluster {
			for _, i := range p.d.Groups[name].Instances {
				ids = append(ids, aws.ToString(i.InstanceId))
			}
		}
	}
	return ko.ObserveKnown(ctx, t.Cluster, ids)
}

// rollouts returns an orchestrator for one target's step: a copy of the agent's, since an Orchestrator keeps
// the inputs of the Reconcile call in progress (it is not for concurrent use); what it shares (store, clients,
// AMI gate, observer) is safe for concurrent use.
func (a *Agent) rollouts() *engine.Orchestrator {
	o := *a.orchestrator
	return &o
}

// stepFailed backs the target off after a failed step: it is reconciled again after the backoff, or at its
// next deadline or lease renewal when that comes sooner. Passing AWS faults (throttling, 5xx, timeouts) are
// logged as warnings, anything else as an error.
func (a *Agent) stepFailed(group string, r state.Rollout, what string, err error, fields ...zap.Field) {
	d := a.retries.Failed(group, model.LookAgainBy(r))
	fields = append(fields, zap.String(logging.Group, group), zap.Duration(logging.RetryIn, d),
		zap.Int(logging.Attempt, a.retries.Failures(group)), zap.Error(err))
	if awsapi.IsTransient(err) {
		a.log.Warn(what+"; retrying after backoff", fields...)
		return
	}
	a.log.Error(what+"; retrying after backoff", fields...)
}

// resolve reads the named parameters and records the AMIs they name (a.fleet); the caller holds none of the
// agent's locks.
func (a *Agent) resolve(ctx context.Context, names []string) error {
	found, missing, invalid, err := a.resolver.Resolve(ctx, names)
	if err != nil {
		return err
	}
	a.fleet.resolved(found, missing, invalid, a.log)
	return nil
}

// eventMarkerTTL is how long a processed event id is remembered to recognise duplicate deliveries
// (EventBridge retries for up to 24 hours).
const eventMarkerTTL = 24 * time.Hour

// Handle implements events.Handler: it routes one parsed message to its effect. Duplicate deliveries have
// one effect: lifecycle actions are keyed by their token (the hook record), other events by their id (an
// event marker written once the effect is durable); every effect is also idempotent by itself.
func (a *Agent) Handle(ctx context.Context, ev events.Event) (events.Disposition, error) {
	marked := ev.ID != "" && (ev.Kind == events.KindParameterChange || ev.Kind == events.KindScheduledTick || ev.Kind == events.KindAMIAnnouncement)
	if marked {
		seen, err := a.store.EventSeen(ctx, ev.ID)
		if err != nil {
			return events.Done, err
		}
		if seen {
			a.log.Info("duplicate delivery of an event already processed; ignored", zap.String(logging.MessageKind, string(ev.Kind)),
				zap.String("event_id", ev.ID))
			return events.Ignored, nil
		}
	}
	disp, err := a.route(ctx, ev)
	if err == nil && marked && disp == events.Done {
		if _, err := a.store.MarkEvent(ctx, ev.ID, a.clock.Now().Add(eventMarkerTTL)); err != nil {
			// The effect is durable and idempotent: a redelivery repeats it harmlessly.
			a.log.Warn("recording processed event failed", zap.String("event_id", ev.ID), zap.Error(err))
		}
	}
	return disp, err
}

func (a *Agent) route(ctx context.Context, ev events.Event) (events.Disposition, error) {
	switch ev.Kind {
	case events.KindTestNotification, events.KindUnknown:
		a.log.Debug("message not acted on", zap.String(logging.MessageKind, string(ev.Kind)), zap.String(logging.Reason, ev.Reason))
		return events.Ignored, nil
	case events.KindScheduledTick, events.KindAMIAnnouncement:
		// Resolves the parameters and wakes the loop for a whole-fleet pass, held until it finished (tick.go).
		return a.handleScheduledTick(ctx, ev)
	case events.KindParameterChange:
		// A reaction: its calls take the client-side limiter's priority lane (awsapi.WithUrgent).
		disp, err := a.handleParameter(awsapi.WithUrgent(ctx), ev)
		if err != nil && disp == events.Done {
			return doneOrHold(err)
		}
		return disp, err
	case events.KindLifecycleAction:
		return a.handleLifecycle(awsapi.WithUrgent(ctx), ev) // its drain, heartbeats and completion: the priority lane

	case events.KindWakeUp:
		return a.handleWakeUp(ev)
	case events.KindOperatorWakeUp:
		return a.handleOperator(ev)
	}
	return events.Ignored, nil
}

// doneOrHold is the disposition of an event whose handling ended with err: a passing AWS fault (throttling,
// 5xx, timeout) keeps the message held and handled again on the next poll, as a drain's message is, instead
// of leaving it invisible for its whole visibility timeout and walking it toward the dead-letter queue; any
// other error leaves it for redelivery.
func doneOrHold(err error) (events.Disposition, error) {
	if awsapi.IsTransient(err) {
		return events.Hold, err
	}
	return events.Done, err
}

// handleParameter resolves a changed parameter at once and advances the targets that use it. It never waits
// for a pass in progress: it advances its targets beside it (reconcilePass), each target still advanced by
// one goroutine at a time.
func (a *Agent) handleParameter(ctx context.Context, ev events.Event) (events.Disposition, error) {
	p := ev.Parameter
	if !a.fleet.known() {
		d, err := providers.Discover(ctx, a.clients.AutoScaling, a.settings.Sources...)
		if err != nil {
			return events.Done, err
		}
		a.fleet.replace(d)
	}
	affected, name, deleted := a.parameterTargets(p)
	if len(affected) == 0 || p.Exception != "" {
		return events.Ignored, nil
	}
	if deleted {
		// Their status says so now, not at the next poll.
		return events.Done, a.reconcilePass(ctx, affected)
	}
	if err := a.resolve(ctx, []string{name}); err != nil {
		return events.Done, err
	}
	return events.Done, a.reconcilePass(ctx, affected)
}

// parameterTargets returns the targets that use the changed parameter and its name as they spell it;
// for a deleted parameter it also records that its groups have no source (deleted true). A change carrying an
// exception is logged and changes nothing.
func (a *Agent) parameterTargets(p *events.ParameterChange) (affected map[string]bool, name string, deleted bool) {
	affected, name = a.fleet.targetsOf(p.Name)
	if len(affected) == 0 {
		return affected, name, false
	}
	if p.Exception != "" {
		a.log.Warn("parameter change carries an exception (the value failed validation); not acting on it",
			zap.String(logging.Parameter, name), zap.String(logging.Reason, p.Exception))
		return affected, name, false
	}
	if p.Operation == "Delete" {
		a.fleet.deleted(name)
		a.log.Warn("AMI parameter deleted; its groups get no rollout until it exists again", zap.String(logging.Parameter, name))
		return affected, name, true
	}
	return affected, name, false
}

// handleLifecycle drains and completes lifecycle actions of managed groups once Auto Scaling confirmed them
// (lifecycleaction.Hooks.Handle, field case C19); others are ignored (field case C3).
func (a *Agent) handleLifecycle(ctx context.Context, ev events.Event) (events.Disposition, error) {
	l := ev.Lifecycle
	t, ok := a.fleet.discovery().DrainTarget(l.GroupName)
	if !ok {
		// The group may have been opted in since the last discovery: look once more before ignoring, at that
		// group only (one DescribeAutoScalingGroups by name: on a shared queue every message of another
		// cluster's group comes here, in the lane the heartbeats take). When that look fails, nothing is known:
		// keep the message and try again, never drop it.
		var err error
		if t, ok, err = a.discoverDrainTarget(ctx, l.GroupName); err != nil {
			return events.Hold, fmt.Errorf("checking whether group %s is managed: %w", l.GroupName, err)
		}
	}
	if !ok {
		// Field case C3: routine on a shared queue, so info; counted as rejected, nothing drained.
		a.log.Info("lifecycle action for a group this agent does not manage; ignored",
			zap.String(logging.Group, l.GroupName), zap.String(logging.InstanceID, l.InstanceID),
			zap.String(logging.Reason, model.RejectGroupNotManaged))
		a.settings.Observer.LifecycleMessageRejected(model.Rejection{Reason: model.RejectGroupNotManaged,
			Detail: "group " + l.GroupName + " is not managed by this agent", Action: *l, At: a.clock.Now()})
		return events.Ignored, nil
	}
	if l.Action == events.ActionReplaceRootVolume {
		a.images.forget(l.InstanceID)
	}
	out, err := a.hooks.Handle(ctx, t, *l)
	if err != nil {
		return events.Hold, err
	}
	return out, nil // the hook's outcome is the message's disposition (lifecycleaction.HookOutcome = events.Disposition)
}

// discoverDrainTarget decides group afresh from its description (providers.DiscoverNamed), records it in the
// fleet as known, and returns its drain target (DrainTarget). Before any full discovery it discovers every group.
func (a *Agent) discoverDrainTarget(ctx context.Context, group string) (model.Target, bool, error) {
	if !a.fleet.known() {
		d, err := providers.Discover(ctx, a.clients.AutoScaling, a.settings.Sources...)
		if err != nil {
			return model.Target{}, false, err
		}
		a.fleet.replace(d)
		t, ok := d.DrainTarget(group)
		return t, ok, nil
	}
	names := []string{group}
	d, err := providers.DiscoverNamed(ctx, a.clients.AutoScaling, names, a.settings.Sources...)
	if err != nil {
		return model.Target{}, false, err
	}
	a.fleet.merge(names, d)
	t, ok := d.DrainTarget(group)
	return t, ok, nil
}

// alertSource alerts (metric, notification) when t's source went missing or came back since the last
// alert for t: once per transition, not every tick. A source seen for the first time alerts only when missing.
func (a *Agent) alertSource(t model.Target, problem string, ami *model.ResolvedAMI) {
	if ami != nil {
		problem = ""
	}
	switch a.alerted.sourceChange(t.Group, problem) {
	case sourceMissing:
		model.SendAlert(a.settings.Observer, model.Alert{Kind: model.AlertSourceMissing, Target: t, Detail: problem, At: a.clock.Now()})
	case sourceRestored:
		al := model.Alert{Kind: model.AlertSourceRestored, Target: t, Detail: "source " + t.Parameter + " names an AMI again", At: a.clock.Now()}
		if ami != nil {
			al.ImageID = ami.ImageID
		}
		a.log.Info("AMI source restored", zap.String(logging.Group, t.Group), zap.String(logging.Parameter, t.Parameter))
		model.SendAlert(a.settings.Observer, al)
	}
}

// alertMisconfigured alerts (metric, notification) once per opted-in group and distinct misconfiguration (a
// tag with a value the agent does not accept): such a group is left alone, and its status line saying why
// (recordNotRolled) is read only by whoever looks, so without the alert a typo would leave it unpatched
// unheard. The Auto Scaling groups of EKS managed node groups are not misconfigured (status says why they are
// not rolled). A pass over some targets (only) leaves the others' alerts.
func (a *Agent) alertMisconfigured(misconfigured map[string]error, only map[string]bool) {
	fresh := a.alerted.newMisconfigurations(misconfigured, only == nil)
	for _, g := range slices.Sorted(maps.Keys(fresh)) {
		model.SendAlert(a.settings.Observer, model.Alert{Kind: model.AlertMisconfigured, Target: model.Target{Group: g},
			Detail: "opted-in group left alone: " + fresh[g].Error(), At: a.clock.Now()})
	}
}

// SourceProblem returns why a parameter names no usable AMI, or "".
func (a *Agent) SourceProblem(param string) string {
	_, problem := a.fleet.source(param)
	return problem
}

// String describes the agent for logs.
func (a *Agent) String() string { return fmt.Sprintf("patch-agent(queue=%s)", a.settings.QueueURL) }

// pauseFor returns the lock that pauses group at now: the global lock first, then the group's own.
func pauseFor(locks []state.Lock, group string, now time.Time) *state.Lock {
	for _, scope := range []string{state.GlobalScope, group} {
		for _, l := range locks {
			if l.Group == scope && l.Active(now) {
				return &l
			}
		}
	}
	return nil
}

// noAlarmAPI holds targets that name alarms when the agent has no CloudWatch client: a gate that cannot be
// checked is closed.
type noAlarmAPI struct{}

func (noAlarmAPI) InAlarm(context.Context, []string) ([]string, error) {
	return nil, fmt.Errorf("no CloudWatch client configured")
}

// alertCapped warns and alerts once when a group's terminating hook cannot hold a drain of
// --drain-timeout (lifecycleaction.Hooks.CheckOwnedHooks): its drains are capped at the hook's limit, and the note stays on the
// group's status (Rollout.Warning) until the hook or the flag changes. The agent caps rather than refusing to
// start: hooks belong to groups that are opted in at any time, and one short hook must not stop the drains of
// every other group.
func (a *Agent) alertCapped(t model.Target, before string, c lifecycleaction.HookCheck) {
	if len(c.Capped) == 0 || before == c.Note() {
		return
	}
	note := strings.Join(c.Capped, "; ")
	a.log.Warn("--drain-timeout is longer than a lifecycle hook's global timeout; its drains are capped", zap.String(logging.Group, t.Group),
		zap.String(logging.Reason, note))
	model.SendAlert(a.settings.Observer, model.Alert{Kind: model.AlertDrainTimeoutCapped, Target: t, Detail: note, At: a.clock.Now()})
}
