package sim

import (
	"slices"
	"strconv"

	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// Services' deployment configuration and placement constraints, as far as they decide what happens to the tasks
// of a DRAINING container instance (issue #18).
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
}

// SetServiceDeployment sets a replica service's deployment configuration and placement rules. Setup helper: not
// counted. It does nothing when the cluster or service does not exist.
func (a *Account) SetServiceDeployment(cluster, service string, d ServiceDeployment) {
	defer a.lock()()
	c := a.clusters[cluster]
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
func (a *Account) portResources(c *cluster, ci *containerInstance) (registered, remaining ecstypes.Resource) {
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
	c := v.a.clusters[cluster]
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
func (a *Account) RunStandaloneTask(ec2InstanceID, startedBy string) bool {
	defer a.lock()()
	inst := a.instances[ec2InstanceID]
	if inst == nil {
		return false
	}
	ci := a.containerInstanceOf(inst)
	if ci == nil {
		return false
	}
	c := a.clusters[inst.cluster]
	a.instant = true
	t := a.placeTask(c, ci, nil)
	a.instant = false
	t.startedBy = startedBy
	a.settle()
	return true
}

// SetServiceDesiredCount sets a replica service's desiredCount (as UpdateService does; Amazon ECS API Reference,
// "UpdateService"): the scheduler places or stops tasks towards it on the next settle. Setup helper: not
// counted. It does nothing when the cluster or service does not exist, or the service is a daemon service.
func (a *Account) SetServiceDesiredCount(cluster, service string, n int) {
	defer a.lock()()
	c := a.clusters[cluster]
	if c == nil {
		return
	}
	if svc := c.findService(service); svc != nil && !svc.daemon {
		svc.desired = n
		a.settle()
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
