package lifecycle

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// budgetWrites counts the writes of the cluster budget on its own (PutClusterBudget), and moves the budget
// right before each of the first races guarded writes that carry a claim — the first of them adding slot
// (when set), the others only writing it again at a new version: the fault of other drains of the cluster
// claiming between this drain's plan and its write-ahead. With dropsOurs the first of them also drops the
// slots of the record's own group: another replica that judged them stale on an older read.
type budgetWrites struct {
	state.Store
	alone     int
	races     int
	slot      *state.DrainSlot
	dropsOurs bool
}

func (s *budgetWrites) PutClusterBudget(ctx context.Context, b state.ClusterBudget) (state.ClusterBudget, error) {
	s.alone++
	return s.Store.PutClusterBudget(ctx, b)
}

func (s *budgetWrites) PutRolloutUnlessPaused(ctx context.Context, r state.Rollout, h []state.HistoryEntry, now time.Time, claim *state.ClusterBudget) (state.Rollout, error) {
	if claim != nil && s.races > 0 {
		s.races--
		b, err := s.Store.GetClusterBudget(ctx, claim.Cluster)
		if err != nil {
			b = state.ClusterBudget{Cluster: claim.Cluster}
		}
		if s.dropsOurs {
			b.Slots, s.dropsOurs = slices.DeleteFunc(b.Slots, func(h state.DrainSlot) bool { return h.Group == r.Group }), false
		}
		if s.slot != nil {
			b.Slots, s.slot = append(b.Slots, *s.slot), nil
		}
		if _, err := s.Store.PutClusterBudget(ctx, b); err != nil {
			return state.Rollout{}, err
		}
	}
	return s.Store.PutRolloutUnlessPaused(ctx, r, h, now, claim)
}

// otherGroupDraining stores group "other" at Draining of i-7 in the rig's cluster c1 and, with holdsSlot, its
// slot: the only one of the default budget of 1.
func otherGroupDraining(t *testing.T, rg *rig, holdsSlot bool) {
	t.Helper()
	ctx := context.Background()
	other := replacing(StrategySurge, state.StepDraining)
	other.Group, other.Current.OldInstanceID = "other", "i-7"
	_, err := rg.store.PutRollout(ctx, other)
	require.NoError(t, err)
	if holdsSlot {
		b, err := rg.store.GetClusterBudget(ctx, "ecs/c1")
		if errors.Is(err, state.ErrNotFound) {
			b, err = state.ClusterBudget{Cluster: "ecs/c1"}, nil
		}
		require.NoError(t, err)
		b.Slots = append(b.Slots, state.DrainSlot{Group: "other", InstanceID: "i-7", At: now0})
		_, err = rg.store.PutClusterBudget(ctx, b)
		require.NoError(t, err)
	}
}

// recordedDrainStart seeds drainReady's record with its drain start recorded at startedAt and its slot of the
// cluster budget held (claimed then), and returns drainReady's look: a drain recorded but not under way.
func recordedDrainStart(t *testing.T, rg *rig, startedAt time.Time) GroupView {
	t.Helper()
	rec, v := drainReady()
	rec.Current.DrainStartedAt = startedAt
	rg.seed0(rec)
	_, err := rg.store.PutClusterBudget(context.Background(), state.ClusterBudget{Cluster: "ecs/c1", Slots: []state.DrainSlot{{Group: "prod", InstanceID: "i-1", At: startedAt}}})
	require.NoError(t, err)
	return v
}

// drainReady is the rig's record at Draining of i-1 with its replacement i-9 serving, and the look that sees it.
func drainReady() (state.Rollout, GroupView) {
	r := replacing(StrategySurge, state.StepDraining)
	r.Current.NewInstanceID = "i-9"
	return r, view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew))
}

