package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// Other writers of desired capacity. Auto Scaling's desired capacity is one absolute number with no
// compare-and-set, and the agent is never its only writer: cluster autoscalers and ECS managed scaling set it,
// scheduled actions and people set it, and people terminate instances with or without decrementing it. The
// writers here play those actors on the account's own clock, so that a test can run the agent beside them and
// the invariant checker can tell the desired capacity others set from the agent's (every write is in
// Account.CapacityWrites with who made it).

// Callers and causes of the other writers, recorded in DesiredChange.By, CapacityWrite.By and Termination.Cause.
const (
	// CallerAutoscaler marks the desired capacity changes of a RandomWriter (a cluster autoscaler, ECS managed
	// scaling).
	CallerAutoscaler = "autoscaler"
	// CallerOperator marks an Operator's calls.
	CallerOperator = "operator"
	// CauseOperator is the termination cause of an Operator's TerminateInstanceInAutoScalingGroup: a person's
	// call, not the agent's (CauseAPI).
	CauseOperator = "operator"
)

// Operations recorded in CapacityWrite.Op.
const (
	OpSetDesiredCapacity     = "SetDesiredCapacity"
	OpTerminateInstance      = "TerminateInstanceInAutoScalingGroup"
	OpUpdateAutoScalingGroup = "UpdateAutoScalingGroup"
)

// CapacityWrite is one call that could change a group's desired capacity: SetDesiredCapacity,
// TerminateInstanceInAutoScalingGroup (with or without ShouldDecrementDesiredCapacity) and
// UpdateAutoScalingGroup, by the agent (CallerAPI, through the AutoScaling client), a RandomWriter
// (CallerAutoscaler) or an Operator (CallerOperator). Calls the account refused are recorded too (Accepted
// false): the call was made.
type CapacityWrite struct {
	At    time.Time
	Group string
	// By is CallerAPI, CallerAutoscaler or CallerOperator.
	By string
	// Op is OpSetDesiredCapacity, OpTerminateInstance or OpUpdateAutoScalingGroup.
	Op string
	// From and To are the group's desired capacity before and after the call (equal when it left it alone);
	// MaxFrom and MaxTo its maximum size.
	From, To       int32
	MaxFrom, MaxTo int32
	// InstanceID is the instance a termination named.
	InstanceID string
	// Decrement is ShouldDecrementDesiredCapacity of a termination.
	Decrement bool
	// ScaledIn are the instances Auto Scaling chose to terminate because this write lowered desired capacity
	// (its termination policy, chooseScaleIn).
	ScaledIn []string
	Accepted bool
}

func (w CapacityWrite) String() string {
	s := fmt.Sprintf("%s %s by %s: desired %d -> %d", w.At.Format(time.TimeOnly), w.Op, w.By, w.From, w.To)
	if w.InstanceID != "" {
		s += fmt.Sprintf(", instance %s (decrement %v)", w.InstanceID, w.Decrement)
	}
	if len(w.ScaledIn) > 0 {
		s += fmt.Sprintf(", scaled in %v", w.ScaledIn)
	}
	if !w.Accepted {
		s += " (refused)"
	}
	return s
}

// recordWrite appends a capacity write, filling in the instances that the write's scale-in took: the
// terminations with cause scale-in of the group recorded since index since. Callers hold the lock.
func (as *autoScalingService) recordWrite(w CapacityWrite, since int) {
	for _, t := range as.terminations[min(since, len(as.terminations)):] {
		if t.Group == w.Group && t.Cause == CauseScaleIn {
			w.ScaledIn = append(w.ScaledIn, t.InstanceID)
		}
	}
	w.At = as.now()
	as.capacityWrites = append(as.capacityWrites, w)
}

// CapacityWrites returns every call that could change a group's desired capacity so far, in order, whoever
// made it. Observation helper: not counted.
func (as *autoScalingService) CapacityWrites() []CapacityWrite {
	defer as.lock()()
	return append([]CapacityWrite(nil), as.capacityWrites...)
}

// DesiredChange records one change of a group's desired capacity.
type DesiredChange struct {
	At       time.Time
	From, To int32
	// By is CallerECS (ECS managed scaling), CallerAPI (SetDesiredCapacity, UpdateAutoScalingGroup or
	// TerminateInstanceInAutoScalingGroup with ShouldDecrementDesiredCapacity, through the AutoScaling client) or
	// CallerTest (the SetDesiredCapacity setup helper).
	By string
}

