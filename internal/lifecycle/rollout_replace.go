package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// replace runs the replacement of outdated instances, one at a time: Surge -> ReplacementHealthy -> Draining
// -> Terminating.
func (o *Orchestrator) replace(ctx context.Context, t Target, platform Platform, v GroupView, r state.Rollout) (state.Rollout, error) {
	if r.Current == nil {
		// Refused before the next surge, not after it (standalone.go).
		if reason, err := standaloneRefusal(ctx, t, platform, outdatedIDs(v, r)); err != nil || reason != "" {
			return o.haltOr(ctx, r, reason, err)
		}
		return o.pickNext(ctx, t, v, r)
	}
	cur := r.Current
	switch {
	case len(r.Batch) > 0 && cur.Step == state.StepReplacementHealthy:
		return o.awaitBatch(ctx, t, v, r) // rollout_batch.go
	case len(r.Batch) > 0 && cur.Step != state.StepSurge:
		return o.replaceBatch(ctx, t, platform, v, r)
	}
	switch cur.Step {
	case state.StepSurge:
		if cur.SurgeTo == 0 || v.Desired < cur.SurgeTo {
			// The surge draws on the warm pool (field case C18): an instance sent back to it since the pick (a
			// scale in under an instance reuse policy, while the surge was held) would come back on the old AMI
			// and be taken for a replacement that did not take the new launch template version. Recycled first,
			// as before the pick.
			if err := o.recycleWarmPool(ctx, t, v, &r); err != nil {
				return r, err
			}
		}
		if err := o.guardIfPaused(&r, "surge for "+cur.OldInstanceID); err != nil {
			return r, err
		}
		return o.surge(ctx, v, r)
	case state.StepReplacementHealthy:
		return o.awaitReplacement(ctx, t, v, r)
	case state.StepDraining:
		return o.drainOld(ctx, t, platform, v, r)
	case state.StepTerminating:
		return o.terminateOld(ctx, t, v, r)
	}
	return r, fmt.Errorf("unknown replacement step %q", cur.Step)
}

// awaitReplacement is the ReplacementHealthy step: it waits for an instance launched since the pick
// (not in InstancesBefore) to serve on the target AMI (-> Draining). A replacement on another AMI halts with
// rollback; none serving within Policy.HealthTimeout halts with rollback too (field case C15).
func (o *Orchestrator) awaitReplacement(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	now := o.Clock.Now()
	var newest *InstanceView
	for _, i := range v.Instances {
		if slices.Contains(cur.InstancesBefore, i.ID) {
			continue
		}
		if i.ImageID != "" && i.ImageID != r.TargetImageID {
			return o.halt(ctx, r, fmt.Sprintf("replacement %s launched AMI %s, not the target %s: the group's launch template change did not take effect",
				i.ID, i.ImageID, r.TargetImageID), true)
		}
		if i.Serving() {
			cur.NewInstanceID, cur.Step, cur.StepStartedAt = i.ID, state.StepDraining, now
			if r.Strategy == StrategyCapacityProvider { // capacity-provider strategy: the old instance of the replacement's zone
				capacityProviderChooseOld(v, &r, i)
			}
			return o.save(ctx, r, "replacement healthy")
		}
		newest = &i
	}
	if next, ok, err := o.capacityProviderResurge(ctx, v, r); ok { // capacity-provider strategy: replacement scaled in by ECS
		return next, err
	}
	if now.Sub(cur.StepStartedAt) > o.healthWindow(cur) {
		what := "no replacement instance launched"
		if newest == nil {
			// EC2 out of capacity is not a bad AMI (capacity.go): retried, never a halt or a rollback.
			if next, short, err := o.retryIfShortOfCapacity(ctx, t, v, r); short || err != nil {
				return next, err
			}
		}
		if newest != nil {
			what = fmt.Sprintf("replacement %s not healthy", newest.ID)
			cur.NewInstanceID = newest.ID
		}
		return o.halt(ctx, r, fmt.Sprintf("%s after %s", what, o.healthWindow(cur)), true)
	}
	return r, errWait
}

