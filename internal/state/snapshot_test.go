package state_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

var snapAt = time.Date(2026, 11, 30, 2, 0, 0, 500, time.UTC)

// filledMemory returns a memory store holding one record of every kind, several written more than once.
func filledMemory(t *testing.T) *state.Memory {
	t.Helper()
	ctx := context.Background()
	m := state.NewMemory()
	r := state.Rollout{Group: "prod-nodes", Platform: "ecs", Cluster: "prod", Phase: state.PhaseReplacing,
		TargetImageID: "ami-0b1b2b3b4b5b6b7b8", PreviousImageID: "ami-0a1a2a3a4a5a6a7a8", Source: "/golden/ecs",
		SourceVersion: 7, SourceModified: snapAt, DetectedAt: snapAt.Add(time.Second),
		PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "$Default"}, NewTemplateVersion: "2",
		Strategy: "refresh", Current: &state.Replacement{Step: state.StepInstanceRefresh, StepStartedAt: snapAt},
		Refresh: &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "2", PreviousVersion: "1", ID: "ir-1", Status: "InProgress",
			StartedAt: snapAt},
		Replaced: []string{"i-0"}, Steps: 5, Instances: 4, OnTarget: 1, RollbackFrom: "ami-0c", ApprovedImage: "ami-0b1b2b3b4b5b6b7b8",
		ApprovedBy: "alice", LeaseOwner: "replica-1", LeaseExpires: snapAt.Add(time.Minute), UpdatedAt: snapAt}
	r, err := m.PutRollout(ctx, r)
	require.NoError(t, err)
	_, err = m.PutRollout(ctx, r)
	require.NoError(t, err)
	_, err = m.PutRollout(ctx, state.Rollout{Group: "batch", Platform: "ecs", Phase: state.PhaseCompleted})
	require.NoError(t, err)
	h, err := m.PutHook(ctx, state.Hook{Token: "tok-1", Group: "prod-nodes", HookName: "drain", InstanceID: "i-old",
		Transition: "autoscaling:EC2_INSTANCE_TERMINATING", State: state.HookDraining, ReceivedAt: snapAt})
	require.NoError(t, err)
	h.State, h.Result, h.CompletedAt = state.HookCompleted, "CONTINUE", snapAt.Add(time.Minute)
	_, err = m.PutHook(ctx, h)
	require.NoError(t, err)
	// Appended out of time order on purpose: the snapshot keeps append order.
	require.NoError(t, m.AppendHistory(ctx, state.HistoryEntry{Group: "prod-nodes", At: snapAt.Add(time.Hour), Event: "completed",
		PreviousImage: "ami-0a", NewImage: "ami-0b"}))
	require.NoError(t, m.AppendHistory(ctx, state.HistoryEntry{Group: "prod-nodes", At: snapAt, Event: "detected",
		PreviousImage: "ami-0a", NewImage: "ami-0b", Source: "/golden/ecs", SourceVersion: 7}))
	require.NoError(t, m.AppendHistory(ctx, state.HistoryEntry{Group: "batch", At: snapAt, Event: "detected"}))
	require.NoError(t, m.PutLock(ctx, state.Lock{Reason: "incident 4711", Who: "alice", Since: snapAt}))
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "batch", Reason: "game day", Who: "bob", Since: snapAt, Until: snapAt.Add(2 * time.Hour)}))
	_, err = m.MarkEvent(ctx, "evt-1", snapAt.Add(24*time.Hour))
	require.NoError(t, err)
	_, err = m.MarkEvent(ctx, "evt-2", time.Time{})
	require.NoError(t, err)
	return m
}

func TestSnapshotRoundTripKeepsEveryRecordAndVersion(t *testing.T) {
	ctx := context.Background()
	orig := filledMemory(t)
	var buf bytes.Buffer
	require.NoError(t, orig.Save(&buf))

	loaded, err := state.LoadMemory(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)

	wantRollouts, err := orig.ListRollouts(ctx)
	require.NoError(t, err)
	gotRollouts, err := loaded.ListRollouts(ctx)
	require.NoError(t, err)
	require.Equal(t, wantRollouts, gotRollouts)
	require.Equal(t, int64(2), gotRollouts[1].Version, "version kept")

	wantHook, err := orig.GetHook(ctx, "tok-1")
	require.NoError(t, err)
	gotHook, err := loaded.GetHook(ctx, "tok-1")
	require.NoError(t, err)
	require.Equal(t, wantHook, gotHook)

	for _, g := range []string{"prod-nodes", "batch"} {
		want, err := orig.History(ctx, g)
		require.NoError(t, err)
		got, err := loaded.History(ctx, g)
		require.NoError(t, err)
		require.Equal(t, want, got, g)
	}

	wantLocks, err := orig.ListLocks(ctx)
	require.NoError(t, err)
	gotLocks, err := loaded.ListLocks(ctx)
	require.NoError(t, err)
	require.Equal(t, wantLocks, gotLocks)

	for _, id := range []string{"evt-1", "evt-2"} {
		first, err := loaded.MarkEvent(ctx, id, time.Time{})
		require.NoError(t, err)
		require.False(t, first, "event %s already processed", id)
	}

	var again bytes.Buffer
	require.NoError(t, loaded.Save(&again))
	require.Equal(t, buf.String(), again.String(), "a loaded snapshot saves byte for byte the same")
}