// changeDesired sets a group's desired capacity and records the change. Callers hold the lock and settle afterwards.
func (as *autoScalingService) changeDesired(g *group, to int32, by string) {
	from := g.desired
	g.desired = to
	as.recordDesired(g, from, by)
}

// recordDesired records a change of the group's desired capacity from from to its current value, if any.
func (as *autoScalingService) recordDesired(g *group, from int32, by string) {
	if g.desired == from {
		return
	}
	g.desiredChanges = append(g.desiredChanges, DesiredChange{At: as.now(), From: from, To: g.desired, By: by})
}

// DesiredChanges returns every change of the group's desired capacity since it was created, in order, with who
// made it. Observation helper: not counted.
func (as *autoScalingService) DesiredChanges(group string) []DesiredChange {
	defer as.lock()()
	g := as.groups[group]
	if g == nil {
		return nil
	}
	return append([]DesiredChange(nil), g.desiredChanges...)
}

// RandomWriterSpec describes a RandomWriter.
type RandomWriterSpec struct {
	Group string
	// Seed makes one writer's moments and steps differ from another's; the same seed replays the same
	// choices on the same world. Default 1.
	Seed uint64
	// MinWait and MaxWait bound the time between two writes, drawn uniformly. Defaults 2 and 10 minutes.
	MinWait, MaxWait time.Duration
	// MaxStep is the largest change of one write: each moves desired capacity by 1..MaxStep. Default 2.
	MaxStep int32
}

// RandomWriter is another writer of a group's desired capacity, as a cluster autoscaler or ECS managed scaling
// is: at random moments on the account's clock it sets desired capacity up or down by 1 to MaxStep, staying
// within the group's minimum and maximum size (Amazon EC2 Auto Scaling User Guide, "Set capacity limits on
// your Auto Scaling group"). A lower desired capacity makes Auto Scaling scale in, choosing the instances by
// the group's default termination policy (Amazon EC2 Auto Scaling User Guide, "Configure termination policies
// for Amazon EC2 Auto Scaling", "Default termination policy": chooseScaleIn); a higher one makes it launch.
// Its writes are recorded in Account.CapacityWrites and Account.DesiredChanges as CallerAutoscaler.
type RandomWriter struct {
	as      *autoScalingService
	spec    RandomWriterSpec
	rng     *rand.Rand
	stopped bool
}

// StartRandomWriter starts a random writer of the spec's group: its first write comes after a random wait. It
// writes until Stop.
func (as *autoScalingService) StartRandomWriter(spec RandomWriterSpec) *RandomWriter {
	if spec.Seed == 0 {
		spec.Seed = 1
	}
	if spec.MinWait <= 0 {
		spec.MinWait = 2 * time.Minute
	}
	if spec.MaxWait < spec.MinWait {
		spec.MaxWait = max(spec.MinWait, 10*time.Minute)
	}
	if spec.MaxStep <= 0 {
		spec.MaxStep = 2
	}
	w := &RandomWriter{as: as, spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, 0x5eed_a07a5ca1e))}
	defer as.lock()()
	w.schedule()
	return w
}

// Stop ends the writer: no write after it.
func (w *RandomWriter) Stop() {
	defer w.as.lock()()
	w.stopped = true
}

// Writes returns the writer's writes so far, in order.
func (w *RandomWriter) Writes() []CapacityWrite {
	var out []CapacityWrite
	for _, cw := range w.as.CapacityWrites() {
		if cw.By == CallerAutoscaler && cw.Group == w.spec.Group {
			out = append(out, cw)
		}
	}
	return out
}

// schedule arms the next write. Callers hold the lock.
func (w *RandomWriter) schedule() {
	wait := w.spec.MinWait
	if span := w.spec.MaxWait - w.spec.MinWait; span > 0 {
		wait += time.Duration(w.rng.Int64N(int64(span) + 1))
	}
	w.as.after(wait, func() {
		if w.stopped {
			return
		}
		w.write()
		w.schedule()
	})
}

