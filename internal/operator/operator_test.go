package operator_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

const (
	amiA = "ami-0a1a2a3a4a5a6a7a8"
	amiB = "ami-0b1b2b3b4b5b6b7b8"
	amiC = "ami-0c1c2c3c4c5c6c7c8"
	// amiOld is an AMI the group ran long ago (in its history only).
	amiOld = "ami-0d1d2d3d4d5d6d7d8"
)

var now = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// completedOnB is a group rolled from A to B: three instances, all on B.
func completedOnB() state.Rollout {
	return state.Rollout{Group: "prod", Platform: "ecs", Cluster: "c1", Phase: state.PhaseCompleted,
		TargetImageID: amiB, PreviousImageID: amiA, Source: "/golden/ecs", SourceVersion: 4,
		DetectedAt: now.Add(-2 * time.Hour), PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "$Default"},
		NewTemplateVersion: "2", Replaced: []string{"i-1", "i-2", "i-3"}, Steps: 20, Instances: 3, OnTarget: 3,
		UpdatedAt: now.Add(-time.Hour)}
}

// completedOldToA is the history entry of the group's earlier rollout, from amiOld to A.
var completedOldToA = state.HistoryEntry{Group: "prod", At: now.Add(-48 * time.Hour), Event: "completed", PreviousImage: amiOld, NewImage: amiA}

// seed writes rollouts and history entries into a new memory store.
func seed(t *testing.T, rs []state.Rollout, hist ...state.HistoryEntry) *state.Memory {
	t.Helper()
	m := state.NewMemory()
	for _, r := range rs {
		_, err := m.PutRollout(context.Background(), r)
		require.NoError(t, err)
	}
	for _, e := range hist {
		require.NoError(t, m.AppendHistory(context.Background(), e))
	}
	return m
}

func locks(t *testing.T, s state.Store) []state.Lock {
	t.Helper()
	ls, err := s.ListLocks(context.Background())
	require.NoError(t, err)
	return ls
}

func TestPause(t *testing.T) {
	for _, tc := range []struct {
		name          string
		group, reason string
		who           string
		until         time.Time
		want          *state.Lock
		wantErr       string
	}{
		{name: "global pause until resumed", reason: "incident 4711", who: "alice@host",
			want: &state.Lock{Reason: "incident 4711", Who: "alice@host", Since: now}},
		{name: "group pause with an end", group: "prod", reason: "game day", who: "bob", until: now.Add(2 * time.Hour),
			want: &state.Lock{Group: "prod", Reason: "game day", Who: "bob", Since: now, Until: now.Add(2 * time.Hour)}},
		{name: "reason is trimmed", group: "prod", reason: "  freeze \n", who: "bob",
			want: &state.Lock{Group: "prod", Reason: "freeze", Who: "bob", Since: now}},
		{name: "empty reason is refused", reason: " ", who: "alice", wantErr: "a pause needs a reason"},
		{name: "empty who is refused", reason: "x", wantErr: "who paused"},
		{name: "until in the past is refused", reason: "x", who: "alice", until: now.Add(-time.Minute), wantErr: "is not in the future"},
		{name: "until now is refused", reason: "x", who: "alice", until: now, wantErr: "is not in the future"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := state.NewMemory()
			err := operator.Pause(context.Background(), m, tc.group, tc.reason, tc.who, tc.until, now)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Empty(t, locks(t, m), "nothing written")
				return
			}
			require.NoError(t, err)
			require.Equal(t, []state.Lock{*tc.want}, locks(t, m))
		})
	}
}

func TestPauseReplacesThePauseOfTheSameScope(t *testing.T) {
	m := state.NewMemory()
	ctx := context.Background()
	require.NoError(t, operator.Pause(ctx, m, "prod", "first", "alice", time.Time{}, now))
	require.NoError(t, operator.Pause(ctx, m, "prod", "second", "bob", time.Time{}, now.Add(time.Minute)))
	require.Equal(t, []state.Lock{{Group: "prod", Reason: "second", Who: "bob", Since: now.Add(time.Minute)}}, locks(t, m))
}

