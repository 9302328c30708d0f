package sim

import (
	"time"
)

// Amazon ECS capacity providers on Auto Scaling groups (GroupSpec.CapacityProvider).
//
// Amazon ECS Developer Guide, "Amazon ECS capacity providers for EC2 workloads": a capacity provider wraps one
// Auto Scaling group of a cluster. With managed scaling ECS owns the group's desired capacity (through a target
// tracking policy on its CapacityProviderReservation metric); with managed termination protection ECS decides
// which instances scale-in may take; with managed instance draining ECS drains an instance before it terminates.
//
// What the simulation keeps of it:
//   - Every service of the cluster uses the cluster's default capacity provider strategy, which names one
//     capacity provider: the first capacity-provider group of the cluster in name order. Only that group sees
//     the cluster's waiting (PROVISIONING) tasks.
//   - A task that finds no container instance with room is not created as a task object: the service scheduler
//     keeps retrying it on every settle, and places it as soon as an ACTIVE instance with room registers
//     (reconcileCluster). ProvisioningTasks counts such waiting tasks, and they drive managed scaling.
//   - A service task on a DRAINING instance keeps RUNNING until its replacement can start on another instance,
//     unless the service's minimumHealthyPercent lets ECS stop it first (ecsdeployment.go); each replacement
//     that cannot start yet is a waiting task too.

// Capacity provider names and callers.
const (
	// CallerTest marks changes made through the account's setup helpers (Account.SetDesiredCapacity) in
	// DesiredChange.By, beside CallerAPI and CallerECS.
	CallerTest = "test"
	// ECSManagedTagKey is the tag Amazon ECS puts on an Auto Scaling group whose capacity provider has managed
	// scaling on. Amazon ECS Developer Guide, "Amazon ECS capacity providers for EC2 workloads" / "Managed
	// scaling": the group carries the AmazonECSManaged tag while ECS manages its scaling.
	ECSManagedTagKey = "AmazonECSManaged"
)

const (
	// capacityProviderPeriod is how often ECS publishes CapacityProviderReservation: once a minute (Amazon ECS
	// Developer Guide, "Managed scaling": the metric is evaluated every minute).
	capacityProviderPeriod = time.Minute
	// scaleInDatapoints is how many consecutive datapoints below target the target tracking policy's low alarm
	// needs before it scales in (Amazon ECS Developer Guide, "Managed scaling": scale-in happens only after the
	// metric stays below the target for 15 minutes). Its high alarm needs a single datapoint.
	scaleInDatapoints = 15
	// defaultInstanceWarmup is ManagedScaling.instanceWarmupPeriod's default (Amazon ECS API Reference,
	// "ManagedScaling": 300 seconds).
	defaultInstanceWarmup = 300 * time.Second
)

// CapacityProviderSpec is an Amazon ECS capacity provider for an Auto Scaling group (GroupSpec.CapacityProvider),
// associated with the group's ECSCluster.
type CapacityProviderSpec struct {
	// Name is the capacity provider's name (default: the group's name). DescribeContainerInstances reports it as
	// each of the group's container instances' capacityProviderName.
	Name string
	// ManagedScaling lets ECS set the group's desired capacity from its CapacityProviderReservation metric, every
	// minute (see Account.CapacityProviderReservation). The group gets the tag AmazonECSManaged=true.
	ManagedScaling bool
	// TargetCapacity is the target CapacityProviderReservation in percent, 1 to 100 (0 means the default, 100).
	TargetCapacity int
	// ManagedTerminationProtection lets ECS set scale-in protection on instances running non-daemon tasks at
	// every evaluation, and clear it on the idle instances it scales in, when it scales in. It requires
	// NewInstancesProtectedFromScaleIn on the group, and does nothing without ManagedScaling.
	ManagedTerminationProtection bool
	// ManagedDraining adds ECS's own terminating hook to the group and drains every terminating instance before
	// completing it, exactly as GroupSpec.ECSManagedDraining.
	ManagedDraining bool
	// InstanceWarmupPeriod is how long after launch an instance that has not yet registered with the cluster is
	// still counted on as capacity on the way (0 means the default, 300 s). See evaluateCapacityProvider.
	InstanceWarmupPeriod time.Duration
	// MinimumScalingStepSize and MaximumScalingStepSize bound how many instances one scale-out adds (Amazon ECS
	// API Reference, "ManagedScaling": 1 to 10000; 0 means the defaults, 1 and 10000; scale-in is not
	// affected). A group in more than one Availability Zone scales out by exactly MinimumScalingStepSize.
	MinimumScalingStepSize, MaximumScalingStepSize int32
}