func TestSnapshotLoadedStoreContinuesConditionalWritesFromTheSavedVersion(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	require.NoError(t, filledMemory(t).Save(&buf))
	loaded, err := state.LoadMemory(&buf)
	require.NoError(t, err)

	r, err := loaded.GetRollout(ctx, "prod-nodes")
	require.NoError(t, err)
	stale := r
	stale.Version--
	_, err = loaded.PutRollout(ctx, stale)
	require.ErrorIs(t, err, state.ErrConflict)
	next, err := loaded.PutRollout(ctx, r)
	require.NoError(t, err)
	require.Equal(t, r.Version+1, next.Version)
}

func TestSnapshotOfAnEmptyStoreLoads(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, state.NewMemory().Save(&buf))
	m, err := state.LoadMemory(&buf)
	require.NoError(t, err)
	rs, err := m.ListRollouts(context.Background())
	require.NoError(t, err)
	require.Empty(t, rs)
}

func TestLoadMemoryRejects(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"not JSON", `rollouts:`, "reading state snapshot"},
		{"another document", `{"groups":[]}`, `format ""`},
		{"another version", `{"format":"patch-agent/state-snapshot","version":2}`, "version 2"},
		{"rollout without group", `{"format":"patch-agent/state-snapshot","version":1,"rollouts":[{"phase":"Idle"}]}`, "rollout 0 has no group"},
		{"duplicate rollout", `{"format":"patch-agent/state-snapshot","version":1,"rollouts":[{"group":"a"},{"group":"a"}]}`, "rollout of a appears twice"},
		{"hook without token", `{"format":"patch-agent/state-snapshot","version":1,"hooks":[{"group":"a"}]}`, "lifecycle action 0 has no token"},
		{"history without group", `{"format":"patch-agent/state-snapshot","version":1,"history":[{"event":"detected"}]}`, "history entry 0 has no group"},
		{"duplicate global lock", `{"format":"patch-agent/state-snapshot","version":1,"locks":[{"reason":"a"},{"reason":"b"}]}`, "global lock appears twice"},
		{"event without id", `{"format":"patch-agent/state-snapshot","version":1,"events":[{}]}`, "event marker 0 has no id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := state.LoadMemory(strings.NewReader(tc.doc))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestReplaceSnapshotRecordsTakesEveryRecordOfTheOtherStoreAndKeepsItsDrainMarks(t *testing.T) {
	ctx := context.Background()
	m := state.NewMemory()
	_, err := m.PutRollout(ctx, state.Rollout{Group: "gone", Platform: "ecs", Phase: state.PhaseReplacing})
	require.NoError(t, err)
	_, err = m.PutWorkflow(ctx, state.Workflow{Cluster: "gone-cluster"})
	require.NoError(t, err)
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "gone", Reason: "old pause"}))
	require.NoError(t, m.PutDrainMark(ctx, state.DrainMark{InstanceID: "i-draining", Group: "prod-nodes"}))

	from := filledMemory(t)
	_, err = from.PutWorkflow(ctx, state.Workflow{Cluster: "prod"})
	require.NoError(t, err)
	var want bytes.Buffer
	require.NoError(t, from.Save(&want))
	m.ReplaceSnapshotRecords(from)

	var got bytes.Buffer
	require.NoError(t, m.Save(&got))
	require.Equal(t, want.String(), got.String(), "m holds exactly from's records, versions included")
	marks, err := m.ListDrainMarks(ctx)
	require.NoError(t, err)
	require.Len(t, marks, 1, "a snapshot holds no drain mark: m keeps its own")

	r, err := m.GetRollout(ctx, "prod-nodes")
	require.NoError(t, err)
	_, err = m.PutRollout(ctx, r)
	require.NoError(t, err, "conditional writes continue from the versions taken")
	fromR, err := from.GetRollout(ctx, "prod-nodes")
	require.NoError(t, err)
	require.Equal(t, r.Version, fromR.Version, "from is left as it was")
}
