package sim

import (
	"fmt"
	"sort"
	"time"

	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// ecsService is Amazon ECS: clusters with their container instances, tasks, services and capacity providers
// (capacityprovider.go, ecsclusters.go, ecsdeployment.go, ecsrebalance.go).
type ecsService struct {
	*world

	clusters map[string]*cluster
}

// Container instance statuses and task statuses as ECS names them.
const (
	ciActive   = "ACTIVE"
	ciDraining = "DRAINING"
	ciInactive = "INACTIVE"

	taskPending        = "PENDING"
	taskRunning        = "RUNNING"
	taskDeactivating   = "DEACTIVATING"
	taskStopping       = "STOPPING"
	taskDeprovisioning = "DEPROVISIONING"
	taskStopped        = "STOPPED"
)

type cluster struct {
	name, arn string
	cis       []*containerInstance // registration order, deregistered (INACTIVE) ones included
	ciByARN   map[string]*containerInstance
	services  []*service
	tasks     []*task // creation order, STOPPED ones included
	taskByARN map[string]*task
}

type containerInstance struct {
	arn, id, ec2ID, az, imageID, instanceType string
	status                                    string
	agentConnected                            bool
	registeredAt                              time.Time
	version                                   int64
	seq                                       int
}

type service struct {
	name, arn, startedBy string
	desired              int
	daemon               bool
	createdAt            time.Time
	deployment           ServiceDeployment // ecsdeployment.go
	hostPort             int32             // the static host port of StaticHostPort (SetServiceDeployment); 0: none
}

type task struct {
	arn, id               string
	seq                   int
	ci                    *containerInstance
	service               *service
	lastStatus            string
	desiredStatus         string
	createdAt, startedAt  time.Time
	stoppingAt, stoppedAt time.Time
	stoppedReason         string
	version               int64
	replaces              *task  // the task on a DRAINING instance this one replaces
	rebalances            *task  // the task of a crowded zone this one moves (ecsrebalance.go)
	startedBy             string // a standalone task's startedBy (RunStandaloneTask)
}

func (t *task) live() bool     { return t.desiredStatus == taskRunning }
func (t *task) isDaemon() bool { return t.service != nil && t.service.daemon }

// CreateECSCluster creates an empty ECS cluster. Setup helper: not counted.
func (s *ecsService) CreateECSCluster(name string) {
	defer s.lock()()
	if s.clusters[name] == nil {
		s.createCluster(name)
	}
}

func (s *ecsService) createCluster(name string) *cluster {
	c := &cluster{
		name:      name,
		arn:       fmt.Sprintf("arn:aws:ecs:%s:%s:cluster/%s", s.opts.Region, s.opts.AccountID, name),
		ciByARN:   map[string]*containerInstance{},
		taskByARN: map[string]*task{},
	}
	s.clusters[name] = c
	return c
}

// CreateService creates a service in a cluster (created when missing). A replica service keeps desiredCount tasks
// spread over ACTIVE, agent-connected container instances; a daemon service keeps one task on each. Tasks placed
// at creation are RUNNING at once. Setup helper: not counted.
func (s *ecsService) CreateService(clusterName, name string, desiredCount int, daemon bool) {
	defer s.lock()()
	c := s.clusters[clusterName]
	if c == nil {
		c = s.createCluster(clusterName)
	}
	svc := &service{
		name:      name,
		arn:       fmt.Sprintf("arn:aws:ecs:%s:%s:service/%s/%s", s.opts.Region, s.opts.AccountID, c.name, name),
		startedBy: "ecs-svc/" + s.digits(19),
		desired:   desiredCount,
		daemon:    daemon,
		createdAt: s.now(),
	}
	if daemon {
		svc.desired = 0
	}
	c.services = append(c.services, svc)
	s.instant = true
	s.settle()
	s.instant = false
}

// ServiceTasks returns how many of the service's tasks are RUNNING.
func (s *ecsService) ServiceTasks(clusterName, serviceName string) (running int) {
	defer s.lock()()
	return s.serviceTasks(clusterName, serviceName)
}

func (s *ecsService) serviceTasks(clusterName, serviceName string) (running int) {
	c := s.clusters[clusterName]
	if c == nil {
		return 0
	}
	for _, t := range c.tasks {
		if t.service != nil && t.service.name == serviceName && t.lastStatus == taskRunning {
			running++
		}
	}
	return running
}

func (s *ecsService) digits(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + s.rng.IntN(10))
	}
	return string(b)
}

