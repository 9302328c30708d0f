package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/state/storetest"
)

// pausingStore writes a pause lock into the store right before the first pause check of a step reaches it
// (the guarded write, or the consistent read of a step no write precedes): the fault of a pause taken after
// the look read the world (and found no pause) and before the step's own write.
type pausingStore struct {
	state.Store
	lock   state.Lock
	armed  bool
	checks int
}

func (s *pausingStore) pauseNow(ctx context.Context) error {
	s.checks++
	if !s.armed {
		return nil
	}
	s.armed = false
	return s.Store.PutLock(ctx, s.lock)
}

func (s *pausingStore) PutRolloutUnlessPaused(ctx context.Context, r state.Rollout, h []state.HistoryEntry, now time.Time, claim *state.ClusterBudget) (state.Rollout, error) {
	if err := s.pauseNow(ctx); err != nil {
		return state.Rollout{}, err
	}
	return s.Store.PutRolloutUnlessPaused(ctx, r, h, now, claim)
}

func (s *pausingStore) PauseHolding(ctx context.Context, group string, now time.Time) (*state.Lock, error) {
	if err := s.pauseNow(ctx); err != nil {
		return nil, err
	}
	return s.Store.PauseHolding(ctx, group, now)
}

// TestPauseWrittenBetweenTheLooksReadAndTheStepsWriteStopsTheStep: for every destructive step of a surge
// rollout (the pick and its surge, a surge resumed after a crash, the drain, the termination right after the
// drained look, a termination resumed), a pause lock (global or the group's) written after the look and right
// before the step's pause check stops the step: no Auto Scaling call, no drain, the record not moved past the
// step, the pause on status; the look read no pause lock (Inputs.PauseRead is never called: the check is in the
// step's own write or a consistent read, invariant 7).
func TestPauseWrittenBetweenTheLooksReadAndTheStepsWriteStopsTheStep(t *testing.T) {
	drainable := func() state.Rollout {
		r := replacing(StrategySurge, state.StepDraining)
		r.Current.NewInstanceID = "i-9"
		return r
	}
	ready := view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew))
	drained := view(3, false, draining("i-1", amiOld), serving("i-2", amiOld), serving("i-9", amiNew))
	for _, tc := range []struct {
		name     string
		record   func() state.Rollout
		view     GroupView
		drained  bool
		wantStep state.Step // the step the record must be at afterwards ("" : no replacement recorded)
		next     string     // the step the reason names
	}{
		{"pick and surge", func() state.Rollout { r := replacing(StrategySurge, ""); r.Current = nil; return r },
			view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), false, "", "replace the next of 2"},
		{"surge resumed after a crash", func() state.Rollout {
			r := replacing(StrategySurge, state.StepSurge)
			r.Current.SurgeTo = 3
			return r
		}, view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)), false, state.StepSurge, "surge for i-1"},
		{"drain", drainable, ready, false, state.StepDraining, "drain i-1"},
		{"termination after the drained look", func() state.Rollout {
			r := drainable()
			r.Current.DrainStartedAt = now0.Add(-time.Minute)
			return r
		}, drained, true, state.StepTerminating, "terminate i-1"},
		{"termination resumed after a crash", func() state.Rollout {
			r := drainable()
			r.Current.Step, r.Current.DrainStartedAt = state.StepTerminating, now0.Add(-time.Minute)
			return r
		}, drained, true, state.StepTerminating, "terminate i-1"},
	} {
		for _, scope := range []string{state.GlobalScope, "prod"} {
			t.Run(tc.name+"/"+state.Lock{Group: scope}.Scope(), func(t *testing.T) {
				rg := newRig()
				rg.platform.drained = tc.drained
				rg.seed0(tc.record())
				ps := &pausingStore{Store: rg.store, armed: true,
					lock: state.Lock{Group: scope, Reason: "incident", Who: "alice", Since: now0}}
				rg.o.Store = ps
				reads := 0
				read := func(context.Context) (*state.Lock, error) { reads++; return nil, nil }
				_, err := rg.o.Reconcile(context.Background(), rg.target, Inputs{View: tc.view, AMI: newAMI(), PauseRead: read})
				require.NoError(t, err)
				require.Positive(t, ps.checks, "the step checked the pause")
				require.Zero(t, reads, "no pause lock Query")
				reads = 0
				for _, c := range rg.groups.calls {
					require.NotContains(t, []string{"SetDesired", "SetMaxAndDesired", "Terminate", "Unprotect"}, c.Op, "no destructive call: %+v", c)
				}
				require.Empty(t, rg.platform.started, "no drain started")
				require.Empty(t, slotsHeld(t, rg.store), "a drain the pause stopped holds no slot of the cluster budget")
				// A second look while the pause lasts still takes no step; status names the pause by then (the
				// drained look records the drain and shows the pause from the next look).
				_, err = rg.o.Reconcile(context.Background(), rg.target, Inputs{View: tc.view, AMI: newAMI(), PauseRead: read})
				require.NoError(t, err)
				require.Empty(t, rg.platform.started, "no drain started")
				for _, c := range rg.groups.calls {
					require.NotContains(t, []string{"SetDesired", "SetMaxAndDesired", "Terminate", "Unprotect"}, c.Op, "no destructive call: %+v", c)
				}
				stored, err := rg.store.GetRollout(context.Background(), rg.target.Group)
				require.NoError(t, err)
				if tc.wantStep == "" {
					require.Nil(t, stored.Current, "no replacement picked")
				} else {
					require.Equal(t, tc.wantStep, stored.Current.Step)
				}
				require.Contains(t, stored.Reason, "paused ("+state.Lock{Group: scope}.Scope()+") by alice")
				require.Contains(t, stored.Reason, "next step: "+tc.next)

				// Resumed: the next look takes the step.
				require.NoError(t, rg.store.DeleteLock(context.Background(), scope))
				_, err = rg.o.Reconcile(context.Background(), rg.target, Inputs{View: tc.view, AMI: newAMI(), PauseRead: read})
				require.NoError(t, err)
				acted := len(rg.platform.started) > 0
				for _, c := range rg.groups.calls {
					acted = acted || c.Op == "SetDesired" || c.Op == "Terminate"
				}
				require.True(t, acted, "after resume the step is taken")
				if len(rg.platform.started) > 0 && !tc.drained {
					require.Equal(t, []string{"prod/i-1"}, slotsHeld(t, rg.store), "the drain started holds its slot")
				}
			})
		}
	}
}

