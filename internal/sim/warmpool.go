package sim

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
)

// Warm pool states (Amazon EC2 Auto Scaling API Reference, "WarmPoolConfiguration" PoolState).
const (
	PoolStateStopped    = "Stopped"
	PoolStateRunning    = "Running"
	PoolStateHibernated = "Hibernated"
)

// Lifecycle notification Origin and Destination values (Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto
// Scaling event reference" and "Configure a notification target for lifecycle notifications").
const (
	placeEC2       = "EC2"
	placeGroup     = "AutoScalingGroup"
	placeWarmPool  = "WarmPool"
	warmPoolPrefix = "Warmed:"
)

// warmPoolStopDelay is how long an instance takes from Warmed:Pending:Proceed to its pool state (the EC2
// stop or hibernation). A simulation choice: AWS documents no figure.
const warmPoolStopDelay = 30 * time.Second

// WarmPoolSpec describes a group's warm pool, as PutWarmPool takes it.
// Amazon EC2 Auto Scaling API Reference, "PutWarmPool" and "WarmPoolConfiguration"; User Guide, "Decrease latency
// for applications with long boot times using warm pools" (core concepts: warm pool size, pool state, instance
// reuse policy).
type WarmPoolSpec struct {
	// MinSize is the fewest instances the pool keeps, whatever the group's desired capacity (default 0).
	MinSize int32
	// MaxGroupPreparedCapacity caps the instances of the group and its pool together (every state but
	// Terminated); nil means the group's max size (the default specification). The pool's size is this minus
	// the group's desired capacity, and at least MinSize.
	MaxGroupPreparedCapacity *int32
	// PoolState is what a warmed instance becomes once its lifecycle actions are complete: PoolStateStopped
	// (default), PoolStateRunning or PoolStateHibernated.
	PoolState string
	// ReuseOnScaleIn returns instances to the pool on scale in instead of terminating them (InstanceReusePolicy).
	ReuseOnScaleIn bool
}

// warmPool is a group's warm pool: its configuration and its instances (by id, in the order they entered).
type warmPool struct {
	spec      WarmPoolSpec
	instances []string
	// moves records, per instance, the move whose lifecycle actions it is about to wait on (waitRoute).
	moves map[string]poolMove
}

// poolMove is a move between the pool, the group and EC2 that lifecycle hooks see.
type poolMove int

const (
	moveNone     poolMove = iota
	moveIntoPool          // launched into the pool (Origin EC2, Destination WarmPool)
	moveToPool            // scale in back to the pool (Origin AutoScalingGroup, Destination WarmPool)
	moveFromPool          // out of the pool into the group (Origin WarmPool, Destination AutoScalingGroup)
	moveOutOfEC2          // terminated out of the pool (Origin WarmPool, Destination EC2)
)

// PutWarmPool creates or replaces a group's warm pool; Auto Scaling fills it at once (setup instances are
// warmed already, in their pool state). Setup helper: not counted.
// Amazon EC2 Auto Scaling API Reference, "PutWarmPool". Errors: ValidationError (unknown group, MinSize below 0,
// MaxGroupPreparedCapacity below MinSize, an unknown PoolState).
func (as *autoScalingService) PutWarmPool(groupName string, spec WarmPoolSpec) error {
	defer as.lock()()
	g := as.groups[groupName]
	if g == nil {
		return groupNotFound(groupName)
	}
	if spec.PoolState == "" {
		spec.PoolState = PoolStateStopped
	}
	switch spec.PoolState {
	case PoolStateStopped, PoolStateRunning, PoolStateHibernated:
	default:
		return apiError("ValidationError", "1 validation error detected: Value '%s' at 'poolState' failed to satisfy constraint: Member must satisfy enum value set: [Running, Stopped, Hibernated]", spec.PoolState)
	}
	if spec.MinSize < 0 {
		return apiError("ValidationError", "1 validation error detected: Value '%d' at 'minSize' failed to satisfy constraint: Member must have value greater than or equal to 0", spec.MinSize)
	}
	if m := spec.MaxGroupPreparedCapacity; m != nil && *m >= 0 && *m < spec.MinSize {
		return apiError("ValidationError", "MinSize (%d) must be less than or equal to MaxGroupPreparedCapacity (%d).", spec.MinSize, *m)
	}
	if g.warmPool == nil {
		g.warmPool = &warmPool{moves: map[string]poolMove{}}
	}
	g.warmPool.spec = spec
	as.instant = true
	as.settle()
	as.instant = false
	return nil
}