// TestDrainWriteAheadCarriesItsSlotOfTheClusterBudget: the drain's start and its slot of the per-cluster budget
// are one guarded write (one DynamoDB request fewer per replaced instance): after the look the record has its
// drain start, the slot is held, the drain started, and the budget was never written on its own.
func TestDrainWriteAheadCarriesItsSlotOfTheClusterBudget(t *testing.T) {
	rg := newRig()
	rec, v := drainReady()
	rg.seed0(rec)
	bw := &budgetWrites{Store: rg.store}
	rg.o.Store = bw
	_, err := rg.o.Reconcile(context.Background(), rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Equal(t, []string{"i-1"}, rg.platform.started)
	require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
	require.Zero(t, bw.alone, "the slot rides on the drain's write-ahead")
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, now0, stored.Current.DrainStartedAt)
}

// TestDrainWhoseStartIsRecordedButWhoseSlotIsNotHeldClaimsItFirst: a drain whose slot was given back while a
// pause or a gate held it (or recorded by an agent whose write-ahead did not carry the slot) has its start
// recorded and no slot: it claims the slot with a guarded write of its own before the drain starts, which
// starts the drain's deadline again (the instance is not DRAINING: no drain was under way), and waits without
// draining while the cluster's budget is full with another group's live drain.
func TestDrainWhoseStartIsRecordedButWhoseSlotIsNotHeldClaimsItFirst(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(map[bool]string{false: "slot free", true: "budget full"}[full], func(t *testing.T) {
			rg := newRig()
			rec, v := drainReady()
			rec.Current.DrainStartedAt = now0.Add(-time.Minute)
			rg.seed0(rec)
			if full {
				otherGroupDraining(t, rg, true)
			}
			_, err := rg.o.Reconcile(context.Background(), rg.target, Inputs{View: v, AMI: newAMI()})
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(context.Background(), "prod")
			require.NoError(t, err)
			if full {
				require.Empty(t, rg.platform.started, "no drain beyond the cluster budget")
				require.Equal(t, []string{"other/i-7"}, slotsHeld(t, rg.store))
				require.Contains(t, stored.Reason, "per-cluster budget")
				return
			}
			require.Equal(t, []string{"i-1"}, rg.platform.started)
			require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
			require.Equal(t, now0, stored.Current.DrainStartedAt, "the deadline runs from the claim: no drain was under way")
		})
	}
}

// TestDrainWhoseHeldSlotAnotherReplicaDroppedDoesNotDrainBesideIt: the drain's start is recorded and its slot
// held, but before the drain the replacement stops serving. The record goes back to wait for a healthy one and
// its drain start is cleared (a drain begun again gets a deadline of its own). Its slot is now stale, and a
// replica draining another group of the cluster drops it and claims the budget of 1 — between this drain's
// plan, which still saw the slot held, and its write-ahead. The write-ahead carries the held slot as a
// confirmation conditional on the budget's version, not trusting it: it loses, is planned again, finds the
// budget full, and the drain waits instead of running beside the other one.
func TestDrainWhoseHeldSlotAnotherReplicaDroppedDoesNotDrainBesideIt(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	v := recordedDrainStart(t, rg, now0.Add(-time.Hour))

	gone := view(3, false, serving("i-1", amiOld), serving("i-2", amiOld))
	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: gone, AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.StepReplacementHealthy, stored.Current.Step)
	require.True(t, stored.Current.DrainStartedAt.IsZero(), "the drain that never got under way gives up its start")

	otherGroupDraining(t, rg, false)
	rg.o.Store = &budgetWrites{Store: rg.store, races: 1, dropsOurs: true, slot: &state.DrainSlot{Group: "other", InstanceID: "i-7", At: now0}}
	for range 2 { // replacement healthy again, then the drain
		_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
		require.NoError(t, err)
	}
	require.Empty(t, rg.platform.started, "no second drain on a budget of 1")
	require.Equal(t, []string{"other/i-7"}, slotsHeld(t, rg.store))
	stored, err = rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, state.StepDraining, stored.Current.Step)
	require.Contains(t, stored.Reason, "i-7 (other)")
	require.True(t, stored.Current.DrainStartedAt.IsZero(), "no drain start written")
}