// capacityProvider is a group's capacity provider and the state of its managed scaling.
type capacityProvider struct {
	spec CapacityProviderSpec
	// low counts consecutive evaluations below target.
	low int
	// reservation is the last CapacityProviderReservation computed; evaluated tells whether there was one.
	reservation float64
	evaluated   bool
}

// normalizeCapacityProvider validates a group's capacity provider and fills its defaults. It returns nil when the
// group has none.
func normalizeCapacityProvider(spec GroupSpec) (*CapacityProviderSpec, error) {
	if spec.CapacityProvider == nil {
		return nil, nil
	}
	cp := *spec.CapacityProvider
	if cp.Name == "" {
		cp.Name = spec.Name
	}
	if spec.ECSCluster == "" {
		return nil, apiError("ValidationError", "The capacity provider %s needs an Amazon ECS cluster: the group's ECSCluster is empty.", cp.Name)
	}
	if cp.TargetCapacity == 0 {
		cp.TargetCapacity = 100
	}
	// Amazon ECS API Reference, "ManagedScaling": targetCapacity must be greater than 0 and at most 100.
	if cp.TargetCapacity < 1 || cp.TargetCapacity > 100 {
		return nil, apiError("ValidationError", "The target capacity %d for capacity provider %s must be between 1 and 100.", cp.TargetCapacity, cp.Name)
	}
	if cp.InstanceWarmupPeriod <= 0 {
		cp.InstanceWarmupPeriod = defaultInstanceWarmup
	}
	// Amazon ECS API Reference, "ManagedScaling": minimumScalingStepSize and maximumScalingStepSize range from 1
	// to 10000, defaults 1 and 10000.
	if cp.MinimumScalingStepSize == 0 {
		cp.MinimumScalingStepSize = 1
	}
	if cp.MaximumScalingStepSize == 0 {
		cp.MaximumScalingStepSize = 10000
	}
	if cp.MinimumScalingStepSize < 1 || cp.MaximumScalingStepSize > 10000 || cp.MinimumScalingStepSize > cp.MaximumScalingStepSize {
		return nil, apiError("ValidationError", "The scaling step sizes %d to %d for capacity provider %s must be between 1 and 10000, minimum first.",
			cp.MinimumScalingStepSize, cp.MaximumScalingStepSize, cp.Name)
	}
	// Amazon ECS Developer Guide, "Managed termination protection": the Auto Scaling group must have instance
	// scale-in protection turned on to use managed termination protection; ECS refuses the capacity provider
	// otherwise.
	if cp.ManagedTerminationProtection && !spec.NewInstancesProtectedFromScaleIn {
		return nil, apiError("ValidationError", "The managed termination protection setting for the capacity provider %s is invalid. "+
			"To enable managed termination protection for a capacity provider, the Auto Scaling group must have instance protection from scale in enabled.", cp.Name)
	}
	return &cp, nil
}

// attachCapacityProvider associates a validated capacity provider with a new group. Callers hold the lock.
func (s *ecsService) attachCapacityProvider(g *group, cp CapacityProviderSpec) {
	g.capacityProvider = &capacityProvider{spec: cp}
	if cp.ManagedScaling {
		// Amazon ECS Developer Guide, "Amazon ECS capacity providers for EC2 workloads": ECS tags the Auto Scaling
		// group it manages with AmazonECSManaged.
		g.tags[ECSManagedTagKey] = "true"
		s.scheduleCapacityProviderEvaluation(g)
	}
	if cp.ManagedDraining {
		// Amazon ECS Developer Guide, "Managed instance draining": ECS adds its own terminating lifecycle hook to
		// the group and drains each terminating instance before it lets the termination proceed.
		g.managedDraining = true
		_ = s.autoScaling.putHook(g, HookSpec{Name: ECSManagedDrainingHookName, Transition: TransitionTerminating, HeartbeatTimeout: time.Hour})
	}
}