func TestResume(t *testing.T) {
	global := state.Lock{Reason: "incident", Who: "alice", Since: now}
	group := state.Lock{Group: "prod", Reason: "game day", Who: "bob", Since: now}
	expired := state.Lock{Group: "prod", Reason: "old", Who: "bob", Since: now.Add(-3 * time.Hour), Until: now.Add(-time.Hour)}
	for _, tc := range []struct {
		name      string
		have      []state.Lock
		group     string
		wantLeft  []state.Lock
		notPaused string // the ErrNotPaused message, when expected
	}{
		{name: "global pause deleted, group pause kept", have: []state.Lock{global, group}, wantLeft: []state.Lock{group}},
		{name: "group pause deleted, global pause kept", have: []state.Lock{global, group}, group: "prod", wantLeft: []state.Lock{global}},
		{name: "expired group pause deleted", have: []state.Lock{expired}, group: "prod", wantLeft: []state.Lock{}},
		{name: "nothing paused globally", have: []state.Lock{group}, wantLeft: []state.Lock{group},
			notPaused: "the agent is not paused globally"},
		{name: "group not paused", group: "prod", wantLeft: []state.Lock{}, notPaused: "group prod is not paused"},
		{name: "group not paused but the global pause holds it", have: []state.Lock{global}, group: "prod",
			wantLeft: []state.Lock{global}, notPaused: "the global pause by alice (incident) holds every group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := state.NewMemory()
			ctx := context.Background()
			for _, l := range tc.have {
				require.NoError(t, m.PutLock(ctx, l))
			}
			lifted, err := operator.Resume(ctx, m, tc.group, now)
			if tc.notPaused != "" {
				require.ErrorIs(t, err, operator.ErrNotPaused)
				require.ErrorContains(t, err, tc.notPaused)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.group, lifted.Group, "the lifted lock is the scope's own")
				require.NotEmpty(t, lifted.Who, "returned as it was stored")
			}
			require.Equal(t, tc.wantLeft, locks(t, m))
		})
	}
}

// approvalReason is the reason of a rollout waiting for `patch-agent approve` (lifecycle's startGate).
const approvalReason = "approval: waiting for `patch-agent approve prod` (AMI " + amiC + ")"

func TestApprove(t *testing.T) {
	waiting := completedOnB()
	waiting.Phase, waiting.TargetImageID, waiting.PreviousImageID = state.PhaseWaiting, amiC, amiB
	waiting.Reason = approvalReason
	noTarget := state.Rollout{Group: "prod", Platform: "ecs", Phase: state.PhaseIdle}
	approved := waiting
	approved.ApprovedImage, approved.ApprovedBy = amiC, "alice"
	for _, tc := range []struct {
		name        string
		have        []state.Rollout
		group, who  string
		wantVersion int64
		wantErr     string
		wantIs      error
	}{
		{name: "approves the target AMI", have: []state.Rollout{waiting}, group: "prod", who: "alice", wantVersion: 2},
		{name: "approving again writes nothing", have: []state.Rollout{approved}, group: "prod", who: "alice", wantVersion: 1},
		{name: "no rollout record", group: "prod", who: "alice", wantErr: "no rollout record for group prod", wantIs: state.ErrNotFound},
		{name: "no target AMI yet", have: []state.Rollout{noTarget}, group: "prod", who: "alice", wantErr: "has no target AMI to approve"},
		{name: "who is required", have: []state.Rollout{waiting}, group: "prod", wantErr: "who approved"},
		{name: "group is required", who: "alice", wantErr: "approve needs a group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t, tc.have)
			r, err := operator.Approve(context.Background(), m, tc.group, "", tc.who, false, now)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.wantIs != nil {
					require.ErrorIs(t, err, tc.wantIs)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, amiC, r.ApprovedImage)
			require.Equal(t, "alice", r.ApprovedBy)
			require.Equal(t, tc.wantVersion, r.Version)
			stored, err := m.GetRollout(context.Background(), "prod")
			require.NoError(t, err)
			require.Equal(t, r, stored)
		})
	}
}

