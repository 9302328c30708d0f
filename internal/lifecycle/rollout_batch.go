package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// TagBatchSize is how many outdated instances of a group one surge replaces at once: a
// whole number ("3") or a percent of the group's desired capacity ("25%", rounded up, at least 1). Default 1.
// It applies to the surge strategy (ECS and EKS self-managed groups); drain-first and capacity-provider groups
// replace one at a time whatever the tag says (their status says so), and the per-cluster budget
// (--cluster-budget) still caps how many of a batch drain at once: a batch waits for slots, it never exceeds
// the budget.
const TagBatchSize = "patch-agent/batch-size"

// BatchSize is a parsed TagBatchSize: Count instances, or Percent of desired capacity when Percent > 0. The
// zero value is a batch of 1.
type BatchSize struct {
	Count   int `json:"count,omitempty"`
	Percent int `json:"percent,omitempty"`
}

// ParseBatchSize reads TagBatchSize: "" (a batch of 1), a whole number from 1, or a percent from 1% to 100%.
// Anything else ("0", "-2", "1.5", "150%", "three") is an error naming the tag and the value, so the group is
// reported misconfigured on status rather than rolled with a guess.
func ParseBatchSize(v string) (BatchSize, error) {
	if v == "" {
		return BatchSize{}, nil
	}
	if num, ok := strings.CutSuffix(v, "%"); ok {
		p, err := strconv.Atoi(num)
		if err != nil || p < 1 || p > 100 {
			return BatchSize{}, fmt.Errorf("tag %s=%q: want a whole number from 1, or a percent of desired capacity from 1%% to 100%%", TagBatchSize, v)
		}
		return BatchSize{Percent: p}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return BatchSize{}, fmt.Errorf("tag %s=%q: want a whole number from 1, or a percent of desired capacity from 1%% to 100%%", TagBatchSize, v)
	}
	return BatchSize{Count: n}, nil
}

// Of returns the batch size for a group of desired capacity desired: Count, or Percent of desired rounded up;
// at least 1.
func (b BatchSize) Of(desired int32) int {
	n := b.Count
	if b.Percent > 0 {
		n = (int(desired)*b.Percent + 99) / 100
	}
	return max(n, 1)
}

// String renders the tag value ("" for the default).
func (b BatchSize) String() string {
	switch {
	case b.Percent > 0:
		return strconv.Itoa(b.Percent) + "%"
	case b.Count > 0:
		return strconv.Itoa(b.Count)
	}
	return ""
}

// batchNote is the status note of a group whose tag asks for a batch its strategy does not do ("" when none).
func batchNote(t Target, strategy string) string {
	if b := t.Policy.BatchSize; strategy == "" || strategy == StrategySurge || strategy == StrategyRefresh || b.Percent == 0 && b.Count <= 1 {
		return ""
	}
	return fmt.Sprintf("tag %s=%s ignored: the %s strategy replaces one instance at a time", TagBatchSize, t.Policy.BatchSize, strategy)
}

// batchPeers returns the Replacements beside the first pick of a surge rollout: up to the group's batch size
// minus one more of the outdated instances, in the pick's order (AZ-balanced, oldest first). None for another
// strategy, or when the group's batch size is 1.
func batchPeers(t Target, v GroupView, r state.Rollout, outdated []InstanceView, first state.Replacement) []state.Replacement {
	if r.Strategy != StrategySurge || first.Step != state.StepSurge {
		return nil
	}
	k := min(t.Policy.BatchSize.Of(v.Desired), len(outdated))
	var peers []state.Replacement
	for _, i := range outdated[1:k] {
		peers = append(peers, state.Replacement{Step: first.Step, OldInstanceID: i.ID, DesiredBefore: first.DesiredBefore,
			StepStartedAt: first.StepStartedAt, ContainerInstanceARN: i.Node.Name})
	}
	return peers
}

// inFlight is how many replacements r has in flight (Current and its batch); 0 without Current.
func inFlight(r state.Rollout) int {
	if r.Current == nil {
		return 0
	}
	return 1 + len(r.Batch)
}

// surgedDesired is the desired capacity that still holds the surge of r's replacements in flight (one instance
// each): Current.DesiredBefore + inFlight. Terminations with decrement bring it down one a member; desired
// capacity above it is another actor's scale out (surgeTakenOver), below it another actor's scale in.
func surgedDesired(r state.Rollout) int32 { return r.Current.DesiredBefore + int32(inFlight(r)) }