// pauseBeforePhase writes lock right before the first rollout write that moves the record to phase: a pause
// made durable by an operator between the look's pause read and that write.
type pauseBeforePhase struct {
	state.Store
	phase state.Phase
	lock  state.Lock
	done  bool
}

func (s *pauseBeforePhase) inject(ctx context.Context, r state.Rollout) error {
	if r.Phase != s.phase || s.done {
		return nil
	}
	s.done = true
	return s.Store.PutLock(ctx, s.lock)
}

func (s *pauseBeforePhase) PutRollout(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	if err := s.inject(ctx, r); err != nil {
		return state.Rollout{}, err
	}
	return s.Store.PutRollout(ctx, r)
}

func (s *pauseBeforePhase) PutRolloutWithHistory(ctx context.Context, r state.Rollout, h []state.HistoryEntry) (state.Rollout, error) {
	if err := s.inject(ctx, r); err != nil {
		return state.Rollout{}, err
	}
	return s.Store.PutRolloutWithHistory(ctx, r, h)
}

func (s *pauseBeforePhase) PutRolloutUnlessPaused(ctx context.Context, r state.Rollout, h []state.HistoryEntry, now time.Time, claim *state.ClusterBudget) (state.Rollout, error) {
	if err := s.inject(ctx, r); err != nil {
		return state.Rollout{}, err
	}
	return s.Store.PutRolloutUnlessPaused(ctx, r, h, now, claim)
}

// A pause stops a new launch template version and the group's change first (docs/operations.md: "no new launch
// template version or group change"). Start reads the pause once and keeps it for the call; a pause durable
// after that read — before the Preparing write, or before a Preparing record's next look whose kept read (an
// eventually consistent Query) does not show it yet — stops CreateLaunchTemplateVersion and
// UpdateAutoScalingGroup: the Preparing write carries the pause check, and prepare confirms it against the lock
// items, so the group is never pointed at the new AMI while paused.
func TestPauseDurableAfterTheLooksReadStopsTheNewLaunchTemplateVersionAndTheGroupChange(t *testing.T) {
	lock := state.Lock{Group: state.GlobalScope, Reason: "bad AMI?", Who: "alice", Since: now0}
	for _, tc := range []struct {
		name   string
		record state.Rollout
		inject bool // the lock is written right before the Preparing write; else it is in the store from the start
	}{
		{"written right before the Preparing write", state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew,
			PreviousImageID: amiOld, DetectedAt: now0.Add(-time.Hour)}, true},
		{"durable before a Preparing record's look that read no pause", state.Rollout{Phase: state.PhasePreparing,
			TargetImageID: amiNew, PreviousImageID: amiOld, DetectedAt: now0.Add(-time.Hour), Strategy: StrategySurge}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			rg := newRig()
			rg.seed0(tc.record)
			if tc.inject {
				rg.o.Store = &pauseBeforePhase{Store: rg.store, phase: state.PhasePreparing, lock: lock}
			} else {
				require.NoError(t, rg.store.PutLock(ctx, lock))
			}
			stale := func(context.Context) (*state.Lock, error) { return nil, nil } // the kept read shows no pause
			_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)),
				AMI: newAMI(), PauseRead: stale})
			require.NoError(t, err)
			require.Empty(t, rg.templates.pointed, "the group is not pointed at the new launch template version while paused")
			stored, err := rg.store.GetRollout(ctx, rg.target.Group)
			require.NoError(t, err)
			require.NotEqual(t, state.PhaseReplacing, stored.Phase)
			require.Contains(t, stored.Reason, "paused")
			require.Contains(t, stored.Reason, "prepare the launch template")
		})
	}
}

// slotsHeld lists the slots ("group/instance") of the rig's cluster budget (ecs/c1); none when it has no record.
func slotsHeld(t *testing.T, s state.Store) []string {
	t.Helper()
	return storetest.SlotsHeld(t, s, "ecs/c1")
}