// TestDrainWhoseSlotClaimLosesARaceIsPlannedAgainOrWritesNothing: other drains of the cluster claim between
// this drain's plan and its write-ahead. The claim is planned again on a fresh read in the same look: with a
// slot left the drain starts at once, with the budget filled by the other group's live drain it waits; when
// every attempt of the look loses (budgetClaimAttempts), nothing is written — no drain start, no slot — and
// no drain starts.
func TestDrainWhoseSlotClaimLosesARaceIsPlannedAgainOrWritesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  int
		races   int
		drained bool
		slots   []string
		reason  string
	}{
		{"a slot left", 2, 1, true, []string{"other/i-7", "prod/i-1"}, ""},
		{"the budget filled", 1, 1, false, []string{"other/i-7"}, "i-7 (other)"},
		{"every attempt beaten", 2, budgetClaimAttempts, false, []string{"other/i-7"}, "per-cluster budget changed by another drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rg := newRig()
			rg.o.Policy.ClusterBudget = tc.budget
			rec, v := drainReady()
			rg.seed0(rec)
			otherGroupDraining(t, rg, false)
			rg.o.Store = &budgetWrites{Store: rg.store, races: tc.races, slot: &state.DrainSlot{Group: "other", InstanceID: "i-7", At: now0}}

			_, err := rg.o.Reconcile(context.Background(), rg.target, Inputs{View: v, AMI: newAMI()})
			require.NoError(t, err)
			require.Equal(t, tc.slots, slotsHeld(t, rg.store))
			stored, err := rg.store.GetRollout(context.Background(), "prod")
			require.NoError(t, err)
			if tc.drained {
				require.Equal(t, []string{"i-1"}, rg.platform.started, "planned again and started in the same look")
				require.Equal(t, now0, stored.Current.DrainStartedAt)
				return
			}
			require.Empty(t, rg.platform.started)
			require.True(t, stored.Current.DrainStartedAt.IsZero(), "the drain's start was not written")
			require.Contains(t, stored.Reason, tc.reason)
		})
	}
}

// TestPauseThatHoldsTheDrainOfARecordedStartGivesItsSlotBack: the drain's start and its slot are durable but the
// drain did not start (a crash or a failed drain call after the write-ahead), and a pause then holds the drain:
// its slot goes back, so the cluster's other groups are not held up by a paused group; after the resume the
// drain claims it again and starts.
func TestPauseThatHoldsTheDrainOfARecordedStartGivesItsSlotBack(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	v := recordedDrainStart(t, rg, now0.Add(-time.Minute))
	require.NoError(t, rg.store.PutLock(ctx, state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0.Add(-time.Second)}))

	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Empty(t, rg.platform.started, "held by the pause")
	require.Empty(t, slotsHeld(t, rg.store), "a paused group holds no slot of the cluster budget")

	require.NoError(t, rg.store.DeleteLock(ctx, "prod"))
	_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Equal(t, []string{"i-1"}, rg.platform.started)
	require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
}