// rebase sets the DesiredBefore of the replacements in flight (current and the rest of its batch) so that
// surgedDesired is desired: surge that they cannot give back (nothing to give it back through) counts in their
// baseline, and each of their terminations still gives back its own share.
func rebase(current *state.Replacement, batch []state.Replacement, desired int32) {
	base := desired - int32(1+len(batch))
	current.DesiredBefore = base
	for k := range batch {
		batch[k].DesiredBefore = base
	}
}

// awaitBatch is the ReplacementHealthy step of a batch (len(r.Batch) > 0, every member still at it): it waits
// until as many instances launched since the pick (not in Current.InstancesBefore) serve on the target AMI as
// the batch has members, then gives each member its replacement and moves them all to Draining in one write.
// No member drains before every replacement of the batch serves (invariant 1). A replacement on another AMI,
// or too few serving within the health window, halts like a single replacement (awaitReplacement).
func (o *Orchestrator) awaitBatch(ctx context.Context, t Target, v GroupView, r state.Rollout) (state.Rollout, error) {
	cur := r.Current
	now := o.Clock.Now()
	var serving []string
	var launched int
	for _, i := range v.Instances {
		if slices.Contains(cur.InstancesBefore, i.ID) {
			continue
		}
		if i.ImageID != "" && i.ImageID != r.TargetImageID {
			return o.halt(ctx, r, fmt.Sprintf("replacement %s launched AMI %s, not the target %s: the group's launch template change did not take effect",
				i.ID, i.ImageID, r.TargetImageID), true)
		}
		launched++
		if i.Serving() {
			serving = append(serving, i.ID)
		}
	}
	n := inFlight(r)
	if len(serving) >= n {
		cur.NewInstanceID, cur.Step, cur.StepStartedAt = serving[0], state.StepDraining, now
		for k := range r.Batch {
			r.Batch[k].NewInstanceID, r.Batch[k].Step, r.Batch[k].StepStartedAt = serving[k+1], state.StepDraining, now
		}
		return o.save(ctx, r, fmt.Sprintf("%d replacements healthy", n))
	}
	if now.Sub(cur.StepStartedAt) > o.healthWindow(cur) {
		if launched == 0 {
			if next, short, err := o.retryIfShortOfCapacity(ctx, t, v, r); short || err != nil {
				return next, err
			}
		}
		return o.halt(ctx, r, fmt.Sprintf("%d of %d replacements serving after %s", len(serving), n, o.healthWindow(cur)), true)
	}
	r.Reason = fmt.Sprintf("waiting for %d replacements to serve (%d now) before draining %d instances", n, len(serving), n)
	return r, errWait
}

// replaceBatch runs the Draining and Terminating steps of a batch's members, each on its own: every member in
// turn is made Current (the others wait in Batch) and goes through drainOld or terminateOld, so each drain
// claims its own slot of the per-cluster budget and each termination gives back one instance of the surge. The
// first member whose step writes the record ends the call (the stored order is the new one); when every member
// waits, the record is returned as read, with the first member's reason.
func (o *Orchestrator) replaceBatch(ctx context.Context, t Target, platform Platform, v GroupView, r state.Rollout) (state.Rollout, error) {
	members := append([]state.Replacement{*r.Current}, r.Batch...)
	var first state.Rollout
	var firstErr error
	for k := range members {
		if k > 0 {
			// A pause check left by an earlier write of this call covers Current's effect, never another
			// member's: each member's effect is checked on its own (guardEffect, reclaimManagedDrainSlot).
			o.checked = false
		}
		o.drainStarted = false
		rr := r.Clone()
		m := members[k]
		rr.Current = &m
		rr.Batch = append(slices.Clone(members[:k]), members[k+1:]...)
		var next state.Rollout
		var err error
		switch m.Step {
		case state.StepDraining:
			next, err = o.drainOld(ctx, t, platform, v, rr)
		case state.StepTerminating:
			next, err = o.terminateOld(ctx, t, v, rr)
		default:
			return r, fmt.Errorf("batch member %s at step %q beside a drain", m.OldInstanceID, m.Step)
		}
		if next.Version != r.Version || !errors.Is(err, errWait) {
			return next, err // a member's step wrote the record (or failed): the next call starts from it
		}
		if o.drainStarted {
			// This member's drain started without a write (its start was recorded with its slot): the view
			// still shows the instance serving, so the next member's check that the instances that stay serve
			// desired capacity would count it. The next look judges the others on a view that shows it.
			r.Reason = next.Reason
			return r, err
		}
		if k == 0 {
			first, firstErr = next, err
		}
	}
	r.Reason = first.Reason
	return r, firstErr
}