// write moves the group's desired capacity by a random step in a random direction, the other direction when
// the limits leave no room. Callers hold the lock; the account settles after the event.
func (w *RandomWriter) write() {
	g := w.as.group(w.spec.Group)
	if g == nil {
		return
	}
	step := 1 + w.rng.Int32N(w.spec.MaxStep)
	up := w.rng.IntN(2) == 0
	to := g.desired
	for _, dir := range []bool{up, !up} {
		if dir {
			to = min(g.desired+step, g.max)
		} else {
			to = max(g.desired-step, g.min)
		}
		if to != g.desired {
			break
		}
	}
	if to == g.desired {
		return // min == max: nothing to write
	}
	since, from := len(w.as.terminations), g.desired
	_ = w.as.setDesiredBy(g.name, to, CallerAutoscaler) // within [min, max] by construction
	w.as.recordWrite(CapacityWrite{Group: g.name, By: CallerAutoscaler, Op: OpSetDesiredCapacity, From: from, To: to,
		MaxFrom: g.max, MaxTo: g.max, Accepted: true}, since)
}

// OperatorSpec describes an Operator's one termination.
type OperatorSpec struct {
	Group string
	// InstanceID is the instance to terminate; "" picks one of the group's InService instances at random
	// (by Seed) at the moment.
	InstanceID string
	// At is the moment; zero: a random moment in [From, To] (drawn by Seed) on the account's clock.
	At       time.Time
	From, To time.Time
	// Seed makes the random choices (default 1).
	Seed uint64
}

// Operator is a person who terminates one instance of a group with TerminateInstanceInAutoScalingGroup and
// ShouldDecrementDesiredCapacity false (Amazon EC2 Auto Scaling API Reference,
// "TerminateInstanceInAutoScalingGroup"): desired capacity stays, so Auto Scaling launches a replacement. The
// termination's cause is CauseOperator, and the call is recorded in Account.CapacityWrites as CallerOperator.
type Operator struct {
	as   *autoScalingService
	spec OperatorSpec
	rng  *rand.Rand
	done bool
}

// ScheduleOperator arms the operator's termination at the spec's moment (now at the latest).
func (as *autoScalingService) ScheduleOperator(spec OperatorSpec) *Operator {
	if spec.Seed == 0 {
		spec.Seed = 1
	}
	o := &Operator{as: as, spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, 0x0be7a70e))}
	defer as.lock()()
	at := spec.At
	if at.IsZero() {
		at = spec.From
		if span := spec.To.Sub(spec.From); span > 0 {
			at = at.Add(time.Duration(o.rng.Int64N(int64(span) + 1)))
		}
	}
	if at.Before(as.now()) {
		at = as.now()
	}
	as.sched.add(at, o.terminate)
	return o
}

// TerminateWithoutDecrement has an operator terminate the instance now, without decrement. It reports false
// when the instance is not in a group or already leaving.
func (as *autoScalingService) TerminateWithoutDecrement(instanceID string) bool {
	defer as.lock()()
	inst := as.ec2.instance(instanceID)
	if inst == nil {
		return false
	}
	o := &Operator{as: as, spec: OperatorSpec{Group: inst.group, InstanceID: instanceID}}
	o.terminate()
	as.settle()
	return o.done
}

// Done reports whether the operator's termination happened.
func (o *Operator) Done() bool {
	defer o.as.lock()()
	return o.done
}

// terminate picks the instance and terminates it without decrement. Callers hold the lock.
func (o *Operator) terminate() {
	as := o.as
	g := as.group(o.spec.Group)
	if g == nil {
		return
	}
	inst := as.ec2.instance(o.spec.InstanceID)
	if o.spec.InstanceID == "" {
		var inService []*instance
		for _, i := range as.running(g) {
			if i.state == string(astypes.LifecycleStateInService) {
				inService = append(inService, i)
			}
		}
		if len(inService) == 0 {
			return
		}
		inst = inService[o.rng.IntN(len(inService))]
	}
	if inst == nil || inst.group != g.name || isTerminating(inst.state) || inst.state == string(astypes.LifecycleStateTerminated) {
		return
	}
	since := len(as.terminations)
	as.beginTerminate(inst, CauseOperator)
	as.recordWrite(CapacityWrite{Group: g.name, By: CallerOperator, Op: OpTerminateInstance, From: g.desired, To: g.desired,
		MaxFrom: g.max, MaxTo: g.max, InstanceID: inst.id, Accepted: true}, since)
	o.done = true
}