// WarmPool returns the instances in a group's warm pool (Terminated ones left out), in the order they entered
// it; nil when the group has no warm pool.
func (as *autoScalingService) WarmPool(groupName string) []InstanceView {
	defer as.lock()()
	g := as.groups[groupName]
	if g == nil || g.warmPool == nil {
		return nil
	}
	out := []InstanceView{}
	for _, id := range g.warmPool.instances {
		if inst := as.ec2.instance(id); inst.state != string(astypes.LifecycleStateWarmedTerminated) {
			out = append(out, as.instanceView(inst))
		}
	}
	return out
}

// inWarmPool reports whether the instance is in its group's warm pool. Callers hold the lock.
func (as *autoScalingService) inWarmPool(inst *instance) bool {
	g := as.groups[inst.group]
	return g != nil && g.warmPool != nil && slices.Contains(g.warmPool.instances, inst.id)
}

// warmed reports whether a pool instance has settled in its pool state and may be drawn into the group.
func warmed(state string) bool {
	switch astypes.LifecycleState(state) {
	case astypes.LifecycleStateWarmedStopped, astypes.LifecycleStateWarmedRunning, astypes.LifecycleStateWarmedHibernated:
		return true
	}
	return false
}

// leavingPool reports whether a pool instance is being terminated (or is).
func leavingPool(state string) bool {
	switch astypes.LifecycleState(state) {
	case astypes.LifecycleStateWarmedTerminating, astypes.LifecycleStateWarmedTerminatingWait,
		astypes.LifecycleStateWarmedTerminatingProceed, astypes.LifecycleStateWarmedTerminated:
		return true
	}
	return false
}

// poolTarget is the number of instances the pool should hold: MaxGroupPreparedCapacity (the group's max size
// when unset) minus the desired capacity, and at least MinSize (User Guide, warm pools, core concepts "Warm
// pool size").
func poolTarget(g *group) int {
	prepared := g.max
	if m := g.warmPool.spec.MaxGroupPreparedCapacity; m != nil && *m >= 0 {
		prepared = *m
	}
	return max(int(prepared-g.desired), int(g.warmPool.spec.MinSize), 0)
}

// reconcileWarmPools launches instances into every warm pool below its size. Callers hold the lock.
// User Guide, warm pools, core concepts: when the group scales out and the pool shrinks, Auto Scaling launches
// new instances into the pool to keep its size; they launch from the group's current launch template version.
// A pool above its size is left as it is (the documentation does not say which instance would go).
func (as *autoScalingService) reconcileWarmPools() bool {
	changed := false
	for _, name := range as.groupNames() {
		g := as.groups[name]
		if g.warmPool == nil {
			continue
		}
		live := 0
		for _, id := range g.warmPool.instances {
			if !leavingPool(as.ec2.instance(id).state) {
				live++
			}
		}
		for ; live < poolTarget(g); live++ {
			if as.launchIntoPool(g) == nil {
				break
			}
			changed = true
		}
	}
	return changed
}

// launchIntoPool launches one instance into the group's warm pool: Warmed:Pending until it runs, then
// Warmed:Pending:Wait on the group's launching hooks (Origin EC2, Destination WarmPool), then its pool state.
// The ECS container agent does not register while the instance warms (Amazon ECS Developer Guide, "Configuring
// pre-initialized instances for your Amazon ECS Auto Scaling group": ECS_WARM_POOLS_CHECK). Callers hold the lock.
func (as *autoScalingService) launchIntoPool(g *group) *instance {
	t, v := as.currentVersion(g)
	if v == nil {
		return nil
	}
	inst := as.newInstance(g, t, v, string(astypes.LifecycleStateWarmedPending))
	g.warmPool.instances = append(g.warmPool.instances, inst.id)
	if as.instant {
		as.settleInPool(inst, g)
		return inst
	}
	as.after(as.opts.BootDelay, func() {
		if inst.state != string(astypes.LifecycleStateWarmedPending) {
			return
		}
		inst.ec2State = ec2types.InstanceStateNameRunning
		as.waitOrSettleInPool(inst, g, moveIntoPool, TransitionLaunching)
	})
	return inst
}

// waitOrSettleInPool puts an instance entering the pool in Warmed:Pending:Wait on the hooks of transition, or
// straight into its pool state without hooks. User Guide, "Use lifecycle hooks with a warm pool": a launching
// hook pauses an instance launched into the pool in Warmed:Pending:Wait; with an instance reuse policy, a
// terminating hook pauses an instance returning to the pool in Warmed:Pending:Wait too.
func (as *autoScalingService) waitOrSettleInPool(inst *instance, g *group, move poolMove, transition string) {
	if hooks := g.hooksFor(transition); len(hooks) > 0 {
		g.warmPool.moves[inst.id] = move
		as.enterWait(inst, g, transition, hooks)
		return
	}
	as.settleInPool(inst, g)
}