// drainOld is the Draining step: it checks that the replacement still serves and that the instances that stay
// serve desired capacity without the surge, writes the drain's start, sets the old instance DRAINING (ECS) or
// cordons and evicts it (EKS), and waits for it to be drained (-> Terminating). Past Policy.DrainTimeout the
// instance is put back in service and the rollout halts; an old instance that left goes through retireLeft.
func (o *Orchestrator) drainOld(ctx context.Context, t Target, platform Platform, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	now := o.Clock.Now()
	old, ok := v.Instance(cur.OldInstanceID)
	if !ok {
		return o.retireLeft(ctx, v, r, "old instance left the group before its drain finished")
	}
	if old.Node.Draining && cur.DrainStartedAt.IsZero() {
		// Someone else (an operator, a lifecycle hook) started this drain: the deadline runs from now.
		cur.DrainStartedAt = now
		return o.save(ctx, r, "drain already under way")
	}
	if !old.Node.Draining && cur.NewInstanceID != "" && len(r.Batch) == 0 {
		// A gate or a crash may have held the drain for hours: the replacement must still be serving
		// before the old instance stops (invariant 1). A batch member relies on the count below: the
		// instances that stay, its batch's replacements among them, must serve desired capacity.
		if nw, ok := v.Instance(cur.NewInstanceID); !ok || !nw.Serving() {
			// The drain is not under way (the instance is not DRAINING): one begun again later gets a deadline,
			// a write-ahead and a confirmed slot of its own. The slot held now is stale from this write on.
			cur.Step, cur.StepStartedAt, cur.NewInstanceID, cur.DrainStartedAt = state.StepReplacementHealthy, now, "", time.Time{}
			return o.save(ctx, r, "replacement no longer serving: waiting for a healthy one again")
		}
	}
	if r.ECSManagedDraining {
		// The termination is where ECS's drain begins: the gates that hold a drain hold it (and the claim of
		// its slot) too.
		if reason := o.runGate(ctx, t); reason != "" {
			r.Reason = reason + "; next step: terminate " + old.ID + " (ECS managed draining drains it)"
			return r, errWait
		}
		return o.managedDrainNext(ctx, t, r, old)
	}
	started := false // set DRAINING by this call, after the view was taken
	if old.Node.Registered && !old.Node.Draining {
		// A recorded start (a crash or a failed drain call after the write-ahead) that a pause or a gate holds
		// is not under way: its slot goes back, so a held group does not hold up the cluster's other drains,
		// and the drain claims it again, with a deadline from then, once nothing holds it. Also when no start
		// is recorded: a slot left listed by a drain that went back to wait for a replacement (its start
		// cleared) would otherwise count as live while the record is at Draining (notStartedGivesSlotBack).
		starting := cur.DrainStartedAt.IsZero()
		if err := o.guardIfPaused(&r, "drain "+old.ID); err != nil {
			return o.notStartedGivesSlotBack(ctx, t, r, old, err)
		}
		if r.Strategy != StrategyDrainFirst {
			// Invariant 1 before the drain, not only after it: the instances that stay must already serve
			// the desired capacity without the surge (a health replacement or a carried surge may still be
			// booting).
			serving := 0
			for _, i := range v.Instances {
				if i.ID != old.ID && i.Serving() {
					serving++
				}
			}
			if serving < int(cur.DesiredBefore) {
				r.Reason = fmt.Sprintf("waiting for %d serving instance(s) besides %s before draining it (%d now)", cur.DesiredBefore, old.ID, serving)
				return o.notStartedGivesSlotBack(ctx, t, r, old, errWait)
			}
		}
		if reason := o.runGate(ctx, t); reason != "" {
			r.Reason = reason + "; next step: drain " + old.ID
			return o.notStartedGivesSlotBack(ctx, t, r, old, errWait)
		}
		if reason, late, err := o.capacityProviderDrainGate(ctx, t, platform, r, old); err != nil || reason != "" { // capacity-provider strategy
			if late {
				// The AMI is not at fault: halt for an operator (more room, another instance type), no rollback.
				return o.halt(ctx, r, reason+fmt.Sprintf(" (waited more than %s)", o.Policy.DrainTimeout), false)
			}
			r.Reason = reason
			return o.notStartedGivesSlotBack(ctx, t, r, old, errOr(err, errWait))
		}
		if reason, err := standaloneRefusal(ctx, t, platform, []string{old.ID}); err != nil || reason != "" { // one started since the pick
			return o.haltOr(ctx, r, reason, err)
		}
		// The drain deadline runs from here, not from the step's start: a gate may have held the drain for
		// hours. Written before the drain starts, so a crash cannot restart the clock. The drain's slot of the
		// cluster budget rides on the same guarded write: both are durable or neither is, so a pause or a lost
		// race leaves no slot held for a drain that did not start. A drain whose start is recorded but whose
		// slot is not held (its slot given back while a pause or a gate held it, or recorded by an agent before
		// this write carried the slot) claims it with a guarded write of its own, which starts its deadline
		// again: the instance is not DRAINING, so no drain has been under way. A write-ahead whose slot is held already carries it all the same: the
		// write confirms the slot (state.PlanDrainSlot), so a replica that dropped it as stale on an older read
		// (this record was not draining then) loses its claim instead of draining beside this one. A recorded
		// start whose slot is held needs no write: the record has drained this instance since the write that
		// claimed or confirmed the slot (one that goes back to wait for a replacement clears its drain start),
		// so nobody can have judged the slot stale since. A claim that another drain of the cluster beat is
		// planned again on a fresh read (claimDrainSlot).
		saved, reason, err := o.claimDrainSlot(ctx, t, r, old, func(claim *state.ClusterBudget, held bool) (state.Rollout, string, string, bool) {
			if !starting && (claim == nil || held) {
				return r, "", "", false // the start is recorded and the slot held since (a crash before the drain), or no cluster
			}
			next, what := r.Clone(), "drain slot claimed"
			if starting {
				what = "drain starting"
			}
			next.Current.DrainStartedAt = now
			return next, what, "drain " + old.ID, true
		})
		if reason != "" {
			r.Reason = reason
			return r, errWait
		}
		if err != nil {
			return o.notStartedGivesSlotBack(ctx, t, saved, old, err)
		}
		r, cur = saved, saved.Current
		if err := o.guardEffect(ctx, &r, "drain "+old.ID); err != nil {
			return o.notStartedGivesSlotBack(ctx, t, r, old, err)
		}
		cur = r.Current
		if err := startDrainSeen(ctx, platform, t.Cluster, old); err == nil {
			o.logStep(r, "drain started")
			started, o.drainStarted = true, true
		} else if now.Sub(cur.DrainStartedAt) <= o.Policy.DrainTimeout {
			return r, err
		} // past the deadline a drain that cannot even be started is given up below, like one that cannot be checked

	}
	// The view's container instance (its ARN, and DRAINING as seen or just set) is checked without another
	// lookup: the view is this tick's. A drain this call just started on an instance the look counted tasks on
	// is not over yet: the task listing would only show them moving, so it waits for the next look (the
	// stop of the last task sends the wake-up that brings it). Past the deadline it is checked.
	var prog DrainProgress
	var err error
	if started && old.Node.Tasks > 0 && now.Sub(cur.DrainStartedAt) <= o.Policy.DrainTimeout {
		prog = DrainProgress{Remaining: int(old.Node.Tasks), Detail: fmt.Sprintf("drain just started: %d task(s) running or pending at the look", old.Node.Tasks)}
	} else {
		prog, err = drainStatusSeen(ctx, platform, t.Cluster, old, started)
	}
	if err != nil {
		if started := cur.DrainStartedAt; started.IsZero() || now.Sub(started) <= o.Policy.DrainTimeout {
			return r, err
		}
		// The deadline holds even when the drain cannot be checked any more.
		prog.Detail = "drain status unknown: " + err.Error()
	}
	if prog.Drained {
		cur.Step, cur.StepStartedAt = state.StepTerminating, now
		// The termination that follows in this call uses this write as its pause check (terminateOld).
		o.guard = "terminate " + old.ID
		next, err := o.save(ctx, r, "drained")
		if errors.Is(err, errHeld) {
			// Paused: the drain is recorded all the same (it is an observation); the termination waits.
			return o.save(ctx, r, "drained")
		}
		return next, err
	}
	if started := cur.DrainStartedAt; !started.IsZero() && now.Sub(started) > o.Policy.DrainTimeout {
		if old.Leaving() {
			// Auto Scaling is terminating it on its own (a failed health check, another actor's scale in): its
			// terminating lifecycle action drains it on (hooks.go), and an instance that is leaving is never
			// put back in service (uncordoning a node in Terminating:Wait would halt the rollout on it). The
			// replacement waits until it is gone (retireLeft above), keeping its drain's slot meanwhile.
			r.Reason = fmt.Sprintf("old instance %s is leaving (%s) past the drain deadline: waiting for it to go", old.ID, old.LifecycleState)
			return r, errWait
		}
		if err := platform.Undrain(ctx, t.Cluster, old.ID); err != nil {
			return r, err
		}
		for _, m := range r.Batch { // the halt stops the whole batch: its other drains go back in service too
			if peer, ok := v.Instance(m.OldInstanceID); ok && m.Step == state.StepDraining && peer.Node.Draining && !peer.Leaving() {
				if err := platform.Undrain(ctx, t.Cluster, peer.ID); err != nil {
					return r, err
				}
			}
		}
		return o.halt(ctx, r, fmt.Sprintf("drain of %s did not finish within %s (%s); it was put back in service",
			old.ID, o.Policy.DrainTimeout, prog.Detail), false)
	}
	return r, errWait
}