// TestECSManagedDrainingCountsAgainstTheClusterBudget: in a group with ECS managed draining, ECS drains the old
// instance when the agent terminates it, so the move to Terminating is where that drain begins. It claims the
// cluster's slot in the same guarded write: with another group's live drain filling a budget of 1 it waits (no
// Terminating, no termination); with the slot free it moves on holding the slot; a pause writes neither.
func TestECSManagedDrainingCountsAgainstTheClusterBudget(t *testing.T) {
	for _, tc := range []struct {
		name           string
		full, paused   bool
		step           state.Step
		slots          []string
		reasonContains string
	}{
		{"slot free", false, false, state.StepTerminating, []string{"prod/i-1"}, ""},
		{"budget full", true, false, state.StepDraining, []string{"other/i-7"}, "i-7 (other)"},
		{"paused", false, true, state.StepDraining, nil, "incident"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rg := newRig()
			rec, v := drainReady()
			rec.ECSManagedDraining = true
			rg.seed0(rec)
			if tc.full {
				otherGroupDraining(t, rg, true)
			}
			if tc.paused {
				require.NoError(t, rg.store.PutLock(ctx, state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0.Add(-time.Second)}))
			}
			_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
			require.NoError(t, err)
			require.Empty(t, rg.platform.started, "never DRAINING on top of ECS managed draining")
			require.Equal(t, tc.slots, slotsHeld(t, rg.store))
			stored, err := rg.store.GetRollout(ctx, "prod")
			require.NoError(t, err)
			require.Equal(t, tc.step, stored.Current.Step)
			require.Contains(t, stored.Reason, tc.reasonContains)
			if tc.step != state.StepTerminating {
				for _, c := range rg.groups.calls {
					require.NotEqual(t, "Terminate", c.Op, "no termination: ECS would drain beyond the budget")
				}
			}
		})
	}
}

// TestDrainFirstManagedDrainingPickClaimsItsSlot: a drain-first group with ECS managed draining (the default
// strategy of a capacity-provider group with managed draining) picks straight into Terminating: ECS drains the
// instance on that termination. The pick's guarded write carries its slot of the cluster budget: with another
// group's live drain filling a budget of 1 nothing is picked, nothing terminated, and the record waits as it
// was; with the slot free the pick and the slot are written together.
func TestDrainFirstManagedDrainingPickClaimsItsSlot(t *testing.T) {
	for _, full := range []bool{true, false} {
		t.Run(map[bool]string{true: "budget full", false: "slot free"}[full], func(t *testing.T) {
			ctx := context.Background()
			rg := newRig()
			if full {
				otherGroupDraining(t, rg, true)
			}
			rec := replacing(StrategyDrainFirst, state.StepDraining)
			rec.Current, rec.ECSManagedDraining = nil, true
			rg.seed0(rec)
			v := view(2, false, serving("i-1", amiOld), serving("i-2", amiOld))
			_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(ctx, "prod")
			require.NoError(t, err)
			if full {
				for _, c := range rg.groups.calls {
					require.NotEqual(t, "Terminate", c.Op, "ECS would drain %s beside other's drain of i-7 on a budget of 1", c.Target)
				}
				require.Nil(t, stored.Current, "no pick without its slot")
				require.Contains(t, stored.Reason, "i-7 (other)")
				require.Equal(t, []string{"other/i-7"}, slotsHeld(t, rg.store))
				return
			}
			require.NotNil(t, stored.Current)
			require.Equal(t, state.StepTerminating, stored.Current.Step)
			require.Equal(t, []string{"prod/" + stored.Current.OldInstanceID}, slotsHeld(t, rg.store))
		})
	}
}

// gateAlarms is an alarm source whose firing alarms the test sets.
type gateAlarms struct{ firing []string }

func (a *gateAlarms) InAlarm(context.Context, []string) ([]string, error) { return a.firing, nil }