// The size of every non-daemon task of the simulation (task-level cpu in CPU units, memory in MiB), and of a
// container instance: MaxTasksPerInstance such tasks. Amazon ECS API Reference, "ContainerInstance":
// registeredResources and remainingResources hold the CPU (units) and MEMORY (MiB) registered and left after
// the tasks placed on the instance, whatever their lastStatus until STOPPED; "Task": cpu and memory are the
// task-level size. Daemon tasks are reported without a task-level size and take none of the instance's room
// (as MaxTasksPerInstance counts only non-daemon tasks).
const (
	TaskCPU    = 256
	TaskMemory = 512
)

// taskResources returns the CPU and MEMORY resources of n tasks of the simulation's size.
func taskResources(n int32) []ecstypes.Resource {
	return []ecstypes.Resource{
		{Name: ptr("CPU"), Type: ptr("INTEGER"), IntegerValue: n * TaskCPU},
		{Name: ptr("MEMORY"), Type: ptr("INTEGER"), IntegerValue: n * TaskMemory},
	}
}

// containerInstanceOf returns the instance's registered (not deregistered) container instance, or nil.
func (s *ecsService) containerInstanceOf(inst *instance) *containerInstance {
	if inst.ciARN == "" {
		return nil
	}
	c := s.clusters[inst.cluster]
	if c == nil {
		return nil
	}
	ci := c.ciByARN[inst.ciARN]
	if ci == nil || ci.status == ciInactive {
		return nil
	}
	return ci
}

// agentConnect registers the instance with its cluster once its ECS container agent has started.
// Amazon ECS Developer Guide, "Amazon ECS Linux container instance management" / "Amazon ECS container agent":
// the agent on an instance launched with the cluster's name registers it as a container instance, ACTIVE and
// connected. Instances launched from an image marked unhealthy never register (their agent never connects).
func (s *ecsService) agentConnect(inst *instance) {
	if inst.cluster == "" || inst.ciARN != "" || inst.ec2State != "running" || s.ec2.imageUnhealthy(inst.imageID) {
		return
	}
	c := s.clusters[inst.cluster]
	if c == nil {
		c = s.createCluster(inst.cluster)
	}
	id := s.hex(32)
	ci := &containerInstance{
		arn:            fmt.Sprintf("arn:aws:ecs:%s:%s:container-instance/%s/%s", s.opts.Region, s.opts.AccountID, c.name, id),
		id:             id,
		ec2ID:          inst.id,
		az:             inst.az,
		imageID:        inst.imageID,
		instanceType:   inst.instanceType,
		status:         ciActive,
		agentConnected: true,
		registeredAt:   s.now(),
		version:        1,
		seq:            len(c.cis) + 1,
	}
	c.cis = append(c.cis, ci)
	c.ciByARN[ci.arn] = ci
	inst.ciARN = ci.arn
}

// deregisterContainerInstance removes a terminated instance's container instance from its cluster: it is
// INACTIVE (no longer listed), and its tasks are STOPPED.
// Amazon ECS Developer Guide, "Deregister an Amazon ECS container instance": when a container instance is
// terminated it is deregistered; tasks on it stop and services start replacements on other instances.
func (s *ecsService) deregisterContainerInstance(inst *instance) {
	ci := s.containerInstanceOf(inst)
	if ci == nil {
		return
	}
	ci.status = ciInactive
	ci.agentConnected = false
	ci.version++
	c := s.clusters[inst.cluster]
	for _, t := range c.tasks {
		if t.ci == ci && t.lastStatus != taskStopped {
			if t.desiredStatus != taskStopped {
				t.desiredStatus = taskStopped
				t.stoppingAt = s.now()
				t.stoppedReason = fmt.Sprintf("Host EC2 (instance %s) terminated.", inst.id)
			}
			t.lastStatus = taskStopped
			t.stoppedAt = s.now()
			t.version++
		}
	}
}

func (s *ecsService) setContainerInstanceStatus(ci *containerInstance, status string) {
	if ci.status != status {
		ci.status = status
		ci.version++
	}
}

// nonStoppedTasks counts the tasks on a container instance whose lastStatus is not STOPPED, non-daemon and
// daemon-service tasks apart.
func (s *ecsService) nonStoppedTasks(ci *containerInstance) (nonDaemon, daemon int) {
	for _, c := range s.clusters {
		if c.ciByARN[ci.arn] != ci {
			continue
		}
		for _, t := range c.tasks {
			if t.ci != ci || t.lastStatus == taskStopped {
				continue
			}
			if t.isDaemon() {
				daemon++
			} else {
				nonDaemon++
			}
		}
	}
	return nonDaemon, daemon
}