// settleInPool moves an instance whose pool lifecycle actions are done through Warmed:Pending:Proceed to its
// pool state. A stopped or hibernated instance runs nothing: its ECS container agent disconnects and the tasks
// still on it stop (they stop with the host; the container instance stays registered, and the agent reconnects
// with it when the instance restarts).
func (as *autoScalingService) settleInPool(inst *instance, g *group) {
	final := string(astypes.LifecycleStateWarmedStopped)
	ec2State := ec2types.InstanceStateNameStopped
	switch g.warmPool.spec.PoolState {
	case PoolStateRunning:
		final, ec2State = string(astypes.LifecycleStateWarmedRunning), ec2types.InstanceStateNameRunning
	case PoolStateHibernated:
		final = string(astypes.LifecycleStateWarmedHibernated)
	}
	apply := func() {
		inst.state, inst.ec2State = final, ec2State
		if ci := as.ecs.containerInstanceOf(inst); ci != nil && ec2State == ec2types.InstanceStateNameStopped {
			ci.agentConnected = false
			ci.version++
			as.ecs.stopTasksOf(inst, ci, fmt.Sprintf("Host EC2 (instance %s) stopped in the warm pool.", inst.id))
		}
	}
	if as.instant {
		apply()
		return
	}
	inst.state = string(astypes.LifecycleStateWarmedPendingProceed)
	as.after(warmPoolStopDelay, func() {
		if inst.state == string(astypes.LifecycleStateWarmedPendingProceed) {
			apply()
		}
	})
}

// launchFromWarmPool draws the oldest warmed instance of the group's pool into the group for a scale out: it
// starts (Pending), waits in Pending:Wait on the launching hooks (Origin WarmPool, Destination
// AutoScalingGroup) and goes InService; its ECS container agent reconnects with the container instance it had,
// in the status it had (a DRAINING one stays DRAINING until someone sets it ACTIVE). Nil when the pool has no
// warmed instance: the group then launches a new instance directly. Callers hold the lock.
// User Guide, warm pools, core concepts and "Use lifecycle hooks with a warm pool"; Amazon ECS Developer Guide,
// "Configuring pre-initialized instances for your Amazon ECS Auto Scaling group".
func (as *autoScalingService) launchFromWarmPool(g *group) *instance {
	if g.warmPool == nil {
		return nil
	}
	var inst *instance
	for _, id := range g.warmPool.instances {
		if cand := as.ec2.instance(id); warmed(cand.state) && !as.refreshSkipsPoolInstance(g, cand) {
			inst = cand
			break
		}
	}
	if inst == nil {
		return nil
	}
	g.warmPool.instances = slices.DeleteFunc(g.warmPool.instances, func(id string) bool { return id == inst.id })
	g.instances = append(g.instances, inst.id)
	inst.state, inst.ec2State = string(astypes.LifecycleStatePending), ec2types.InstanceStateNamePending
	g.warmPool.moves[inst.id] = moveFromPool
	if as.instant {
		inst.state, inst.ec2State = string(astypes.LifecycleStateInService), ec2types.InstanceStateNameRunning
		as.ecs.reconnect(inst)
		return inst
	}
	as.after(as.opts.BootDelay, func() { as.boot(inst) })
	as.after(as.opts.BootDelay+as.opts.AgentConnectDelay, func() { as.ecs.reconnect(inst) })
	return inst
}

// waitRoute returns the wait state an instance enters on the lifecycle hooks of transition, and the Origin and
// Destination its notifications carry. Callers hold the lock.
// User Guide, "Use lifecycle hooks with a warm pool" and "Amazon EC2 Auto Scaling event reference".
func (as *autoScalingService) waitRoute(inst *instance, transition string) (state, origin, destination string) {
	move := moveNone
	if g := as.groups[inst.group]; g != nil && g.warmPool != nil {
		move = g.warmPool.moves[inst.id]
		delete(g.warmPool.moves, inst.id)
	}
	switch {
	case move == moveIntoPool:
		return string(astypes.LifecycleStateWarmedPendingWait), placeEC2, placeWarmPool
	case move == moveToPool:
		return string(astypes.LifecycleStateWarmedPendingWait), placeGroup, placeWarmPool
	case move == moveOutOfEC2:
		return string(astypes.LifecycleStateWarmedTerminatingWait), placeWarmPool, placeEC2
	case move == moveFromPool && transition == TransitionLaunching:
		return string(astypes.LifecycleStatePendingWait), placeWarmPool, placeGroup
	case transition == TransitionLaunching:
		return string(astypes.LifecycleStatePendingWait), placeEC2, placeGroup
	}
	return string(astypes.LifecycleStateTerminatingWait), placeGroup, placeEC2
}