// TestRecordedDrainStartHeldByAPauseOrAGateRunsOnADeadlineOfItsOwn: the drain's start is recorded with its
// slot, but the drain call fails; then a pause, or a firing alarm gate, holds the drain for two hours. While it
// is held the slot goes back (the cluster's other groups are not held up by a drain that is not under way);
// once nothing holds it the drain claims its slot again, its deadline starts from that claim, and the drain
// runs instead of being put back in service at once, past the first attempt's 30 min deadline.
func TestRecordedDrainStartHeldByAPauseOrAGateRunsOnADeadlineOfItsOwn(t *testing.T) {
	for _, byPause := range []bool{true, false} {
		t.Run(map[bool]string{true: "pause", false: "alarm gate"}[byPause], func(t *testing.T) {
			ctx := context.Background()
			rg := newRig()
			alarms := &gateAlarms{}
			rg.target.Policy.Alarms, rg.o.Alarms = []string{"p99"}, alarms
			rec, v := drainReady()
			v.Instances[0].Node.Tasks = 3
			rg.seed0(rec)
			rg.platform.drainError = context.DeadlineExceeded // the drain call fails after the write-ahead
			_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
			require.Error(t, err)
			require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
			rg.platform.drainError, rg.platform.started = nil, nil

			if byPause {
				require.NoError(t, rg.store.PutLock(ctx, state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0}))
			} else {
				alarms.firing = []string{"p99"}
			}
			for range 8 { // two hours of 15 min looks, held
				rg.clock.Step(15 * time.Minute)
				v.ObservedAt = rg.clock.Now()
				_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
				require.NoError(t, err)
				require.Empty(t, slotsHeld(t, rg.store), "a held drain that is not under way holds no slot")
			}
			require.Empty(t, rg.platform.started)
			require.NoError(t, rg.store.DeleteLock(ctx, "prod"))
			alarms.firing = nil
			_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(ctx, "prod")
			require.NoError(t, err)
			require.Equal(t, []string{"i-1"}, rg.platform.started)
			require.Empty(t, rg.platform.undrained, "a drain begun a moment ago is not past a 30 min deadline")
			require.Equal(t, state.PhaseReplacing, stored.Phase)
			require.Equal(t, rg.clock.Now(), stored.Current.DrainStartedAt, "the deadline runs from the claim")
			require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
		})
	}
}

// TestManagedDrainingTerminationHeldByAPauseGivesItsSlotBack: with ECS managed draining the slot is claimed in
// the move to Terminating, but the termination call fails and a pause then holds the termination. ECS's drain
// begins only with the termination, so while paused the slot goes back (the cluster's other groups are not held
// up); after the resume the termination claims it again before it is made, and with another group's drain
// filling the budget meanwhile it waits instead of terminating.
func TestManagedDrainingTerminationHeldByAPauseGivesItsSlotBack(t *testing.T) {
	for _, takenMeanwhile := range []bool{false, true} {
		t.Run(map[bool]string{false: "slot free after the pause", true: "slot taken during the pause"}[takenMeanwhile], func(t *testing.T) {
			ctx := context.Background()
			rg := newRig()
			rec, v := drainReady()
			rec.ECSManagedDraining = true
			rg.seed0(rec)
			rg.groups.err = context.DeadlineExceeded // the termination call fails after the claim
			_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
			require.Error(t, err)
			rg.groups.err, rg.groups.calls = nil, nil
			require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))

			require.NoError(t, rg.store.PutLock(ctx, state.Lock{Group: "prod", Reason: "incident", Who: "alice", Since: now0}))
			for range 4 {
				rg.clock.Step(15 * time.Minute)
				_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
				require.NoError(t, err)
				require.Empty(t, slotsHeld(t, rg.store), "a paused termination holds no slot: ECS has not begun its drain")
			}
			if takenMeanwhile {
				otherGroupDraining(t, rg, true)
			}
			require.NoError(t, rg.store.DeleteLock(ctx, "prod"))
			_, err = rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
			require.NoError(t, err)
			terminated := slices.ContainsFunc(rg.groups.calls, func(c groupCall) bool { return c.Op == "Terminate" })
			stored, err := rg.store.GetRollout(ctx, "prod")
			require.NoError(t, err)
			if takenMeanwhile {
				require.False(t, terminated, "ECS would drain i-1 beside other's drain of i-7 on a budget of 1")
				require.Equal(t, []string{"other/i-7"}, slotsHeld(t, rg.store))
				require.Contains(t, stored.Reason, "i-7 (other)")
				return
			}
			require.True(t, terminated, "the termination is made once its slot is held again")
			require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store))
		})
	}
}