// managedDrainNext moves the drain of old in a group with ECS managed draining on to Terminating: ECS drains
// the instance when it terminates (field case C17), so the agent never sets DRAINING on top of it. That drain
// counts against the per-cluster budget all the same (invariant 3 per cluster): its slot rides on this write,
// made as the termination's guarded write-ahead (a pause writes nothing; the slot stays held while the record
// is at Terminating of old, through ECS's drain in Terminating:Wait). A full budget waits (claimDrainSlot).
func (o *Orchestrator) managedDrainNext(ctx context.Context, t Target, r state.Rollout, old InstanceView) (state.Rollout, error) {
	guard := o.guard
	saved, reason, err := o.claimDrainSlot(ctx, t, r, old, func(claim *state.ClusterBudget, _ bool) (state.Rollout, string, string, bool) {
		next := r.Clone()
		next.Current.Step, next.Current.StepStartedAt = state.StepTerminating, o.Clock.Now()
		if claim != nil {
			return next, "ECS managed draining will drain it on termination", "terminate " + old.ID, true
		}
		return next, "ECS managed draining will drain it on termination", guard, true
	})
	return waitingFor(saved, reason, err)
}

// managedTerminationHeld returns r and err of a termination that did not happen; with ECS managed draining,
// whose drain begins only with the termination, a wait (a pause, errHeld) gives old's slot back so that a held
// group does not hold up the cluster's other drains (reclaimManagedDrainSlot claims it again).
func (o *Orchestrator) managedTerminationHeld(ctx context.Context, t Target, r state.Rollout, old InstanceView, err error) (state.Rollout, error) {
	if !r.ECSManagedDraining {
		return r, err
	}
	return o.notStartedGivesSlotBack(ctx, t, r, old, err)
}