// resolveWarmPoolAction moves on a pool instance whose lifecycle actions are all complete: from
// Warmed:Pending:Wait to its pool state (or, a launch abandoned, out of the pool to termination), and from
// Warmed:Terminating:Wait to termination. It reports whether the instance was a pool instance. Callers hold the lock.
// User Guide, "Complete a lifecycle action in an Auto Scaling group" and "Use lifecycle hooks with a warm pool".
func (as *autoScalingService) resolveWarmPoolAction(inst *instance, act *lifecycleAction, result string) bool {
	g := as.groups[inst.group]
	switch astypes.LifecycleState(inst.state) {
	case astypes.LifecycleStateWarmedPendingWait:
		if act.transition == TransitionLaunching && result == ResultAbandon {
			as.terminateFromPool(inst, g, CauseAbandon)
			return true
		}
		as.settleInPool(inst, g)
		return true
	case astypes.LifecycleStateWarmedTerminatingWait:
		as.proceedFromPool(inst, g)
		return true
	}
	return false
}

// warmPoolTerminate takes over beginTerminate for warm pool groups: a pool instance is terminated out of the
// pool, and with ReuseOnScaleIn an InService instance chosen for scale in goes back to the pool instead. It
// reports whether it did either. Callers hold the lock.
// User Guide, warm pools, core concepts ("Instance reuse policy"): by default a scale in terminates instances;
// with a reuse policy they return to the pool. An explicit termination (TerminateInstanceInAutoScalingGroup,
// health, an abandoned launch) terminates the instance.
func (as *autoScalingService) warmPoolTerminate(inst *instance, cause string) bool {
	g := as.groups[inst.group]
	if g == nil || g.warmPool == nil {
		return false
	}
	if as.inWarmPool(inst) {
		if !leavingPool(inst.state) {
			as.terminateFromPool(inst, g, cause)
		}
		return true
	}
	if cause != CauseScaleIn || !g.warmPool.spec.ReuseOnScaleIn || inst.state != string(astypes.LifecycleStateInService) {
		return false
	}
	for _, act := range inst.actions {
		act.active = false
	}
	inst.actions = nil
	g.instances = slices.DeleteFunc(g.instances, func(id string) bool { return id == inst.id })
	g.warmPool.instances = append(g.warmPool.instances, inst.id)
	inst.state = string(astypes.LifecycleStateWarmedPending)
	as.waitOrSettleInPool(inst, g, moveToPool, TransitionTerminating)
	return true
}

// terminateFromPool terminates a pool instance: Warmed:Terminating, Warmed:Terminating:Wait on the terminating
// hooks (Origin WarmPool, Destination EC2), Warmed:Terminating:Proceed, Warmed:Terminated. The termination is
// recorded like any other; a stopped instance with no task left has nothing to drain, so it counts as drained.
func (as *autoScalingService) terminateFromPool(inst *instance, g *group, cause string) {
	rec := as.terminationRecord(inst, cause)
	if inst.ec2State != ec2types.InstanceStateNameRunning && rec.NonStoppedTasks == 0 {
		rec.DrainedAtRequest = true
	}
	as.terminations = append(as.terminations, rec)
	for _, act := range inst.actions {
		act.active = false
	}
	inst.actions = nil
	inst.state = string(astypes.LifecycleStateWarmedTerminating)
	if hooks := g.hooksFor(TransitionTerminating); len(hooks) > 0 {
		g.warmPool.moves[inst.id] = moveOutOfEC2
		as.enterWait(inst, g, TransitionTerminating, hooks)
		return
	}
	as.proceedFromPool(inst, g)
}