// placeTask starts a service task on a container instance: PENDING, then RUNNING after TaskStartDelay.
// Amazon ECS Developer Guide, "Amazon ECS task lifecycle".
func (s *ecsService) placeTask(c *cluster, ci *containerInstance, svc *service) *task {
	id := s.hex(32)
	t := &task{
		arn:           fmt.Sprintf("arn:aws:ecs:%s:%s:task/%s/%s", s.opts.Region, s.opts.AccountID, c.name, id),
		id:            id,
		seq:           len(c.tasks) + 1,
		ci:            ci,
		service:       svc,
		lastStatus:    taskPending,
		desiredStatus: taskRunning,
		createdAt:     s.now(),
		version:       1,
	}
	c.tasks = append(c.tasks, t)
	c.taskByARN[t.arn] = t
	if s.instant {
		t.lastStatus = taskRunning
		t.startedAt = s.now()
		return t
	}
	s.after(s.opts.TaskStartDelay, func() {
		if t.lastStatus == taskPending && t.desiredStatus == taskRunning {
			t.lastStatus = taskRunning
			t.startedAt = s.now()
			t.version++
		}
	})
	return t
}

// stopTask sets a task's desired status to STOPPED. A PENDING task stops at once; a RUNNING one walks through
// DEACTIVATING, STOPPING and DEPROVISIONING to STOPPED, one stage per TaskStopStageDelay.
// Amazon ECS Developer Guide, "Amazon ECS task lifecycle": RUNNING -> DEACTIVATING -> STOPPING ->
// DEPROVISIONING -> STOPPED. While a task is in those stages it is neither RUNNING nor PENDING, so it counts in
// neither runningTasksCount nor pendingTasksCount of its container instance (field case C8).
func (s *ecsService) stopTask(t *task, reason string) {
	if t.desiredStatus == taskStopped {
		return
	}
	t.desiredStatus = taskStopped
	t.stoppingAt = s.now()
	t.stoppedReason = reason
	t.version++
	switch t.lastStatus {
	case taskPending:
		t.lastStatus = taskStopped
		t.stoppedAt = s.now()
	case taskRunning:
		t.lastStatus = taskDeactivating
		s.scheduleStopStage(t)
	}
}

func (s *ecsService) scheduleStopStage(t *task) {
	s.after(s.opts.TaskStopStageDelay, func() {
		next := map[string]string{taskDeactivating: taskStopping, taskStopping: taskDeprovisioning, taskDeprovisioning: taskStopped}[t.lastStatus]
		if next == "" {
			return // already STOPPED (its instance was deregistered)
		}
		t.lastStatus = next
		t.version++
		if next == taskStopped {
			t.stoppedAt = s.now()
			return
		}
		s.scheduleStopStage(t)
	})
}

// choosePlacement picks the container instance for a new task of svc, or nil when no instance can take it.
// Amazon ECS Developer Guide, "Amazon ECS task placement" / "Draining Amazon ECS container instances": tasks are
// placed only on ACTIVE instances with a connected agent, never on DRAINING ones; the service scheduler spreads a
// service's tasks across Availability Zones and instances. An instance holds at most MaxTasksPerInstance
// non-daemon tasks (tasks still stopping occupy their resources until STOPPED).
func (s *ecsService) choosePlacement(c *cluster, svc *service) *containerInstance {
	return s.choosePlacementIn(c, svc, "")
}

// choosePlacementIn is choosePlacement among the container instances of one Availability Zone ("": any).
func (s *ecsService) choosePlacementIn(c *cluster, svc *service, zone string) *containerInstance {
	perAZ := map[string]int{}
	perCI := map[*containerInstance]int{}
	load := map[*containerInstance]int{}
	held := map[*containerInstance]bool{} // distinctInstance / static host port: a task of svc not STOPPED there
	for _, t := range c.tasks {
		if t.service == svc && t.live() {
			perAZ[t.ci.az]++
			perCI[t.ci]++
		}
		if t.service == svc && t.lastStatus != taskStopped {
			held[t.ci] = true
		}
		if !t.isDaemon() && t.lastStatus != taskStopped {
			load[t.ci]++
		}
	}
	var best *containerInstance
	provider := s.serviceProviderFor(c, svc) // ecsdeployment.go: a service's own capacity provider strategy
	for _, ci := range c.cis {
		if ci.status != ciActive || !ci.agentConnected || load[ci] >= s.opts.MaxTasksPerInstance || svc.onePerInstance() && held[ci] ||
			zone != "" && ci.az != zone {
			continue
		}
		if provider != anyProvider && s.providerOf(ci) != provider {
			continue
		}
		if best == nil {
			best = ci
			continue
		}
		if svc.deployment.Binpack { // placementStrategy binpack (ecsdeployment.go): the least room left first
			if load[ci] > load[best] {
				best = ci
			}
			continue
		}
		switch {
		case perAZ[ci.az] != perAZ[best.az]:
			if perAZ[ci.az] < perAZ[best.az] {
				best = ci
			}
		case perCI[ci] != perCI[best]:
			if perCI[ci] < perCI[best] {
				best = ci
			}
		case load[ci] < load[best]:
			best = ci
		}
	}
	return best
}