// reclaimManagedDrainSlot makes sure the slot of old is held before a termination that ECS managed draining
// will drain: a slot held already costs no write (the record has been at Terminating of old since the write
// that claimed it); one given back is claimed again in a guarded write of its own, which is also the
// termination's pause check. A full budget waits (claimDrainSlot).
func (o *Orchestrator) reclaimManagedDrainSlot(ctx context.Context, t Target, r state.Rollout, old InstanceView) (state.Rollout, error) {
	saved, reason, err := o.claimDrainSlot(ctx, t, r, old, func(claim *state.ClusterBudget, held bool) (state.Rollout, string, string, bool) {
		if claim == nil || held {
			return r, "", "", false
		}
		return r.Clone(), "drain slot claimed", "terminate " + old.ID, true
	})
	return waitingFor(saved, reason, err)
}

// terminateOld is the Terminating step: scale-in protection comes off the drained instance, and
// TerminateInstanceInAutoScalingGroup removes it (decrementing desired capacity, which gives back the surge);
// the replacement is then closed (-> Replacing with no current replacement).
func (o *Orchestrator) terminateOld(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	old, ok := v.Instance(cur.OldInstanceID)
	if !ok {
		return o.retireLeft(ctx, v, r, "old instance terminated")
	}
	if !old.InService() && !old.Leaving() {
		r.Reason = fmt.Sprintf("old instance %s is %s, not InService: waiting before terminating it", old.ID, old.LifecycleState)
		return r, errWait
	}
	if !old.InService() {
		if r.ECSManagedDraining && old.LifecycleState != "Terminating:Proceed" {
			// ECS drains it in Terminating:Wait: the next replacement waits for that drain to end.
			r.Reason = fmt.Sprintf("waiting for ECS managed draining of %s (%s)", old.ID, old.LifecycleState)
			return r, errWait
		}
		return o.retireLeft(ctx, v, r, "old instance leaving ("+old.LifecycleState+")")
	}
	if err := o.guardIfPaused(&r, "terminate "+old.ID); err != nil {
		return o.managedTerminationHeld(ctx, t, r, old, err)
	}
	if r.ECSManagedDraining {
		if reason := o.runGate(ctx, t); reason != "" { // ECS's drain begins with this termination: a gate holds it
			o.guard = ""
			r.Reason = reason + "; next step: terminate " + old.ID + " (ECS managed draining drains it)"
			return o.managedTerminationHeld(ctx, t, r, old, errWait)
		}
	}
	if r.ECSManagedDraining && !o.checked {
		// No guarded write of this call precedes the termination (resumed, retried, or let go by a pause that
		// gave the slot back): ECS drains the instance on it, so its slot is claimed again first when not held.
		next, err := o.reclaimManagedDrainSlot(ctx, t, r, old)
		if err != nil {
			return next, err
		}
		r = next
	}
	if err := o.guardEffect(ctx, &r, "terminate "+old.ID); err != nil {
		return o.managedTerminationHeld(ctx, t, r, old, err)
	}
	if old.Protected && !r.ECSManagedDraining {
		// Scale-in protection (ECS managed termination protection sets it on instances with tasks) comes
		// off only here, from the drained instance; explicit termination does not need it, but leaving a
		// drained instance protected would make ECS and Auto Scaling disagree about it.
		if err := o.groups().Unprotect(ctx, v.Name, old.ID); err != nil {
			return r, fmt.Errorf("removing scale-in protection from drained instance %s: %w", old.ID, err)
		}
	}
	// Decrementing desired capacity undoes the surge in the same call; the group's terminating lifecycle
	// hook (if any) then reaches this agent, which finds the instance drained and completes it (Amazon EC2
	// Auto Scaling API Reference: TerminateInstanceInAutoScalingGroup). The replacement is done once the
	// call is accepted: the next one need not wait for the drained instance to finish shutting down.
	// Surge: decrementing desired capacity undoes the surge. Drain-first: the group shrinks by the drained
	// instance unless that would go below min size, in which case Auto Scaling launches its replacement
	// (from the new launch template version). With ECS managed draining the instance is not drained yet:
	// Auto Scaling launches the replacement at once and ECS moves the tasks onto it before the instance
	// goes (desired capacity stays what ECS managed scaling set). Capacity provider: a Rebalance termination
	// keeps desired capacity, so Auto Scaling launches into the old instance's zone (capacityprovider.go).
	// Never below the operator's MinSize (another actor may have scaled in meanwhile): at the minimum the
	// instance is terminated without decrement and Auto Scaling replaces it from the new launch template.
	// Only the agent's own surge is given back (field case C21): once another actor raised desired capacity
	// above what the surge wrote (an autoscaler's scale out while the replacement booted or the old instance
	// drained), the surge is theirs and the instance goes without decrement, so desired capacity stays where
	// they set it. A scale in by another actor counts by its change and the decrement stands (the checker's
	// followDesired, TestSurgeScaledInByAnotherActorWhileDrainingGivesBackItsOwnAndTheScaleInStands).
	decrement := !r.Current.Rebalance && v.Desired-1 >= v.Min && (r.Strategy != StrategyDrainFirst || !r.ECSManagedDraining) &&
		!surgeTakenOver(r, v)
	if err := o.groups().Terminate(ctx, old.ID, decrement); err != nil {
		return r, fmt.Errorf("terminating drained instance %s: %w", old.ID, err)
	}
	if r.ECSManagedDraining {
		o.logStep(r, "terminate requested; ECS drains it")
		return r, errWait
	}
	var next state.Rollout
	var err error
	if r.Strategy == StrategyCapacityProvider { // a rebalancing termination keeps the surge for a GiveBack
		next, err = o.capacityProviderTerminated(ctx, v, r)
	} else {
		next, err = o.retire(ctx, r, "old instance terminating")
	}
	if err == nil {
		err = errWait // this tick's view still shows the old desired capacity: the next pick needs a fresh one
	}
	return next, err
}