// proceedFromPool ends a pool instance's termination: Warmed:Terminating:Proceed, then Warmed:Terminated
// TerminateDelay later, its container instance deregistered.
func (as *autoScalingService) proceedFromPool(inst *instance, g *group) {
	for i := len(as.terminations) - 1; i >= 0; i-- {
		if t := &as.terminations[i]; t.InstanceID == inst.id {
			t.Proceeded, t.DrainedAtProceed = true, t.DrainedAtRequest || as.terminationRecord(inst, t.Cause).DrainedAtRequest
			break
		}
	}
	inst.state = string(astypes.LifecycleStateWarmedTerminatingProceed)
	inst.ec2State = ec2types.InstanceStateNameShuttingDown
	as.after(as.opts.TerminateDelay, func() {
		inst.state = string(astypes.LifecycleStateWarmedTerminated)
		inst.ec2State = ec2types.InstanceStateNameTerminated
		inst.terminatedAt = as.now()
		as.ecs.deregisterContainerInstance(inst)
		g.warmPool.instances = slices.DeleteFunc(g.warmPool.instances, func(id string) bool { return id == inst.id })
	})
}

// describeWarmPoolOf adds the warm pool's configuration and size to a DescribeAutoScalingGroups answer; pool
// instances are not among the group's Instances (DescribeWarmPool lists them).
// Amazon EC2 Auto Scaling API Reference, "AutoScalingGroup" (WarmPoolConfiguration, WarmPoolSize).
func (as *autoScalingService) describeWarmPoolOf(g *group, out *astypes.AutoScalingGroup) {
	if g.warmPool == nil {
		return
	}
	out.WarmPoolConfiguration = as.warmPoolConfiguration(g)
	size := int32(0)
	for _, id := range g.warmPool.instances {
		if as.ec2.instance(id).state != string(astypes.LifecycleStateWarmedTerminated) {
			size++
		}
	}
	out.WarmPoolSize = ptr(size)
}

func (as *autoScalingService) warmPoolConfiguration(g *group) *astypes.WarmPoolConfiguration {
	s := g.warmPool.spec
	cfg := &astypes.WarmPoolConfiguration{MinSize: ptr(s.MinSize), PoolState: astypes.WarmPoolState(s.PoolState),
		InstanceReusePolicy: &astypes.InstanceReusePolicy{ReuseOnScaleIn: ptr(s.ReuseOnScaleIn)}}
	if s.MaxGroupPreparedCapacity != nil {
		cfg.MaxGroupPreparedCapacity = ptr(*s.MaxGroupPreparedCapacity)
	}
	return cfg
}

// maxWarmPoolRecords is the most instances one DescribeWarmPool answer holds (API Reference, "DescribeWarmPool":
// MaxRecords, "The maximum value is 50", default 50).
const maxWarmPoolRecords = 50

// DescribeWarmPool describes a group's warm pool: its configuration and its instances (every state but
// Warmed:Terminated: Warmed:Pending ... Warmed:Stopped, Warmed:Running, Warmed:Hibernated, Warmed:Terminating
// ...), in the order they entered the pool, paged by MaxRecords (1-50, default 50) and NextToken. A group without
// a warm pool answers no configuration and no instances.
// Amazon EC2 Auto Scaling API Reference, "DescribeWarmPool". Errors: ValidationError (unknown group, MaxRecords
// outside 1..50, a malformed NextToken).
func (c *AutoScalingClient) DescribeWarmPool(ctx context.Context, in *autoscaling.DescribeWarmPoolInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeWarmPoolOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeWarmPool")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	limit := maxWarmPoolRecords
	if in.MaxRecords != nil {
		if *in.MaxRecords < 1 || *in.MaxRecords > maxWarmPoolRecords {
			return nil, apiError("ValidationError", "1 validation error detected: Value '%d' at 'maxRecords' failed to satisfy constraint: Member must have value between 1 and %d", *in.MaxRecords, maxWarmPoolRecords)
		}
		limit = int(*in.MaxRecords)
	}
	out := &autoscaling.DescribeWarmPoolOutput{Instances: []astypes.Instance{}}
	if g.warmPool == nil {
		return out, nil
	}
	out.WarmPoolConfiguration = as.warmPoolConfiguration(g)
	ids := g.warmPool.instances
	from := 0
	if in.NextToken != nil {
		s, ok := cutPrefix(*in.NextToken, "wp-")
		n, err := strconv.Atoi(s)
		if !ok || err != nil || n < 0 || n > len(ids) {
			return nil, apiError("ValidationError", "The token '%s' is invalid.", *in.NextToken)
		}
		from = n
	}
	for i := from; i < len(ids); i++ {
		inst := as.ec2.instance(ids[i])
		if inst.state == string(astypes.LifecycleStateWarmedTerminated) {
			continue
		}
		if len(out.Instances) == limit {
			out.NextToken = ptr(fmt.Sprintf("wp-%d", i))
			break
		}
		out.Instances = append(out.Instances, inst.groupMember())
	}
	return out, nil
}