const reasonDraining = "Service scheduler stopped the task: container instance is DRAINING"

// reconcileCluster runs the ECS service scheduler over one cluster. Callers hold the lock.
func (s *ecsService) reconcileCluster(c *cluster) bool {
	changed := false

	// Amazon ECS Developer Guide, "Draining Amazon ECS container instances": RUNNING service tasks on a DRAINING
	// instance are replaced per the service's deployment configuration (ecsdeployment.go): a task whose
	// replacement was started stops once that replacement is RUNNING.
	for _, t := range c.tasks {
		if t.replaces != nil && t.live() && t.lastStatus == taskRunning {
			o := t.replaces
			t.replaces = nil
			if o.live() && o.ci.status == ciDraining {
				s.stopTask(o, reasonDraining)
				changed = true
			}
		}
	}
	// ecsrebalance.go: a task that moves a crowded zone's task stops that task once it is RUNNING.
	for _, t := range c.tasks {
		if t.rebalances != nil && t.live() && t.lastStatus == taskRunning {
			o := t.rebalances
			t.rebalances = nil
			if o.live() {
				s.stopTask(o, reasonRebalance)
				changed = true
			}
		}
	}
	// Same page: PENDING service tasks on a DRAINING instance are stopped immediately.
	for _, t := range c.tasks {
		if t.service != nil && !t.isDaemon() && t.live() && t.lastStatus == taskPending && t.ci.status == ciDraining {
			s.stopTask(t, reasonDraining)
			changed = true
		}
	}
	covered := s.coveredTasks(c)
	// Same page: the service scheduler starts a replacement on another instance when capacity is available and
	// the service's maximumPercent allows one more task; otherwise, when minimumHealthyPercent allows one RUNNING
	// task less, it stops the old task first (ecsdeployment.go) and the replica loop below places its successor;
	// otherwise the old task keeps running until capacity appears.
	for _, t := range c.tasks {
		if t.service == nil || t.isDaemon() || !t.live() || t.lastStatus != taskRunning || t.ci.status != ciDraining || covered[t] {
			continue
		}
		live, running := serviceCounts(c, t.service)
		if live < t.service.maxLive() {
			if ci := s.choosePlacement(c, t.service); ci != nil {
				r := s.placeTask(c, ci, t.service)
				r.replaces = t
				covered[t] = true
				changed = true
				continue
			}
		}
		if running-1 >= t.service.minRunning() {
			s.stopTask(t, reasonDraining)
			changed = true
		}
	}

	for _, svc := range c.services {
		if svc.daemon {
			if s.reconcileDaemon(c, svc) {
				changed = true
			}
			continue
		}
		// Amazon ECS Developer Guide, "Amazon ECS service deployment controllers and strategies" (Replica
		// scheduling strategy): the scheduler places and maintains the desired number of tasks. It does not
		// move running tasks onto new instances.
		var effective []*task
		for _, t := range c.tasks {
			if t.service == svc && t.live() && !covered[t] {
				effective = append(effective, t)
			}
		}
		for len(effective) < svc.desired {
			ci := s.choosePlacement(c, svc)
			if ci == nil {
				break
			}
			effective = append(effective, s.placeTask(c, ci, svc))
			changed = true
		}
		if extra := len(effective) - svc.desired; extra > 0 {
			// A task started to replace one on a DRAINING instance is not extra: the instance's drain goes on and
			// stops the task it replaces once it runs (Developer Guide, "Draining Amazon ECS container
			// instances"). The extra tasks are those left over, for instance by an instance set back to ACTIVE
			// while replacements for its tasks were already starting.
			kept := effective[:0]
			for _, t := range effective {
				if t.replaces == nil || !covered[t.replaces] {
					kept = append(kept, t)
				}
			}
			effective = kept
			extra = min(extra, len(effective))
			sort.SliceStable(effective, func(i, j int) bool {
				pi, pj := effective[i].lastStatus == taskPending, effective[j].lastStatus == taskPending
				if pi != pj {
					return pi
				}
				return effective[i].seq > effective[j].seq
			})
			for _, t := range effective[:extra] {
				s.stopTask(t, "Service scheduler stopped the task: desired count reduced")
			}
			changed = changed || extra > 0
		}
		if s.rebalanceZones(c, svc) {
			changed = true
		}
	}
	return changed
}