// racingStore moves the rollout (as the agent would) just before each of the first `races` PutRollout calls.
type racingStore struct {
	*state.Memory
	races atomic.Int32
	puts  atomic.Int32
}

func (s *racingStore) PutRollout(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	return s.PutRolloutWithHistory(ctx, r, nil)
}

func (s *racingStore) PutRolloutWithHistory(ctx context.Context, r state.Rollout, h []state.HistoryEntry) (state.Rollout, error) {
	s.puts.Add(1)
	if s.races.Add(-1) >= 0 {
		cur, err := s.Memory.GetRollout(ctx, r.Group)
		if err != nil {
			return state.Rollout{}, err
		}
		cur.Steps++
		if _, err := s.Memory.PutRollout(ctx, cur); err != nil {
			return state.Rollout{}, err
		}
	}
	return s.Memory.PutRolloutWithHistory(ctx, r, h)
}

var _ state.Store = (*racingStore)(nil)

func TestApproveRetriesOnceOnConflict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		races   int32
		wantErr bool
	}{
		{name: "one conflict: re-read and written", races: 1},
		{name: "two conflicts: error", races: 2, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			waiting := completedOnB()
			waiting.Phase, waiting.TargetImageID, waiting.Reason = state.PhaseWaiting, amiC, approvalReason
			s := &racingStore{Memory: seed(t, []state.Rollout{waiting})}
			s.races.Store(tc.races)
			r, err := operator.Approve(context.Background(), s, "prod", "", "alice", false, now)
			require.Equal(t, int32(2), s.puts.Load())
			if tc.wantErr {
				require.ErrorIs(t, err, state.ErrConflict)
				require.ErrorContains(t, err, "changed twice")
				hist, err := s.History(context.Background(), "prod")
				require.NoError(t, err)
				for _, e := range hist {
					require.NotEqual(t, operator.HistoryApproved, e.Event, "a lost write leaves no approval in the history")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, amiC, r.ApprovedImage)
			require.Equal(t, waiting.Steps+1, r.Steps, "the agent's move is kept")
		})
	}
}