// scheduleCapacityProviderEvaluation runs managed scaling every capacityProviderPeriod for as long as the group
// exists.
func (s *ecsService) scheduleCapacityProviderEvaluation(g *group) {
	s.after(capacityProviderPeriod, func() {
		if s.autoScaling.group(g.name) != g {
			return
		}
		s.evaluateCapacityProvider(g)
		s.scheduleCapacityProviderEvaluation(g)
	})
}

// evaluateCapacityProvider is one minute of ECS managed scaling and managed termination protection for a group.
// Callers hold the lock; the event loop settles the account afterwards.
func (s *ecsService) evaluateCapacityProvider(g *group) {
	cp := g.capacityProvider
	running := s.autoScaling.running(g)

	// Amazon ECS Developer Guide, "Control the instances Amazon ECS terminates" (managed termination
	// protection): ECS turns scale-in protection on for the instances that run non-daemon tasks (daemon tasks
	// are ignored); it turns protection off only when it scales in, on instances whose non-daemon tasks are all
	// STOPPED (scaleInIdle), so that a scale-in only takes instances without tasks. An idle instance keeps the
	// protection it launched with until then. Instances whose container agent has not registered yet are left
	// as launched.
	if cp.spec.ManagedTerminationProtection {
		for _, inst := range running {
			if ci := s.containerInstanceOf(inst); ci != nil {
				if n, _ := s.nonStoppedTasks(ci); n > 0 {
					inst.protected = true
				}
			}
		}
	}

	// Amazon ECS Developer Guide, "Managed scaling": CapacityProviderReservation = M / N * 100, where N is the
	// number of instances in the group that are running or launching, and M the number of instances needed to
	// run every task assigned to the capacity provider: the instances running at least one non-daemon task —
	// DRAINING ones included while their tasks run (AWS Containers Blog, "Deep Dive on Amazon ECS Cluster Auto
	// Scaling": an instance is counted in M while it runs tasks; Developer Guide, "Draining Amazon ECS container
	// instances": a draining instance's tasks run until their replacements start) — plus the instances needed
	// for the tasks in PROVISIONING (binpacked, MaxTasksPerInstance a piece). When tasks are in PROVISIONING, M
	// is at least N+1 so that the group scales out ("Managed scale-out behavior").
	n := len(running)
	m := 0
	for _, inst := range running {
		ci := s.containerInstanceOf(inst)
		if ci == nil {
			continue
		}
		if busy, _ := s.nonStoppedTasks(ci); busy > 0 {
			m++
		}
	}
	if waiting := s.capacityProviderWaitingTasks(g); waiting > 0 {
		per := s.opts.MaxTasksPerInstance
		m += (waiting + per - 1) / per
		// Amazon ECS API Reference, "ManagedScaling" (instanceWarmupPeriod): a newly launched instance does not
		// contribute to the metrics before it warmed up. The simulation reads this as: while an instance of the
		// group is still on its way (launched within the warm-up period, its container agent not yet
		// registered), the capacity it brings already counts and the N+1 floor does not ask for yet another one.
		// Without this, every minute of a 110 s boot would add one more instance.
		if !s.capacityOnTheWay(g, running) && m < n+1 {
			m = n + 1
		}
	}

	var reservation float64
	switch {
	case n == 0 && m == 0:
		reservation = 100 // the docs' M = 0, N = 0 case: nothing to do
	case n == 0:
		reservation = 200 // the docs' M > 0, N = 0 case
	default:
		reservation = float64(m) * 100 / float64(n)
	}
	cp.reservation, cp.evaluated = reservation, true

	// Target tracking on CapacityProviderReservation with the capacity provider's targetCapacity as target: the
	// desired capacity that brings the metric back to target is ceil(M * 100 / targetCapacity). The high alarm
	// scales out after one datapoint above target; the low alarm scales in after 15 consecutive datapoints below
	// it. Both stay within the group's minimum and maximum.
	target := cp.spec.TargetCapacity
	want := int32((m*100 + target - 1) / target)
	switch {
	case n == 0 && m == 0:
		cp.low = 0
	case reservation > float64(target):
		cp.low = 0
		if want > g.desired {
			// Amazon ECS API Reference, "ManagedScaling": one scale-out adds at least minimumScalingStepSize and
			// at most maximumScalingStepSize instances; a group in more than one Availability Zone (or with more
			// than one instance type) adds exactly minimumScalingStepSize, whatever the demand.
			step := min(max(want-g.desired, cp.spec.MinimumScalingStepSize), cp.spec.MaximumScalingStepSize)
			if len(g.azs) > 1 || g.mixed {
				step = cp.spec.MinimumScalingStepSize
			}
			s.autoScaling.changeDesired(g, min(g.desired+step, g.max), CallerECS)
		}
	case reservation < float64(target):
		cp.low++
		if cp.low >= scaleInDatapoints {
			cp.low = 0
			if want < g.min {
				want = g.min
			}
			if want < g.desired {
				s.scaleInIdle(g, running, want)
			}
		}
	default:
		cp.low = 0
	}
}