// coveredTasks returns the live tasks on DRAINING instances that already have a live replacement, and the
// live tasks an Availability Zone rebalancing is moving.
func (s *ecsService) coveredTasks(c *cluster) map[*task]bool {
	covered := map[*task]bool{}
	for _, t := range c.tasks {
		if o := t.replaces; o != nil && t.live() && o.live() && o.ci.status == ciDraining {
			covered[o] = true
		}
		if o := t.rebalances; o != nil && t.live() && o.live() {
			covered[o] = true // its move is under way: not an extra task, not one to replace again
		}
	}
	return covered
}

// reconcileDaemon keeps one task of a daemon service on each ACTIVE container instance.
// Amazon ECS Developer Guide, "Amazon ECS service deployment controllers and strategies" (Daemon scheduling
// strategy): exactly one task on each active container instance, placed on new instances as they join. AWS
// Containers Blog, "Improving daemon services in Amazon ECS": on a draining instance daemon tasks are stopped
// last, after every other task has stopped.
func (s *ecsService) reconcileDaemon(c *cluster, svc *service) bool {
	changed := false
	liveOn := map[*containerInstance]*task{}
	for _, t := range c.tasks {
		if t.service == svc && t.live() {
			liveOn[t.ci] = t
		}
	}
	for _, ci := range c.cis {
		switch ci.status {
		case ciActive:
			if ci.agentConnected && liveOn[ci] == nil {
				s.placeTask(c, ci, svc)
				changed = true
			}
		case ciDraining:
			if t := liveOn[ci]; t != nil {
				if n, _ := s.nonStoppedTasks(ci); n == 0 {
					s.stopTask(t, reasonDraining)
					changed = true
				}
			}
		}
	}
	return changed
}

// clusterNames returns the names of every cluster, sorted.
func (s *ecsService) clusterNames() []string {
	names := make([]string, 0, len(s.clusters))
	for n := range s.clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// cluster returns the named cluster, or nil.
func (s *ecsService) cluster(name string) *cluster { return s.clusters[name] }

// reconcileClusters runs the ECS service scheduler over every cluster, in name order. It reports whether
// anything changed.
func (s *ecsService) reconcileClusters() bool {
	changed := false
	for _, name := range s.clusterNames() {
		if s.reconcileCluster(s.clusters[name]) {
			changed = true
		}
	}
	return changed
}

// reconcileManagedDraining completes ECS's own terminating hook once the instance is drained.
// Amazon ECS Developer Guide, "Safely stop Amazon ECS workloads running on EC2 instances": ECS completes the
// lifecycle action after the container instance has drained.
func (s *ecsService) reconcileManagedDraining() bool {
	changed := false
	for _, name := range s.autoScaling.groupNames() {
		g := s.autoScaling.group(name)
		if !g.managedDraining {
			continue
		}
		for _, id := range g.instances {
			inst := s.ec2.instance(id)
			for _, act := range inst.actions {
				if !act.active || act.hook != ECSManagedDrainingHookName {
					continue
				}
				ci := s.containerInstanceOf(inst)
				if ci != nil {
					if n, _ := s.nonStoppedTasks(ci); n > 0 {
						continue
					}
				}
				s.autoScaling.completeAction(act, inst, g, ResultContinue, CallerECS)
				changed = true
				break
			}
		}
	}
	return changed
}

// stopTasksOf stops every task still on a container instance whose host stopped.
func (s *ecsService) stopTasksOf(inst *instance, ci *containerInstance, reason string) {
	c := s.cluster(inst.cluster)
	if c == nil {
		return
	}
	for _, t := range c.tasks {
		if t.ci == ci && t.lastStatus != taskStopped {
			if t.desiredStatus != taskStopped {
				t.desiredStatus, t.stoppingAt, t.stoppedReason = taskStopped, s.now(), reason
			}
			t.lastStatus, t.stoppedAt = taskStopped, s.now()
			t.version++
		}
	}
}

// reconnect is the ECS container agent of a restarted pool instance connecting again (or registering, when the
// instance never had a container instance).
func (s *ecsService) reconnect(inst *instance) {
	if inst.ec2State != ec2types.InstanceStateNameRunning {
		return
	}
	if ci := s.containerInstanceOf(inst); ci != nil {
		if !ci.agentConnected {
			ci.agentConnected = true
			ci.version++
		}
		return
	}
	s.agentConnect(inst)
}