// surgeTakenOver reports whether another actor raised desired capacity above what the surge strategy's
// surge still holds (surgedDesired: the SurgeTo the agent wrote less the members of its batch already
// terminated). Zero SurgeTo (no surge written, as in drain-first) is never taken over.
func surgeTakenOver(r state.Rollout, v GroupView) bool {
	cur := r.Current
	if r.Strategy != StrategySurge || cur == nil || cur.SurgeTo == 0 {
		return false
	}
	return v.Desired > surgedDesired(r)
}

// pickNext chooses the next outdated instance: from the Availability Zone with the most outdated instances,
// the oldest first, so the group stays balanced while it changes.
func (o *Orchestrator) pickNext(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	perAZ := map[string]int{}
	var outdated []InstanceView
	for _, i := range v.Instances {
		if i.Leaving() {
			continue
		}
		if !i.InService() {
			r.Reason = fmt.Sprintf("waiting for %s to settle (%s)", i.ID, i.LifecycleState)
			return r, errWait
		}
		if replaceable(t, r, i, o.Clock.Now()) { // rollout_maxage.go: or past the maximum instance age
			outdated = append(outdated, i)
			perAZ[i.AvailabilityZone]++
		}
	}
	// The warm pool first (field case C18, warmpool.go): a surge draws on the pool, which must not hand out
	// the old AMI.
	if err := o.recycleWarmPool(ctx, t, v, &r); err != nil {
		return r, err
	}
	if len(outdated) == 0 {
		r.Phase = state.PhaseVerifying
		return o.save(ctx, r, "no outdated instance left")
	}
	if err := o.guardIfPaused(&r, fmt.Sprintf("replace the next of %d outdated instance(s)", len(outdated))); err != nil {
		return r, err
	}
	if reason := o.runGate(ctx, t); reason != "" {
		r.Reason = reason + fmt.Sprintf("; %d outdated instance(s) left", len(outdated))
		return r, errWait
	}
	// v.Instances is sorted oldest first, so a stable sort on the AZ count keeps age order within a count.
	slices.SortStableFunc(outdated, func(a, b InstanceView) int { return perAZ[b.AvailabilityZone] - perAZ[a.AvailabilityZone] })
	pick := outdated[0]
	ids := make([]string, 0, len(v.Instances))
	for _, i := range v.Instances {
		ids = append(ids, i.ID)
	}
	if reason := capacityProviderHoldSurge(r, o.Clock.Now()); reason != "" { // capacity-provider strategy
		r.Reason = reason
		return r, errWait
	}
	r.Reason = ""
	if owed := r.HaltedSurgeTo; owed != 0 {
		n := max(r.HaltedSurgeCount, 1)
		r.HaltedSurgeTo, r.HaltedSurgeCount = 0, 0
		if owed == v.Desired && r.Strategy == StrategySurge {
			// The surge of a rollout halted without rollback is still in desired capacity: it
			// goes back first, through this instance, drained and then terminated with decrement — never by
			// lowering desired capacity, which would let Auto Scaling pick an undrained instance. A halted batch
			// gives back every member's instance (n), as a batch of drained terminations.
			r.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: pick.ID, DesiredBefore: owed - n, SurgeTo: owed,
				InstancesBefore: ids, StepStartedAt: o.Clock.Now(), ContainerInstanceARN: pick.Node.Name}
			r.Batch = giveBackPeers(v, outdated, *r.Current, int(n))
			// With fewer instances than n to give it back through, what they cannot give back stays in desired
			// capacity and in their baseline, so that their own terminations still decrement (otherwise
			// surgeTakenOver would take the rest for another actor's scale out and give back nothing).
			rebase(r.Current, r.Batch, owed)
			return o.save(ctx, r, fmt.Sprintf("giving back the surge to desired %d a halted rollout left, through %s", owed, strings.Join(giveBackIDs(r), ", ")))
		}
	}
	first := state.StepSurge
	switch {
	case r.Strategy == StrategyDrainFirst && r.ECSManagedDraining:
		first = state.StepTerminating // ECS drains it on termination, through its own hook
	case r.Strategy == StrategyDrainFirst:
		first = state.StepDraining
	}
	unpicked := r.Clone()
	r.Current = &state.Replacement{Step: first, OldInstanceID: pick.ID, DesiredBefore: v.Desired,
		InstancesBefore: ids, StepStartedAt: o.Clock.Now(), ContainerInstanceARN: pick.Node.Name}
	if first == state.StepTerminating {
		return o.pickManagedDrain(ctx, t, unpicked, r, pick)
	}
	if r.Batch = batchPeers(t, v, r, outdated, *r.Current); len(r.Batch) > 0 { // rollout_batch.go
		return o.save(ctx, r, fmt.Sprintf("replacing a batch of %d instances", inFlight(r)))
	}
	return o.save(ctx, r, "replacing instance")
}