// scaleInIdle is a managed-scaling scale-in towards want: with managed termination protection ECS turns
// protection off on as many idle registered instances (no non-daemon task that is not STOPPED) as it removes,
// most recently launched first, and lowers desired capacity by that many, never below want (Amazon ECS Developer
// Guide, "Control the instances Amazon ECS terminates": when an instance's non-daemon tasks are stopped, ECS
// starts the scale-in and turns off its scale-in protection; Auto Scaling then terminates unprotected
// instances). Without managed termination protection it only lowers desired capacity. Callers hold the lock.
func (s *ecsService) scaleInIdle(g *group, running []*instance, want int32) {
	cut := g.desired - want
	if g.capacityProvider.spec.ManagedTerminationProtection {
		cleared := int32(0)
		for i := len(running) - 1; i >= 0 && cleared < cut; i-- {
			ci := s.containerInstanceOf(running[i])
			if ci == nil {
				continue
			}
			if n, _ := s.nonStoppedTasks(ci); n == 0 {
				running[i].protected = false
				cleared++
			}
		}
		cut = cleared
	}
	if cut > 0 {
		s.autoScaling.changeDesired(g, g.desired-cut, CallerECS)
	}
}

// capacityOnTheWay reports whether an instance of the group is launching and within its warm-up period: running
// or pending, its container instance not yet registered, launched less than InstanceWarmupPeriod ago.
func (s *ecsService) capacityOnTheWay(g *group, running []*instance) bool {
	for _, inst := range running {
		if inst.ciARN == "" && s.now().Sub(inst.launchTime) < g.capacityProvider.spec.InstanceWarmupPeriod {
			return true
		}
	}
	return false
}

// capacityProviderWaitingTasks returns the tasks in PROVISIONING that belong to the group's capacity provider:
// those of services with a capacity provider strategy that the strategy assigns to it (base, then weight:
// ecsdeployment.go), and, when the group is the cluster's default capacity provider, those of the services that
// use the cluster's default strategy. Services with launch type EC2 credit no capacity provider.
func (s *ecsService) capacityProviderWaitingTasks(g *group) int {
	c := s.clusters[g.cluster]
	if c == nil {
		return 0
	}
	isDefault := s.defaultCapacityProviderGroup(g.cluster) == g
	n := 0
	for svc, missing := range s.waitingByService(c) {
		switch {
		case svc.deployment.LaunchTypeEC2:
		case len(svc.deployment.CapacityProviderStrategy) > 0:
			count := s.providerCounts(c, svc)
			for range missing {
				p := pickProvider(svc.deployment.CapacityProviderStrategy, count)
				count[p]++
				if p == g.capacityProvider.spec.Name {
					n++
				}
			}
		case isDefault:
			n += missing
		}
	}
	return n
}