func TestRollback(t *testing.T) {
	completed := completedOnB()
	halted := completedOnB()
	halted.Phase, halted.TargetImageID, halted.PreviousImageID = state.PhaseHalted, amiC, amiB
	halted.Reason = "failed: drain of i-4 did not finish within 30m0s"
	halted.Strategy = "surge" // an older agent's rollout, halted at its drain
	halted.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4"}
	halted.OnTarget = 1
	replacing := completedOnB()
	replacing.Phase, replacing.TargetImageID = state.PhaseReplacing, amiC
	replacing.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4"}
	preparing := completedOnB()
	preparing.Phase, preparing.TargetImageID = state.PhasePreparing, amiC
	waiting := completedOnB()
	waiting.Phase, waiting.TargetImageID, waiting.PreviousImageID = state.PhaseWaiting, amiC, amiB
	noPrevious := completedOnB()
	noPrevious.PreviousImageID = ""
	completedHist := []state.HistoryEntry{
		{Group: "prod", At: now.Add(-10 * time.Hour), Event: "completed", PreviousImage: amiOld, NewImage: amiA},
		{Group: "prod", At: now.Add(-2 * time.Hour), Event: "detected", PreviousImage: amiA, NewImage: amiB},
		{Group: "prod", At: now.Add(-time.Hour), Event: "completed", PreviousImage: amiA, NewImage: amiB},
	}
	for _, tc := range []struct {
		name      string
		have      state.Rollout
		hist      []state.HistoryEntry
		to, who   string
		wantFrom  string
		wantTo    string
		wantErr   string
		wantErrIs error
	}{
		{name: "completed: back to the AMI before, from history", have: completed, hist: completedHist, who: "alice", wantFrom: amiB, wantTo: amiA},
		{name: "completed without history: back to the record's previous AMI", have: completed, who: "alice", wantFrom: amiB, wantTo: amiA},
		{name: "explicit AMI", have: completed, hist: completedHist, to: amiOld, who: "alice", wantFrom: amiB, wantTo: amiOld},
		{name: "halted: back to the AMI the group ran, not the one before it", have: halted, hist: completedHist, who: "alice", wantFrom: amiC, wantTo: amiB},
		{name: "waiting at a gate", have: waiting, hist: completedHist, who: "alice", wantFrom: amiC, wantTo: amiB},
		{name: "refused while replacing", have: replacing, who: "alice",
			wantErr: "rollout in progress at Replacing/Draining: let it finish (or halt) first; to hold it where it is: patch-agent pause --group prod --reason '...'"},
		{name: "refused while preparing", have: preparing, who: "alice", wantErr: "rollout in progress at Preparing/-"},
		{name: "refused without a previous AMI", have: noPrevious, who: "alice", wantErr: "no previous AMI is recorded for group prod"},
		{name: "refused to the current target", have: completed, to: amiB, who: "alice", wantErr: "already targets " + amiB},
		{name: "refused to something that is not an AMI", have: completed, to: "latest", who: "alice", wantErr: `"latest" is not an AMI id`},
		{name: "refused without who", have: completed, wantErr: "who asked"},
		{name: "refused without a rollout record", have: state.Rollout{Group: "other", Phase: state.PhaseIdle}, who: "alice",
			wantErr: "no rollout record for group prod", wantErrIs: state.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := seed(t, []state.Rollout{tc.have}, tc.hist...)
			before, _ := m.GetRollout(ctx, "prod")
			r, err := operator.Rollback(ctx, m, "prod", tc.to, tc.who, false, now)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				if tc.wantErrIs != nil {
					require.ErrorIs(t, err, tc.wantErrIs)
				}
				after, _ := m.GetRollout(ctx, "prod")
				require.Equal(t, before, after, "record untouched")
				hist, err := m.History(ctx, "prod")
				require.NoError(t, err)
				require.Len(t, hist, len(tc.hist), "no history entry")
				return
			}
			require.NoError(t, err)
			want := before
			want.RollbackFrom, want.PreviousImageID, want.TargetImageID = tc.wantFrom, tc.wantFrom, tc.wantTo
			want.Phase, want.Reason, want.Source, want.SourceVersion, want.DetectedAt = state.PhaseDetected, "", "manual rollback by alice", 0, now
			want.Current, want.Strategy, want.Replaced, want.NewTemplateVersion, want.PreviousTemplate = nil, "", nil, "", nil
			want.ApprovedImage, want.ApprovedBy = tc.wantTo, "alice"
			want.OnTarget, want.Steps, want.UpdatedAt, want.Version = 0, before.Steps+1, now, before.Version+1
			require.Equal(t, want, r)
			stored, err := m.GetRollout(ctx, "prod")
			require.NoError(t, err)
			require.Equal(t, want, stored)
			hist, err := m.History(ctx, "prod")
			require.NoError(t, err)
			require.Equal(t, state.HistoryEntry{Group: "prod", At: now, Event: operator.HistoryManualRollback,
				PreviousImage: tc.wantFrom, NewImage: tc.wantTo, Detail: "alice"}, hist[len(hist)-1])
		})
	}
}

func TestRollbackRetriesOnceOnConflictAndDecidesAgain(t *testing.T) {
	s := &racingStore{Memory: seed(t, []state.Rollout{completedOnB()})}
	s.races.Store(1)
	r, err := operator.Rollback(context.Background(), s, "prod", "", "alice", false, now)
	require.NoError(t, err)
	require.Equal(t, amiA, r.TargetImageID)
	require.Equal(t, completedOnB().Steps+2, r.Steps, "the agent's move and the rollback")
}

