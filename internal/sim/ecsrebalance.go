package sim

import ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"

// Amazon ECS Availability Zone rebalancing (Amazon ECS Developer Guide, "Balancing an Amazon ECS service
// across Availability Zones"): once a service reaches its steady state, ECS watches how many of its tasks run
// in each Availability Zone; when the zones are uneven it starts tasks in the zones with the fewest running
// tasks and stops tasks in the zones with the most, within the service's deployment configuration. The
// simulation moves one task at a time: it starts the new task in the zone with the fewest tasks that has a
// container instance able to take it, and stops the crowded zone's task once the new one is RUNNING; where
// maximumPercent leaves no room for one more task it stops first, when minimumHealthyPercent allows, and the
// service's AZ spread places the successor. Zones count as uneven when they differ by more than one task (the
// guide's own example of a balanced service of 6 tasks is 2, 2 and 2; one task more in a zone is the spread's
// best with a task count that does not divide by the zones). Binpack services are not compatible with the
// feature (CreateService leaves it DISABLED for them), nor are daemon services.

const reasonRebalance = "Service scheduler stopped the task: Availability Zone rebalancing"

// rebalanceZones moves one task of svc from its most crowded Availability Zone towards its emptiest one when
// the service has AvailabilityZoneRebalancing and is steady: its desired count of tasks RUNNING, none PENDING,
// none on a DRAINING instance, no move under way. It reports whether it started or stopped a task. Callers
// hold the lock.
func (s *ecsService) rebalanceZones(c *cluster, svc *service) bool {
	if !svc.deployment.AvailabilityZoneRebalancing || svc.deployment.Binpack || svc.daemon {
		return false
	}
	perZone := map[string][]*task{}
	live := 0
	for _, t := range c.tasks {
		if t.service != svc || !t.live() {
			continue
		}
		if t.lastStatus != taskRunning || t.ci.status != ciActive || t.rebalances != nil {
			return false
		}
		live++
		perZone[t.ci.az] = append(perZone[t.ci.az], t)
	}
	if live != svc.desired || live == 0 {
		return false
	}
	crowded := ""
	for zone, ts := range perZone {
		if crowded == "" || len(ts) > len(perZone[crowded]) || len(ts) == len(perZone[crowded]) && zone < crowded {
			crowded = zone
		}
	}
	sparse, seen := "", map[string]bool{}
	for _, ci := range c.cis {
		zone := ci.az
		if seen[zone] {
			continue
		}
		seen[zone] = true
		if s.choosePlacementIn(c, svc, zone) == nil {
			continue
		}
		if sparse == "" || len(perZone[zone]) < len(perZone[sparse]) || len(perZone[zone]) == len(perZone[sparse]) && zone < sparse {
			sparse = zone
		}
	}
	if sparse == "" || len(perZone[crowded])-len(perZone[sparse]) <= 1 {
		return false
	}
	moved := perZone[crowded][len(perZone[crowded])-1] // the zone's newest task
	if live < svc.maxLive() {
		t := s.placeTask(c, s.choosePlacementIn(c, svc, sparse), svc)
		t.rebalances = moved
		return true
	}
	if live-1 >= svc.minRunning() {
		s.stopTask(moved, reasonRebalance)
		return true
	}
	return false
}

// azRebalancing is the service's availabilityZoneRebalancing as DescribeServices reports it.
func (s *service) azRebalancing() ecstypes.AvailabilityZoneRebalancing {
	if s.deployment.AvailabilityZoneRebalancing && !s.deployment.Binpack && !s.daemon {
		return ecstypes.AvailabilityZoneRebalancingEnabled
	}
	return ecstypes.AvailabilityZoneRebalancingDisabled
}