// defaultCapacityProviderGroup returns the cluster's first capacity-provider group in name order, or nil.
func (s *ecsService) defaultCapacityProviderGroup(cluster string) *group {
	for _, name := range s.autoScaling.groupNames() {
		if g := s.autoScaling.group(name); g.capacityProvider != nil && g.cluster == cluster {
			return g
		}
	}
	return nil
}

// waitingTasks counts the service tasks of a cluster that no container instance has room for: for each replica
// service, the tasks missing to its desired count, plus every RUNNING task on a DRAINING instance whose
// replacement could not start yet. Callers hold the lock and have settled the account.
func (s *ecsService) waitingTasks(c *cluster) int {
	waiting := 0
	for _, n := range s.waitingByService(c) {
		waiting += n
	}
	return waiting
}

// waitingByService splits waitingTasks by service.
func (s *ecsService) waitingByService(c *cluster) map[*service]int {
	covered := s.coveredTasks(c)
	waiting := map[*service]int{}
	for _, svc := range c.services {
		if svc.daemon {
			continue
		}
		live := 0
		for _, t := range c.tasks {
			if t.service == svc && t.live() && !covered[t] {
				live++
			}
		}
		if live < svc.desired {
			waiting[svc] += svc.desired - live
		}
	}
	for _, t := range c.tasks {
		if t.service != nil && !t.isDaemon() && t.live() && t.lastStatus == taskRunning && t.ci.status == ciDraining && !covered[t] {
			waiting[t.service]++
		}
	}
	return waiting
}

// capacityProviderName returns the name of the capacity provider of the group a container instance's EC2
// instance belongs to, or nil.
func (s *ecsService) capacityProviderName(ci *containerInstance) *string {
	inst := s.ec2.instance(ci.ec2ID)
	if inst == nil {
		return nil
	}
	g := s.autoScaling.group(inst.group)
	if g == nil || g.capacityProvider == nil {
		return nil
	}
	return ptr(g.capacityProvider.spec.Name)
}

// CapacityProviderReservation returns the CapacityProviderReservation (percent) ECS computed for the group's
// capacity provider at its last evaluation; ok is false when the group has no capacity provider with managed
// scaling or it was not evaluated yet. Observation helper: not counted.
func (s *ecsService) CapacityProviderReservation(group string) (percent float64, ok bool) {
	defer s.lock()()
	g := s.autoScaling.group(group)
	if g == nil || g.capacityProvider == nil || !g.capacityProvider.evaluated {
		return 0, false
	}
	return g.capacityProvider.reservation, true
}

// ProvisioningTasks returns how many service tasks of the cluster wait for room on a container instance (ECS
// keeps them in PROVISIONING): tasks missing to a replica service's desired count, and replacements for tasks on
// DRAINING instances that could not start yet. Observation helper: not counted.
func (s *ecsService) ProvisioningTasks(cluster string) int {
	defer s.lock()()
	c := s.clusters[cluster]
	if c == nil {
		return 0
	}
	return s.waitingTasks(c)
}

// ServiceDesired returns a service's desired count: the replica service's desiredCount, or for a daemon service
// the number of ACTIVE, agent-connected container instances (as DescribeServices reports it). It returns 0 when
// the cluster or service does not exist. Observation helper: not counted.
func (s *ecsService) ServiceDesired(cluster, service string) int {
	defer s.lock()()
	c := s.clusters[cluster]
	if c == nil {
		return 0
	}
	svc := c.findService(service)
	if svc == nil {
		return 0
	}
	if !svc.daemon {
		return svc.desired
	}
	n := 0
	for _, ci := range c.cis {
		if ci.status == ciActive && ci.agentConnected {
			n++
		}
	}
	return n
}