func TestPlanRollbackSaysWhatWillHappenWithoutWriting(t *testing.T) {
	ctx := context.Background()
	halted := completedOnB()
	halted.Phase, halted.TargetImageID, halted.PreviousImageID, halted.OnTarget = state.PhaseHalted, amiC, amiB, 1
	halted.Strategy = "surge" // an older agent's rollout, halted at its drain
	halted.Current = &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4"}
	m := seed(t, []state.Rollout{halted})
	p, err := operator.PlanRollback(ctx, m, "prod", "", false)
	require.NoError(t, err)
	require.Equal(t, operator.RollbackPlan{Group: "prod", Platform: "ecs", Phase: state.PhaseHalted, From: amiC, To: amiB, Instances: 3, OnFrom: 1, Source: halted.Source,
		Halted: &state.Replacement{Step: state.StepDraining, OldInstanceID: "i-4"}}, p)
	r, err := m.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Version)
}

// failingHistory fails every write that carries history entries, as a throttled DynamoDB transaction would.
type failingHistory struct{ *state.Memory }

func (failingHistory) PutRolloutWithHistory(context.Context, state.Rollout, []state.HistoryEntry) (state.Rollout, error) {
	return state.Rollout{}, errors.New("throttled")
}

// The record and its history entry are one write: when it fails, neither the rollback nor its entry exists.
func TestRollbackWhoseWriteFailsLeavesNeitherRecordNorHistory(t *testing.T) {
	ctx := context.Background()
	s := failingHistory{seed(t, []state.Rollout{completedOnB()})}
	_, err := operator.Rollback(ctx, s, "prod", "", "alice", false, now)
	require.ErrorContains(t, err, "throttled")
	r, err := s.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, completedOnB().TargetImageID, r.TargetImageID, "the rollout is not started")
	hist, err := s.History(ctx, "prod")
	require.NoError(t, err)
	for _, e := range hist {
		require.NotEqual(t, operator.HistoryManualRollback, e.Event)
	}
}

// TestCheckNotPausedNamesTheActivePauseOfTheScopeOnly: an active lock of the same scope is named (who, since,
// until, why); another scope's lock or an expired one is not in the way. Pause stores since at second precision.
func TestCheckNotPausedNamesTheActivePauseOfTheScopeOnly(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	require.NoError(t, operator.Pause(ctx, m, "prod", "load test", "alice", now.Add(2*time.Hour), now.Add(1500*time.Millisecond)))
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "old", Reason: "done", Who: "bob", Since: now.Add(-2 * time.Hour), Until: now.Add(-time.Hour)}))
	for _, l := range locks(t, m) {
		if l.Group == "prod" {
			require.Equal(t, now.Add(time.Second), l.Since, "since at second precision")
		}
	}

	err := operator.CheckNotPaused(ctx, m, "prod", now.Add(time.Minute))
	require.ErrorIs(t, err, operator.ErrAlreadyPaused)
	require.EqualError(t, err, "group prod is already paused by alice since "+now.Add(time.Second).UTC().Format(time.RFC3339)+
		" until "+now.Add(2*time.Hour).UTC().Format(time.RFC3339)+": load test")
	require.NoError(t, operator.CheckNotPaused(ctx, m, state.GlobalScope, now), "another scope")
	require.NoError(t, operator.CheckNotPaused(ctx, m, "old", now), "an expired pause")
	require.NoError(t, operator.CheckNotPaused(ctx, m, "prod", now.Add(3*time.Hour)), "once it ended")
}

// laggingLocks is a store whose lock listing does not show the locks yet (DynamoDB's index is eventually
// consistent: a pause taken a moment ago may be missing from ListLocks).
type laggingLocks struct{ state.Store }

func (laggingLocks) ListLocks(context.Context) ([]state.Lock, error) { return nil, nil }

// A resume right after a pause, before the lock index shows the pause: the pause is lifted and reported as
// lifted, with its author. A resume that trusted the listing would answer "nothing to resume" and leave the
// pause in place while the operator believed it lifted.
func TestResumeRightAfterAPauseLiftsItEvenBeforeTheLockListingShowsIt(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	require.NoError(t, m.PutLock(ctx, state.Lock{Reason: "incident", Who: "alice", Since: now}))
	lifted, err := operator.Resume(ctx, laggingLocks{m}, state.GlobalScope, now)
	require.NoError(t, err)
	require.Equal(t, "alice", lifted.Who)
	require.Equal(t, "incident", lifted.Reason)
	require.Empty(t, locks(t, m), "the pause is gone")
}

