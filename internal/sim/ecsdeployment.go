package sim

import (
	"slices"
	"strconv"

	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Services' deployment configuration and placement constraints, as far as they decide what happens to the tasks
// of a DRAINING container instance.
//
// Amazon ECS Developer Guide, "Draining Amazon ECS container instances": service tasks on a draining instance
// that are RUNNING are stopped and replaced according to the service's deployment configuration,
// minimumHealthyPercent and maximumPercent. A minimumHealthyPercent below 100 lets the scheduler stop a task
// before its replacement runs while the service keeps at least desiredCount × minimumHealthyPercent / 100
// (rounded up) tasks RUNNING; maximumPercent bounds the service's RUNNING and PENDING tasks to desiredCount ×
// maximumPercent / 100 (rounded down), so at 100 a replacement starts only once the old task stopped.
// Amazon ECS API Reference, "DeploymentConfiguration": the defaults for the replica strategy are 100 and 200.
// "Amazon ECS task placement constraints" (distinctInstance: each task of the group on a different container
// instance) and "Amazon ECS task definition parameters" (portMappings with a static hostPort: the port is held
// on the instance until the task stopped, so a second task with that port cannot be placed there).

// ServiceDeployment is a replica service's deployment configuration and placement rules
// (Account.SetServiceDeployment).
type ServiceDeployment struct {
	// MinimumHealthyPercent and MaximumPercent (percent of desiredCount): 0 means the defaults, 100 and 200.
	// A MinimumHealthyPercent of 0 is written as -1.
	MinimumHealthyPercent, MaximumPercent int
	// DistinctInstance is the distinctInstance placement constraint; StaticHostPort a container port mapped to
	// a static host port. Either places at most one not-STOPPED task of the service per container instance.
	DistinctInstance, StaticHostPort bool
	// Binpack is the placement strategy binpack on memory: a new task goes to the ACTIVE instance with the least
	// memory left that can take it (Amazon ECS Developer Guide, "Amazon ECS task placement strategies"). Without
	// it the service spreads by Availability Zone, then by instance (spread(attribute:ecs.availability-zone),
	// spread(instanceId): the strategy the console gives a replica service).
	Binpack bool
	// AvailabilityZoneRebalancing is the service's availabilityZoneRebalancing ENABLED (ecsrebalance.go). Amazon
	// ECS API Reference, "CreateService": a new service defaults to ENABLED when it is compatible (not binpack);
	// a service created before that default, or updated without the field, keeps DISABLED. The simulation's
	// services are DISABLED unless this is set.
	AvailabilityZoneRebalancing bool
	// CapacityProviderStrategy, when set, is the service's own capacity provider strategy (Amazon ECS Developer
	// Guide, "Amazon ECS capacity providers for EC2 workloads", capacity provider strategy: base is the fewest
	// tasks on that provider, weight the share of the tasks beyond the bases): each task goes only to the
	// instances of the group of the provider the strategy picks for it, and a task that waits for room is
	// credited to that provider's managed scaling. LaunchTypeEC2 instead places the service's tasks on any
	// instance of the cluster, and its waiting tasks are credited to no capacity provider (a service with a
	// launch type uses no capacity provider strategy). With neither, the service uses the cluster's default
	// strategy: the simulation places its tasks on any instance and credits its waiting tasks to the cluster's
	// first capacity provider.
	CapacityProviderStrategy []StrategyItem
	LaunchTypeEC2            bool
}

// StrategyItem is one capacity provider of a capacity provider strategy (Amazon ECS API Reference,
// "CapacityProviderStrategyItem"): Base tasks (0 to 100000, only one item may have one) first, then Weight
// (0 to 1000) as its relative share.
type StrategyItem struct {
	CapacityProvider string
	Base, Weight     int
}

// anyProvider is serviceProviderFor's answer for a task that may go to any instance of the cluster.
const anyProvider = "*"

// pickProvider returns the capacity provider of the strategy the next task goes to, given the service's live
// tasks per provider: the first item below its base, else the item with the fewest tasks beyond its base per
// unit of weight (ties to the first).
func pickProvider(items []StrategyItem, count map[string]int) string {
	for _, it := range items {
		if count[it.CapacityProvider] < it.Base {
			return it.CapacityProvider
		}
	}
	best, bestShare := "", 0.0
	for _, it := range items {
		if it.Weight <= 0 {
			continue
		}
		share := float64(count[it.CapacityProvider]-it.Base) / float64(it.Weight)
		if best == "" || share < bestShare {
			best, bestShare = it.CapacityProvider, share
		}
	}
	if best == "" && len(items) > 0 {
		best = items[0].CapacityProvider
	}
	return best
}

// providerCounts returns the service's live tasks per capacity provider name of their instance's group.
func (s *ecsService) providerCounts(c *cluster, svc *service) map[string]int {
	count := map[string]int{}
	for _, t := range c.tasks {
		if t.service == svc && t.live() {
			count[s.providerOf(t.ci)]++
		}
	}
	return count
}

// providerOf returns the capacity provider name of the group of a container instance's EC2 instance ("" when
// none).
func (s *ecsService) providerOf(ci *containerInstance) string {
	if p := s.capacityProviderName(ci); p != nil {
		return *p
	}
	return ""
}

// serviceProviderFor returns the capacity provider the service's next task goes to (anyProvider: any instance).
func (s *ecsService) serviceProviderFor(c *cluster, svc *service) string {
	if len(svc.deployment.CapacityProviderStrategy) == 0 {
		return anyProvider
	}
	return pickProvider(svc.deployment.CapacityProviderStrategy, s.providerCounts(c, svc))
}

// SetServiceDeployment sets a replica service's deployment configuration and placement rules. Setup helper: not
// counted. It does nothing when the cluster or service does not exist.
func (s *ecsService) SetServiceDeployment(cluster, service string, d ServiceDeployment) {
	defer s.lock()()
	c := s.clusters[cluster]
	if c == nil {
		return
	}
	if svc := c.findService(service); svc != nil {
		svc.deployment = d
		svc.hostPort = 0
		if d.StaticHostPort {
			svc.hostPort = firstStaticHostPort
			for _, o := range c.services {
				if o != svc && o.hostPort >= svc.hostPort {
					svc.hostPort = o.hostPort + 1
				}
			}
		}
	}
}

// firstStaticHostPort is the host port the first service of a cluster with StaticHostPort maps its container
// port 80 to; the next such service maps the next port.
const firstStaticHostPort = 8080

// agentReservedPorts are the host ports the ECS container agent reserves at registration (Amazon ECS Developer
// Guide, "Amazon ECS container agent configuration": ECS_RESERVED_PORTS, default [22, 2375, 2376, 51678,
// 51679]). Amazon ECS API Reference, "ContainerInstance": registeredResources PORTS lists them;
// remainingResources PORTS lists them and every host port that task containers hold on the instance (host or
// bridge network mode); any other port is free for new tasks.
var agentReservedPorts = []string{"22", "2375", "2376", "51678", "51679"}

// portResources returns a container instance's PORTS resources: registered (the agent's reserved ports) and
// remaining (those and the static host ports of its tasks that are not STOPPED).
func (s *ecsService) portResources(c *cluster, ci *containerInstance) (registered, remaining ecstypes.Resource) {
	held := slices.Clone(agentReservedPorts)
	for _, t := range c.tasks {
		if t.ci == ci && t.service != nil && t.service.hostPort != 0 && t.lastStatus != taskStopped {
			held = append(held, strconv.Itoa(int(t.service.hostPort)))
		}
	}
	return ecstypes.Resource{Name: ptr("PORTS"), Type: ptr("STRINGSET"), StringSetValue: slices.Clone(agentReservedPorts)},
		ecstypes.Resource{Name: ptr("PORTS"), Type: ptr("STRINGSET"), StringSetValue: held}
}

// placementConstraints returns a service's placementConstraints as DescribeServices reports them (Amazon ECS
// Developer Guide, "Amazon ECS task placement constraints": distinctInstance places each task of the service
// on a different container instance).
func (s *service) placementConstraints() []ecstypes.PlacementConstraint {
	if !s.deployment.DistinctInstance {
		return nil
	}
	return []ecstypes.PlacementConstraint{{Type: ecstypes.PlacementConstraintTypeDistinctInstance}}
}

// networkBindings returns a service task's container network bindings (Amazon ECS API Reference,
// "NetworkBinding"): container port 80 on the service's static host port, none without one.
func (s *service) networkBindings() []ecstypes.NetworkBinding {
	if s.hostPort == 0 {
		return nil
	}
	return []ecstypes.NetworkBinding{{ContainerPort: ptr(int32(80)), HostPort: ptr(s.hostPort), Protocol: ecstypes.TransportProtocolTcp, BindIP: ptr("0.0.0.0")}}
}

// minHealthy returns the service's minimumHealthyPercent (default 100).
func (s *service) minHealthy() int {
	switch p := s.deployment.MinimumHealthyPercent; {
	case p < 0:
		return 0
	case p == 0:
		return 100
	default:
		return p
	}
}

// maxPercent returns the service's maximumPercent (default 200).
func (s *service) maxPercent() int {
	if s.deployment.MaximumPercent <= 0 {
		return 200
	}
	return s.deployment.MaximumPercent
}

// onePerInstance reports whether at most one not-STOPPED task of the service fits on a container instance.
func (s *service) onePerInstance() bool {
	return s.deployment.DistinctInstance || s.deployment.StaticHostPort
}

// minRunning is the fewest RUNNING tasks the scheduler keeps while it replaces tasks: desiredCount ×
// minimumHealthyPercent / 100, rounded up.
func (s *service) minRunning() int { return (s.desired*s.minHealthy() + 99) / 100 }

// maxLive is the most RUNNING and PENDING tasks the scheduler allows: desiredCount × maximumPercent / 100,
// rounded down (at least desiredCount).
func (s *service) maxLive() int { return max(s.desired*s.maxPercent()/100, s.desired) }

// serviceCounts returns a service's tasks wanted running (PENDING or RUNNING) and RUNNING.
func serviceCounts(c *cluster, svc *service) (live, running int) {
	for _, t := range c.tasks {
		if t.service != svc || !t.live() {
			continue
		}
		live++
		if t.lastStatus == taskRunning {
			running++
		}
	}
	return live, running
}

// ServiceMinimumHealthy returns the fewest RUNNING tasks a service keeps while ECS replaces its tasks (desired ×
// minimumHealthyPercent, rounded up; a daemon service: 0). Observation helper: not counted.
func (v *View) ServiceMinimumHealthy(cluster, service string) (int, bool) {
	c := v.w.ecs.cluster(cluster)
	if c == nil {
		return 0, false
	}
	svc := c.findService(service)
	if svc == nil {
		return 0, false
	}
	if svc.daemon {
		return 0, true
	}
	return svc.minRunning(), true
}

// RunStandaloneTask starts a task started by no service (RunTask, or an AWS Batch job on an ECS compute
// environment, startedBy "AWS Batch") on the EC2 instance's container instance; it is RUNNING at once and runs
// until its instance is deregistered. Amazon ECS Developer Guide, "Draining Amazon ECS container instances":
// standalone tasks are not affected by draining; they keep running and must end by themselves. It returns false
// when the instance has no registered container instance. Setup helper: not counted.
func (s *ecsService) RunStandaloneTask(ec2InstanceID, startedBy string) bool {
	defer s.lock()()
	inst := s.ec2.instance(ec2InstanceID)
	if inst == nil {
		return false
	}
	ci := s.containerInstanceOf(inst)
	if ci == nil {
		return false
	}
	c := s.clusters[inst.cluster]
	s.instant = true
	t := s.placeTask(c, ci, nil)
	s.instant = false
	t.startedBy = startedBy
	s.settle()
	return true
}

// SetServiceDesiredCount sets a replica service's desiredCount (as UpdateService does; Amazon ECS API Reference,
// "UpdateService"): the scheduler places or stops tasks towards it on the next settle. Setup helper: not
// counted. It does nothing when the cluster or service does not exist, or the service is a daemon service.
func (s *ecsService) SetServiceDesiredCount(cluster, service string, n int) {
	defer s.lock()()
	c := s.clusters[cluster]
	if c == nil {
		return
	}
	if svc := c.findService(service); svc != nil && !svc.daemon {
		svc.desired = n
		s.settle()
	}
}

// placementStrategy returns a service's placementStrategy as DescribeServices reports it (Amazon ECS API
// Reference, "PlacementStrategy"): binpack on memory, or spread by Availability Zone then by instance.
func (s *service) placementStrategy() []ecstypes.PlacementStrategy {
	if s.deployment.Binpack {
		return []ecstypes.PlacementStrategy{{Type: ecstypes.PlacementStrategyTypeBinpack, Field: ptr("memory")}}
	}
	return []ecstypes.PlacementStrategy{{Type: ecstypes.PlacementStrategyTypeSpread, Field: ptr("attribute:ecs.availability-zone")},
		{Type: ecstypes.PlacementStrategyTypeSpread, Field: ptr("instanceId")}}
}

// launchType and capacityProviderStrategy are a service's launchType and capacityProviderStrategy as
// DescribeServices reports them (Amazon ECS API Reference, "Service": a service has one or the other).
func (s *service) launchType() ecstypes.LaunchType {
	if len(s.deployment.CapacityProviderStrategy) > 0 {
		return ""
	}
	return ecstypes.LaunchTypeEc2
}

func (s *service) capacityProviderStrategy() []ecstypes.CapacityProviderStrategyItem {
	var out []ecstypes.CapacityProviderStrategyItem
	for _, it := range s.deployment.CapacityProviderStrategy {
		out = append(out, ecstypes.CapacityProviderStrategyItem{CapacityProvider: ptr(it.CapacityProvider), Base: int32(it.Base), Weight: int32(it.Weight)})
	}
	return out
}
