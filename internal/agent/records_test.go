package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// readCounting counts the rollout record reads of a store: listings (ListRollouts) and single reads
// (GetRollout).
type readCounting struct {
	state.Store
	mu          sync.Mutex
	lists, gets int
}

func (s *readCounting) ListRollouts(ctx context.Context) ([]state.Rollout, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Store.ListRollouts(ctx)
}

func (s *readCounting) GetRollout(ctx context.Context, group string) (state.Rollout, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	return s.Store.GetRollout(ctx, group)
}

// take returns the reads counted since the last take.
func (s *readCounting) take() (lists, gets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lists, gets = s.lists, s.gets
	s.lists, s.gets = 0, 0
	return lists, gets
}

// recordsWorld is one group "g" on ImageA whose store counts rollout reads, after one full pass.
func recordsWorld(t *testing.T, tags map[string]string) (*testworld.World, *readCounting) {
	t.Helper()
	store := &readCounting{Store: state.NewMemory()}
	w, err := testworld.Build(testworld.Spec{Store: store, Groups: []testworld.GroupSetup{{Name: "g", Cluster: "c", Parameter: "/golden/g",
		Min: 2, Max: 3, Desired: 2, Tags: tags}}})
	require.NoError(t, err)
	require.NoError(t, w.Agent.Reconcile(context.Background()))
	store.take()
	return w, store
}

// parameterChanged publishes image on g's parameter and hands the agent its Parameter Store Change: a look
// at g alone (not a full pass).
func parameterChanged(t *testing.T, w *testworld.World, id, image string) {
	t.Helper()
	w.RegisterAMI(image)
	w.Account.PutParameter("/golden/g", image)
	disp, err := w.Agent.Handle(context.Background(), events.Event{Kind: events.KindParameterChange, ID: id,
		Parameter: &events.ParameterChange{Name: "/golden/g", Operation: "Update"}})
	require.NoError(t, err)
	require.Equal(t, events.Done, disp)
}

// wokenLook hands the agent a wake-up naming g and runs the look it asks for.
func wokenLook(t *testing.T, w *testworld.World) {
	t.Helper()
	ctx := context.Background()
	disp, err := w.Agent.Handle(ctx, events.Event{Kind: events.KindWakeUp, Group: "g", Wake: &events.WakeUp{Group: "g"}})
	require.NoError(t, err)
	require.Equal(t, events.Done, disp)
	w.Agent.ReconcileWoken(ctx)
}

// A look at a few targets (a parameter change, a wake-up) takes each one's rollout record as this process last
// read or wrote it — no listing of every record, no read — while a full pass (the safety poll) lists them all
// again.
func TestLookAtAFewTargetsReadsNoRolloutRecordTheAgentKeptAndTheSafetyPollListsThemAll(t *testing.T) {
	w, store := recordsWorld(t, nil)
	parameterChanged(t, w, "p1", testworld.ImageB)
	r := w.Rollout(context.Background(), "g")
	require.NotEqual(t, state.PhaseIdle, r.Phase, "the parameter change's look detected the new AMI")
	lists, gets := store.take()
	require.Zero(t, lists, "a look at one target lists no rollout records")
	require.Equal(t, 1, gets, "the only rollout read is the test's own")

	wokenLook(t, w)
	lists, gets = store.take()
	require.Equal(t, [2]int{0, 0}, [2]int{lists, gets}, "a woken look reads no record it kept")

	require.NoError(t, w.Agent.Reconcile(context.Background()))
	lists, _ = store.take()
	require.Equal(t, 1, lists, "the safety poll lists every record again")
	require.Empty(t, w.Checker.Finish())
}

// A kept record that a conditional write proved stale (another writer moved the record: here a second
// replica's write on an Idle record, which carries no lease) is not used again: the write that lost
// (state.ErrConflict) touches nothing, and the next look reads the store and acts on the record as stored.
// Mutant 84 keeps the record after the lost write, and every later look loses again until the safety poll.
func TestKeptRecordIsReadAgainAfterItsConditionalWriteFails(t *testing.T) {
	ctx := context.Background()
	w, store := recordsWorld(t, nil)
	r := w.Rollout(ctx, "g")
	require.Equal(t, state.PhaseIdle, r.Phase)
	r.Warning = "written by another replica"
	other, err := w.Store.PutRollout(ctx, r)
	require.NoError(t, err)

	parameterChanged(t, w, "p1", testworld.ImageB)
	r = w.Rollout(ctx, "g")
	require.Equal(t, state.PhaseIdle, r.Phase, "the detection written on the kept record lost its version condition")
	require.Equal(t, other.Version, r.Version, "nothing was written")
	store.take()

	parameterChanged(t, w, "p2", testworld.ImageB)
	_, gets := store.take()
	require.GreaterOrEqual(t, gets, 1, "the look after the lost write read the record from the store")
	r = w.Rollout(ctx, "g")
	require.NotEqual(t, state.PhaseIdle, r.Phase, "the next look acted on the record as stored")
	require.Equal(t, testworld.ImageB, r.TargetImageID)
	require.Empty(t, w.Checker.Finish())
}

// An operator's write (approve) is seen by the look of the operator wake-up that follows it (Agent.Reread
// first: mutant 85 makes it forget nothing) and by the safety poll (its listing wins over a kept record of an
// older version: mutant 86 keeps the kept one); a woken look without either keeps waiting on the record it
// kept, which only delays the rollout (the approval is not lost).
func TestOperatorWriteIsSeenByTheOperatorWakeUpsLookAndByTheSafetyPoll(t *testing.T) {
	approved := func(t *testing.T, w *testworld.World) state.Rollout {
		t.Helper()
		ctx := context.Background()
		parameterChanged(t, w, "p1", testworld.ImageB)
		r := w.Rollout(ctx, "g")
		for i := 0; i < 3 && !operator.WaitingForApproval(r); i++ {
			wokenLook(t, w) // the AMI gate, then the approval gate
			r = w.Rollout(ctx, "g")
		}
		require.True(t, operator.WaitingForApproval(r), "%s %s", r.Phase, r.Reason)
		_, err := operator.Approve(ctx, w.Store, "g", "", "alice", false, w.Account.Clock().Now())
		require.NoError(t, err)
		wokenLook(t, w)
		r = w.Rollout(ctx, "g")
		require.True(t, operator.WaitingForApproval(r), "a look without a re-read keeps the kept record: %s %s", r.Phase, r.Reason)
		return r
	}
	manual := map[string]string{model.TagApproval: "manual"}
	for _, tc := range []struct {
		name string
		look func(t *testing.T, w *testworld.World)
	}{
		{"operator wake-up", func(t *testing.T, w *testworld.World) {
			w.Agent.Reread("g")
			wokenLook(t, w)
		}},
		{"safety poll", func(t *testing.T, w *testworld.World) {
			w.Account.Clock().Step(time.Second)
			require.NoError(t, w.Agent.Reconcile(context.Background()))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := recordsWorld(t, manual)
			before := approved(t, w)
			tc.look(t, w)
			r := w.Rollout(context.Background(), "g")
			require.False(t, operator.WaitingForApproval(r), "the approval was seen: %s %s", r.Phase, r.Reason)
			require.Greater(t, r.Version, before.Version, "the rollout moved on from the approved record")
			require.Empty(t, w.Checker.Finish())
		})
	}
}