// resume tells only of pauses that hold now: an expired global lock is not "the global pause that holds every
// group", and a plain resume with only group pauses in place names them.
func TestResumeSaysOnlyWhatHoldsNow(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	require.NoError(t, m.PutLock(ctx, state.Lock{Reason: "brief", Who: "alice", Since: now.Add(-2 * time.Hour), Until: now.Add(-time.Hour)}))
	_, err := operator.Resume(ctx, m, "prod", now)
	require.ErrorIs(t, err, operator.ErrNotPaused)
	require.NotContains(t, err.Error(), "holds every group", "the global lock ended an hour ago")

	m = state.NewMemory()
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "prod", Reason: "game day", Who: "bob", Since: now}))
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "old", Reason: "done", Who: "bob", Since: now.Add(-2 * time.Hour), Until: now.Add(-time.Hour)}))
	_, err = operator.Resume(ctx, m, state.GlobalScope, now)
	require.ErrorIs(t, err, operator.ErrNotPaused)
	require.ErrorContains(t, err, "group pauses hold prod")
}

// rolledBackFromB is a group whose rollout from A to B the agent rolled back: the record keeps B as its
// target (so that B is not rolled again) while its three instances run A again, which status shows.
func rolledBackFromB() state.Rollout {
	r := completedOnB()
	r.Phase, r.Reason, r.OnTarget, r.RollbackFrom = state.PhaseRolledBack, "rolled back after: launch abandoned", 0, amiB
	return r
}

func TestPlanRollbackAfterAnAutomaticRollbackSeesTheAMIStatusShows(t *testing.T) {
	ctx := context.Background()
	detected := state.HistoryEntry{Group: "prod", At: now.Add(-2 * time.Hour), Event: "detected", PreviousImage: amiA, NewImage: amiB}
	t.Run("the default is the AMI the group is back on, refused", func(t *testing.T) {
		m := seed(t, []state.Rollout{rolledBackFromB()}, detected)
		_, err := operator.PlanRollback(ctx, m, "prod", "", false)
		require.EqualError(t, err, "group prod already targets "+amiA+" (rolled back from "+amiB+"): nothing to roll back; name another AMI with --to")
	})
	t.Run("the AMI it rolled back from goes again only by retry, through the gates", func(t *testing.T) {
		m := seed(t, []state.Rollout{rolledBackFromB()}, detected)
		_, err := operator.PlanRollback(ctx, m, "prod", amiB, false)
		require.EqualError(t, err, amiB+" is the AMI the rollout of prod rolled back from: a rollback would roll it again past every gate; "+
			"once its cause is fixed, patch-agent retry prod rolls it through them")
	})
	t.Run("an explicit other AMI leaves the AMI the instances run", func(t *testing.T) {
		m := seed(t, []state.Rollout{rolledBackFromB()}, detected)
		p, err := operator.PlanRollback(ctx, m, "prod", "ami-0c1c2c3c4c5c6c7c8", true)
		require.NoError(t, err)
		require.Equal(t, amiA, p.From)
		require.Equal(t, "ami-0c1c2c3c4c5c6c7c8", p.To)
		require.Equal(t, 3, p.OnFrom, "status counts the three instances on A")
	})
	t.Run("a pending retry is named", func(t *testing.T) {
		m := seed(t, []state.Rollout{rolledBackFromB()}, detected)
		_, _, err := operator.Retry(ctx, m, "prod", "alice", now)
		require.NoError(t, err)
		_, err = operator.PlanRollback(ctx, m, "prod", "", false)
		require.ErrorContains(t, err, "group prod: a retry of "+amiB+" is requested; ")
		require.NotContains(t, err.Error(), "no target AMI")
	})
}