// pickManagedDrain writes the pick of a drain-first group with ECS managed draining (r, straight at
// Terminating: ECS drains pick when it terminates) with pick's slot of the per-cluster budget in the same
// guarded write-ahead (invariant 3 per cluster; managedDrainNext is the same claim for the other strategies).
// A full budget waits with the record as it was before the pick (unpicked): the waiting write must not make a
// pick without its slot durable (claimDrainSlot).
func (o *Orchestrator) pickManagedDrain(ctx context.Context, t Target, unpicked, r state.Rollout, pick InstanceView) (state.Rollout, error) {
	guard := o.guard
	saved, reason, err := o.claimDrainSlot(ctx, t, unpicked, pick, func(claim *state.ClusterBudget, _ bool) (state.Rollout, string, string, bool) {
		if claim != nil && guard == "" {
			return r.Clone(), "replacing instance", "terminate " + pick.ID, true // no pause check pending for the pick: the claim needs a guarded write
		}
		return r.Clone(), "replacing instance", guard, true
	})
	return waitingFor(saved, reason, err)
}

// surge raises desired capacity by one (and max by one when desired is already at max) so that the
// replacement is healthy before the old instance is drained (invariant 1, field case C10). Before the call it
// records durably what it writes (Replacement.SurgeTo, and MaxRaisedTo): the first time the step runs,
// DesiredBefore and InstancesBefore are read again from the group as it is now, so an autoscaler that scaled
// out while the step was held (a pause, a crash before the call) keeps its instance and the agent's surge goes
// on top of it. The values written are absolute, so a repeat after a crash is harmless; once SurgeTo is
// recorded, desired capacity at or above it is taken as the agent's surge done, and desired capacity below
// DesiredBefore (a scale in since) moves the plan down by as much before the call.
func (o *Orchestrator) surge(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	if cur.SurgeTo == 0 {
		ids := make([]string, 0, len(v.Instances))
		for _, i := range v.Instances {
			ids = append(ids, i.ID)
		}
		cur.DesiredBefore, cur.InstancesBefore, cur.SurgeTo = v.Desired, ids, v.Desired+int32(inFlight(r))
		for k := range r.Batch { // every member of a batch knows the group as the one surge found it
			r.Batch[k].DesiredBefore, r.Batch[k].InstancesBefore, r.Batch[k].SurgeTo = cur.DesiredBefore, ids, cur.SurgeTo
		}
		if cur.SurgeTo > v.Max {
			if r.MaxRaisedTo == 0 {
				r.MaxRaisedFrom = v.Max
			}
			r.MaxRaisedTo = cur.SurgeTo
		}
		saved, err := o.save(ctx, r, fmt.Sprintf("surge to desired %d requested", cur.SurgeTo))
		if err != nil {
			return saved, err
		}
		r, cur = saved, saved.Current
	} else if v.Desired < cur.DesiredBefore {
		// Desired capacity fell below the one the surge was planned on since it was recorded: an autoscaler or a
		// person scaled in while the surge was held (a pause, a crash before or after the call). The surge goes
		// on top of what they want now, never back up to a value planned before their scale in (invariant 3).
		// Written first, as the surge's plan was: a crash resumes on the new plan.
		drop := cur.DesiredBefore - v.Desired
		cur.DesiredBefore, cur.SurgeTo = v.Desired, cur.SurgeTo-drop
		for k := range r.Batch {
			r.Batch[k].DesiredBefore, r.Batch[k].SurgeTo = cur.DesiredBefore, cur.SurgeTo
		}
		saved, err := o.save(ctx, r, fmt.Sprintf("surge planned again: to desired %d, desired capacity having fallen to %d since it was planned", cur.SurgeTo, v.Desired))
		if err != nil {
			return saved, err
		}
		r, cur = saved, saved.Current
	}
	want := cur.SurgeTo
	if v.Desired < want {
		if err := o.guardEffect(ctx, &r, "surge for "+cur.OldInstanceID); err != nil {
			return r, err
		}
		if want > v.Max {
			if r.MaxRaisedTo < want { // a record written before SurgeTo existed
				if r.MaxRaisedTo == 0 {
					r.MaxRaisedFrom = v.Max
				}
				r.MaxRaisedTo = want
				saved, err := o.save(ctx, r, "raising max size for the surge")
				if err != nil {
					return r, err
				}
				r = saved
			}
			if err := o.groups().SetMaxAndDesired(ctx, v.Name, want); err != nil {
				return r, fmt.Errorf("surging %s to desired=max=%d: %w", v.Name, want, err)
			}
		} else if err := o.groups().SetDesired(ctx, v.Name, want); err != nil {
			return r, fmt.Errorf("surging %s to desired=%d: %w", v.Name, want, err)
		}
	}
	o.guard = "" // the record of a surge made is an observation: never held by a pause
	r.Current.Step, r.Current.StepStartedAt = state.StepReplacementHealthy, o.Clock.Now()
	next, err := o.save(ctx, r, fmt.Sprintf("surge to desired %d", want))
	if err != nil {
		return next, err
	}
	return next, errWait
}