// giveBackPeers returns the members beside first (already Draining) that give back a halted batch's surge of n
// instances: the next outdated instances in the pick's order, then other serving instances when fewer than n
// are outdated (an instance drained and terminated with decrement shrinks the group by one whichever AMI it
// runs). Each is Draining, with first's DesiredBefore and SurgeTo, so the drains wait until the instances that
// stay serve desired capacity without the surge. Fewer than n-1 when the group has too few instances.
func giveBackPeers(v GroupView, outdated []InstanceView, first state.Replacement, n int) []state.Replacement {
	var peers []state.Replacement
	add := func(i InstanceView) {
		if len(peers) >= n-1 || i.ID == first.OldInstanceID || slices.ContainsFunc(peers, func(p state.Replacement) bool { return p.OldInstanceID == i.ID }) {
			return
		}
		peers = append(peers, state.Replacement{Step: state.StepDraining, OldInstanceID: i.ID, DesiredBefore: first.DesiredBefore,
			SurgeTo: first.SurgeTo, InstancesBefore: first.InstancesBefore, StepStartedAt: first.StepStartedAt, ContainerInstanceARN: i.Node.Name})
	}
	for _, i := range outdated {
		add(i)
	}
	for _, i := range v.Instances {
		if i.Serving() {
			add(i)
		}
	}
	return peers
}

// giveBackIDs lists the old instances of r's replacements in flight, Current first.
func giveBackIDs(r state.Rollout) []string {
	if r.Current == nil {
		return nil
	}
	ids := []string{r.Current.OldInstanceID}
	for _, m := range r.Batch {
		ids = append(ids, m.OldInstanceID)
	}
	return ids
}

// retireLeftOfBatch closes a batch member whose old instance left on its own (a Spot interruption, a failed
// health check Auto Scaling replaced, another actor's scale-in) while desired capacity still holds its share of
// the batch's surge (desired at most DesiredBefore + members in flight: nobody raised it; a scale-in by
// someone else lowered it by their own change, which stands). Retired plainly, its share of the surge would
// stay in desired capacity after the batch ends (one instance too many for every such member). Instead its
// share carries over, as retireLeft does for a single replacement: to the next serving outdated instance
// outside the batch, or, with none left, to a serving instance that is no member's replacement; that instance
// joins the batch at Draining (its replacement is already there: the one the surge launched, or Auto Scaling's
// for the instance that left) and is terminated with decrement like any member. With nothing serving to carry
// to, the member is retired plainly.
func (o *Orchestrator) retireLeftOfBatch(ctx context.Context, v GroupView, r state.Rollout, why string) (state.Rollout, error) {
	cur := r.Current
	r.Replaced = append(r.Replaced, cur.OldInstanceID)
	taken := func(id string) bool {
		if slices.Contains(r.Replaced, id) || id == cur.NewInstanceID {
			return true
		}
		return slices.ContainsFunc(r.Batch, func(m state.Replacement) bool { return m.OldInstanceID == id || m.NewInstanceID == id })
	}
	var next *InstanceView
	for _, i := range v.Instances {
		if i.Serving() && i.ImageID != r.TargetImageID && !taken(i.ID) {
			next = &i
			break
		}
	}
	for _, i := range v.Instances {
		if next == nil && i.Serving() && !taken(i.ID) {
			next = &i
		}
	}
	if next == nil {
		r.Replaced = r.Replaced[:len(r.Replaced)-1]
		// Nothing serving to carry the share to: it stays in desired capacity (one instance more than before the
		// batch), in the baseline of the members left (rebase), so that each of their terminations still gives
		// back its own share; uncounted, it would read as another actor's scale out (surgeTakenOver) and the
		// whole surge would stay.
		rebase(&r.Batch[0], r.Batch[1:], v.Desired) // the members left, as retire makes the first of them Current
		return o.retire(ctx, r, why)
	}
	carried := *cur
	if short := surgedDesired(r) - v.Desired; short > 0 {
		// Another actor scaled in by short: the capacity the drains must keep serving is lower by as much.
		carried.DesiredBefore -= short
		for k := range r.Batch {
			r.Batch[k].DesiredBefore = min(r.Batch[k].DesiredBefore, carried.DesiredBefore)
		}
	}
	carried.OldInstanceID, carried.ContainerInstanceARN, carried.Step, carried.StepStartedAt = next.ID, next.Node.Name, state.StepDraining, o.Clock.Now()
	carried.DrainStartedAt, carried.NewInstanceID = time.Time{}, cur.NewInstanceID
	r.Current = &carried
	return o.save(ctx, r, fmt.Sprintf("%s; its share of the batch's surge carries over to %s", why, next.ID))
}
