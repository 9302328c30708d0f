package engine

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
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

// TestPauseWrittenBetweenTheLooksReadAndTheStepsWriteStopsTheStep: for every destructive step of a rollout by
// instance refresh (the launch template version of a Preparing record, StartInstanceRefresh of a recorded intent
// — resumed after a crash too), a pause lock (global or the group's) written after the look read no pause and
// right before the step's own pause check (a strongly consistent read of the lock items) stops the step: no
// launch template version, no instance refresh, no Auto Scaling write, the record not moved past the step, the
// pause on status. Once the pause is lifted, the next look takes the step.
func TestPauseWrittenBetweenTheLooksReadAndTheStepsWriteStopsTheStep(t *testing.T) {
	for _, tc := range []struct {
		name      string
		record    func() state.Rollout
		wantPhase state.Phase
		next      string
	}{
		{"launch template version", func() state.Rollout {
			return state.Rollout{Phase: state.PhasePreparing, Strategy: model.StrategyRefresh, TargetImageID: amiNew, PreviousImageID: amiOld,
				PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, Refresh: &state.RefreshProgress{LaunchingHook: "patch-agent-launch"}}
		}, state.PhasePreparing, "prepare the launch template"},
		{"StartInstanceRefresh resumed after a crash", func() state.Rollout { return refreshing("") }, state.PhaseReplacing, "StartInstanceRefresh"},
	} {
		for _, scope := range []string{state.GlobalScope, "prod"} {
			t.Run(tc.name+"/"+state.Lock{Group: scope}.Scope(), func(t *testing.T) {
				ctx := context.Background()
				rg, f := refreshRig()
				rg.seed0(tc.record())
				ps := &pausingStore{Store: rg.store, armed: true,
					lock: state.Lock{Group: scope, Reason: "incident", Who: "alice", Since: now0}}
				rg.o.Store = ps
				read := func(context.Context) (*state.Lock, error) { return nil, nil } // the look's read: no pause yet
				_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), PauseRead: read})
				require.NoError(t, err)
				require.Positive(t, ps.checks, "the step checked the pause")
				require.Empty(t, f.starts, "no instance refresh started")
				require.Empty(t, groupWrites(rg), "no Auto Scaling write")
				require.Empty(t, rg.templates.pointed)
				stored, err := rg.store.GetRollout(ctx, rg.target.Group)
				require.NoError(t, err)
				require.Equal(t, tc.wantPhase, stored.Phase, "not moved past the step")
				require.Contains(t, stored.Reason, "paused ("+state.Lock{Group: scope}.Scope()+") by alice")
				require.Contains(t, stored.Reason, "next step: "+tc.next)

				// A second look while the pause lasts still takes no step.
				_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), PauseRead: read})
				require.NoError(t, err)
				require.Empty(t, f.starts, "no instance refresh started")

				// Resumed: the next look takes the step.
				require.NoError(t, rg.store.DeleteLock(ctx, scope))
				_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), PauseRead: read})
				require.NoError(t, err)
				require.Len(t, f.starts, 1, "after resume the step is taken")
				require.Empty(t, groupWrites(rg))
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
			TargetImageID: amiNew, PreviousImageID: amiOld, DetectedAt: now0.Add(-time.Hour), Strategy: model.StrategyRefresh}, false},
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
			_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: view(2, false, serving("i-1", amiOld), serving("i-2", amiOld)),
				AMI: newAMI(), PauseRead: stale})
			require.NoError(t, err)
			require.Empty(t, rg.templates.pointed, "the group is not pointed at the new launch template version while paused")
			require.Empty(t, rg.o.AutoScaling.(*fakeRefreshes).starts, "no instance refresh while paused")
			stored, err := rg.store.GetRollout(ctx, rg.target.Group)
			require.NoError(t, err)
			require.NotEqual(t, state.PhaseReplacing, stored.Phase)
			require.Contains(t, stored.Reason, "paused")
			require.Contains(t, stored.Reason, "prepare the launch template")
		})
	}
}
