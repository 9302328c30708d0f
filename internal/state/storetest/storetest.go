// Package storetest is the conformance suite every state.Store implementation must pass: missing records,
// conditional writes on the version (create, stale version, concurrent writers from one read), round trips of
// every field, listing order and history order, rollout writes with their history entries (atomic: a lost
// race leaves no entry), pause locks (put, replace, delete, list order) and
// processed-event markers (first, duplicate, concurrent markers of one id). The memory store runs it in state's unit tests and the
// DynamoDB store runs it against kumo, so code tested on the memory store behaves the same in production.
package storetest

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Writers is how many goroutines race to write the same record from the same read.
const Writers = 10

// Run runs the suite. newStore must return a new, empty store for each subtest (it may register cleanups on
// the subtest's t).
func Run(t *testing.T, newStore func(t *testing.T) state.Store) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, s state.Store)
	}{
		{"missing rollout is ErrNotFound", testMissingRollout},
		{"missing hook is ErrNotFound", testMissingHook},
		{"rollout put at version 0 creates version 1", testRolloutCreate},
		{"rollout put at version 0 over an existing record conflicts and changes nothing", testRolloutCreateTwice},
		{"rollout put with a stale version conflicts and changes nothing", testRolloutStale},
		{"rollout put with a version of a missing record conflicts and creates nothing", testRolloutPhantomVersion},
		{"rollout writers racing from one read: exactly one wins", testRolloutRace},
		{"rollout round trip keeps every field", testRolloutRoundTrip},
		{"rollout round trip keeps zero fields zero", testRolloutZeroRoundTrip},
		{"rollout returned by the store does not share memory with it", testRolloutNoAliasing},
		{"hook put at version 0 creates version 1", testHookCreate},
		{"hook put with a stale version conflicts and changes nothing", testHookStale},
		{"hook writers racing from one read: exactly one wins", testHookRace},
		{"hook round trip keeps every field", testHookRoundTrip},
		{"list of no rollouts is empty", testListEmpty},
		{"list returns every rollout sorted by group and nothing else", testListSorted},
		{"rollouts and locks listed together are what ListRollouts and ListLocks return", testListRolloutsAndLocks},
		{"history of an unknown group is empty", testHistoryEmpty},
		{"history is per group, oldest first, every field kept", testHistoryOrder},
		{"history is sorted by time, not by append order; same instant in append order", testHistoryOutOfOrder},
		{"hook round trip keeps the Completing state and its owner", testHookCompletingRoundTrip},
		{"rollout with history: record and entries written together", testRolloutWithHistory},
		{"rollout with history at a stale version or over an existing record: conflict, no entry", testRolloutWithHistoryConflict},
		{"rollout with history, writers racing from one read: one wins, only its entries exist", testRolloutWithHistoryRace},
		{"rollout with history rejects entries of another group and writes nothing", testRolloutWithHistoryOtherGroup},
		{"rollout write unless paused: a holding global or group lock stops it, expired or other locks do not", testGuardedWrite},
		{"list of no locks is empty", testLocksEmpty},
		{"lock round trip keeps every field", testLockRoundTrip},
		{"lock put replaces, delete removes, list is global first then by group", testLocksPutReplaceDeleteList},
		{"lock delete of a missing lock is not an error", testLockDeleteMissing},
		{"lock lift returns the lock it removed, in the same request", testLiftLockReturnsTheLockItRemoved},
		{"lock put-if-absent writes only where no lock holds, and returns the one that does", testPutLockIfAbsent},
		{"locks and rollouts of one group do not see each other", testLocksBesideRollouts},
		{"event marked first once, then duplicate", testMarkEvent},
		{"event markers racing on one id: exactly one first", testMarkEventRace},
		{"drain marks: put replaces, delete removes, list by instance id and nothing else", testDrainMarks},
		{"cluster budget: claims up to the budget, stale slots dropped, racing claims never exceed it", testClusterBudget},
		{"drain write-ahead with its slot: written together, or nothing on a pause or either lost race; a fenced give-back", testGuardedWriteWithClaim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// at is a fixed instant with nanoseconds in a zone other than UTC: stores must keep the instant (compared
// with time.Time.Equal), not necessarily the zone.
var at = time.Date(2026, 3, 14, 15, 9, 26, 535897932, time.FixedZone("UTC+2", 2*3600))

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// fullRollout returns a rollout with every field set (requireAllFieldsSet proves it), Version 0.
func fullRollout(group string) state.Rollout {
	return state.Rollout{
		Group:           group,
		Platform:        "ecs",
		Cluster:         "prod-cluster",
		Phase:           state.PhaseReplacing,
		Reason:          "replacing 2 of 3 outdated instances",
		TargetImageID:   "ami-0123456789abcdef0",
		PreviousImageID: "ami-0fedcba9876543210",
		Source:          "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id",
		SourceVersion:   42,
		SourceModified:  at.Add(-72 * time.Hour),
		DetectedAt:      at.Add(-time.Hour),
		PreviousTemplate: &state.LaunchTemplateRef{
			ID:             "lt-0abc",
			Name:           "prod-nodes",
			Version:        "$Default",
			MixedInstances: true,
		},
		NewTemplateVersion: "7",
		Trigger:            "max-instance-age",
		Current: &state.Replacement{
			Step:          state.StepDraining,
			OldInstanceID: "i-0old",
			StepStartedAt: at.Add(-5 * time.Minute),
		},
		Replaced:       []string{"i-0first"},
		Steps:          9,
		Warning:        "no terminating lifecycle hook",
		Strategy:       "drain-first",
		Instances:      4,
		OnTarget:       1,
		RollbackFrom:   "ami-0fedcba9876543210",
		SetBacks:       2,
		SetBackBy:      "launch template lt-0abc version 7 by arn:aws:sts::123456789012:assumed-role/TerraformApply/ci",
		ApprovedImage:  "ami-0123456789abcdef0",
		ApprovedBy:     "alice@example.com",
		SkipSoakImage:  "ami-0123456789abcdef0",
		SkipSoakReason: "CVE-2026-1234 fix",
		LeaseOwner:     "patch-agent-7d9f-abcde",
		LeaseExpires:   at.Add(30 * time.Second),
		UpdatedAt:      at,
		Refresh: &state.RefreshProgress{LaunchTemplateID: "lt-0abc", LaunchTemplateName: "prod-nodes", MixedInstances: true,
			Version: "7", PreviousVersion: "6", MinHealthyPercentage: 100, MaxHealthyPercentage: 134, BatchSize: 1, Desired: 3,
			InstanceWarmup: 60, Alarms: []string{"p99-latency"}, LaunchingHook: "patch-agent-launch", TerminatingHook: "patch-agent-drain", HooksReadAt: at.Add(-4 * time.Minute), ReplaceProtected: true, ReplaceAll: true, SpacingDelay: 300, StartedAt: at.Add(-3 * time.Minute),
			ID: "08b91cf7-8fa6-48af-b6a6-d227f40f1b9b", Status: "InProgress", StatusReason: "Replacing instances: 1 of 3 updated.",
			PercentageComplete: 33, InstancesToUpdate: 2, Cancel: "maintenance window closed", Rollback: true, ByAPI: true,
			RequestedBy: "alice", Halt: "alarm p99-latency in ALARM", GroupOnVersion: true, CanaryPercentage: 34, CanaryBake: 1800},
		Nodegroup: &state.NodegroupProgress{Cluster: "prod", Name: "workers", AMIType: "CUSTOM", KubernetesVersion: "1.31", TargetVersion: "1.32",
			TargetRelease: "1.31.7-20250610", PreviousRelease: "1.31.7-20250101", LaunchTemplateID: "lt-0abc", LaunchTemplateName: "workers",
			PreviousTemplateVersion: "3", TargetTemplateVersion: "4", UpdateToken: "patch-agent-0a1b", UpdateID: "u-0123",
			UpdateStatus: "Failed", UpdateErrors: []string{"PodEvictionFailure: max retries"}, Rollback: true, RequestedBy: "alice",
			MaxUnavailable: 2, MaxUnavailablePercentage: 33},
	}
}

func fullHook(token string) state.Hook {
	return state.Hook{
		Token:         token,
		Group:         "prod-nodes",
		HookName:      "patch-agent-terminate",
		InstanceID:    "i-0old",
		Transition:    "autoscaling:EC2_INSTANCE_TERMINATING",
		State:         state.HookCompleted,
		Result:        "CONTINUE",
		Decided:       "CONTINUE",
		Note:          "drained 4 tasks",
		ReceivedAt:    at.Add(-10 * time.Minute),
		LastHeartbeat: at.Add(-time.Minute),
		CompletedAt:   at,
		Owner:         "patch-agent-7d9f-abcde",
		OwnerExpires:  at.Add(30 * time.Second),
		Confirmed:     true,
		AgentDrained:  true,
		WaitState:     "Terminating:Wait",
		Adopted:       true,
		DrainHeldAt:   at.Add(-2 * time.Minute),
		DrainFrom:     at.Add(-5 * time.Minute),

		HeartbeatTimeout: 5 * time.Minute,
	}
}

func testDrainMarks(t *testing.T, s state.Store) {
	c := ctx(t)
	empty, err := s.ListDrainMarks(c)
	require.NoError(t, err)
	require.Empty(t, empty)
	b := state.DrainMark{InstanceID: "i-0b", Group: "prod-nodes", Platform: "ecs", Cluster: "prod", Token: "tok-1", At: at}
	requireAllFieldsSet(t, b)
	a := b
	a.InstanceID, a.Token = "i-0a", "tok-2"
	require.NoError(t, s.PutDrainMark(c, b))
	require.NoError(t, s.PutDrainMark(c, a))
	b.Token, b.At = "tok-3", at.Add(time.Minute)
	require.NoError(t, s.PutDrainMark(c, b)) // a newer drain of the same instance replaces its mark
	_, err = s.PutRollout(c, fullRollout("prod-nodes"))
	require.NoError(t, err)
	_, err = s.PutHook(c, fullHook("tok-1"))
	require.NoError(t, err)
	got, err := s.ListDrainMarks(c)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.True(t, got[0].At.Equal(a.At), "at: %s", got[0].At)
	require.True(t, got[1].At.Equal(b.At), "at: %s", got[1].At)
	got[0].At, got[1].At, a.At, b.At = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	require.Equal(t, []state.DrainMark{a, b}, got)
	require.NoError(t, s.DeleteDrainMark(c, "i-0a"))
	require.NoError(t, s.DeleteDrainMark(c, "i-0missing"))
	got, err = s.ListDrainMarks(c)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "i-0b", got[0].InstanceID)
}

// fullLock returns a group lock with every field set.
func fullLock(group string) state.Lock {
	return state.Lock{
		Group:  group,
		Reason: "incident INC-42: hold " + group,
		Who:    "alice@example.com",
		Since:  at.Add(-time.Hour),
		Until:  at.Add(2 * time.Hour),
	}
}

func testMissingRollout(t *testing.T, s state.Store) {
	_, err := s.GetRollout(ctx(t), "no-such-group")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func testMissingHook(t *testing.T, s state.Store) {
	_, err := s.GetHook(ctx(t), "no-such-token")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func testRolloutCreate(t *testing.T, s state.Store) {
	c := ctx(t)
	put, err := s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseDetected})
	require.NoError(t, err)
	require.Equal(t, int64(1), put.Version)

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Version)
	require.Equal(t, state.PhaseDetected, got.Phase)
}

func testRolloutCreateTwice(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseDetected})
	require.NoError(t, err)

	_, err = s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseHalted})
	require.ErrorIs(t, err, state.ErrConflict)

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Version)
	require.Equal(t, state.PhaseDetected, got.Phase)
}

func testRolloutStale(t *testing.T, s state.Store) {
	c := ctx(t)
	v1, err := s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseDetected})
	require.NoError(t, err)
	next := v1
	next.Phase = state.PhasePreparing
	v2, err := s.PutRollout(c, next)
	require.NoError(t, err)
	require.Equal(t, int64(2), v2.Version)

	stale := v1 // read at version 1, written after version 2 exists
	stale.Phase = state.PhaseHalted
	_, err = s.PutRollout(c, stale)
	require.ErrorIs(t, err, state.ErrConflict)

	ahead := v2
	ahead.Version = 7 // a version the store never had
	_, err = s.PutRollout(c, ahead)
	require.ErrorIs(t, err, state.ErrConflict)

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, state.PhasePreparing, got.Phase)
}

func testRolloutPhantomVersion(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseDetected, Version: 3})
	require.ErrorIs(t, err, state.ErrConflict)

	_, err = s.GetRollout(c, "g")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func testRolloutRace(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRollout(c, state.Rollout{Group: "g", Phase: state.PhaseDetected})
	require.NoError(t, err)
	read, err := s.GetRollout(c, "g")
	require.NoError(t, err)

	winners, errs := race(func(i int) (string, error) {
		r := read // every writer decides from the same read
		r.Reason = fmt.Sprintf("writer %d", i)
		_, err := s.PutRollout(c, r)
		return r.Reason, err
	})
	require.Len(t, winners, 1, "exactly one writer must win; errors: %v", errs)
	for _, err := range errs {
		require.ErrorIs(t, err, state.ErrConflict)
	}

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, winners[0], got.Reason)
}

func testRolloutRoundTrip(t *testing.T, s state.Store) {
	c := ctx(t)
	want := fullRollout("prod-nodes")
	requireAllFieldsSet(t, want, "Version")

	put, err := s.PutRollout(c, want)
	require.NoError(t, err)
	want.Version = 1
	requireSameRollout(t, want, put)

	got, err := s.GetRollout(c, "prod-nodes")
	require.NoError(t, err)
	requireSameRollout(t, want, got)

	// An update keeps every field too, and bumps the version once more.
	got.Current.Step = state.StepTerminating
	got.Replaced = append(got.Replaced, "i-0old")
	updated, err := s.PutRollout(c, got)
	require.NoError(t, err)
	got.Version = 2
	requireSameRollout(t, got, updated)
	reread, err := s.GetRollout(c, "prod-nodes")
	require.NoError(t, err)
	requireSameRollout(t, got, reread)
}

func testRolloutZeroRoundTrip(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRollout(c, state.Rollout{Group: "g"})
	require.NoError(t, err)

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	requireSameRollout(t, state.Rollout{Group: "g", Version: 1}, got)
}

func testRolloutNoAliasing(t *testing.T, s state.Store) {
	c := ctx(t)
	in := fullRollout("g")
	put, err := s.PutRollout(c, in)
	require.NoError(t, err)
	in.Current.OldInstanceID = "i-0changed-by-caller"
	in.PreviousTemplate.Version = "99"
	put.Current.Step = "changed-by-caller"
	put.Replaced[0] = "i-0changed-by-caller"

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	got.Current.OldInstanceID = "i-0changed-by-caller"

	again, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	want := fullRollout("g")
	want.Version = 1
	requireSameRollout(t, want, again)
}

func testHookCreate(t *testing.T, s state.Store) {
	c := ctx(t)
	put, err := s.PutHook(c, state.Hook{Token: "tok", State: state.HookDraining})
	require.NoError(t, err)
	require.Equal(t, int64(1), put.Version)

	got, err := s.GetHook(c, "tok")
	require.NoError(t, err)
	require.Equal(t, int64(1), got.Version)
	require.Equal(t, state.HookDraining, got.State)

	_, err = s.PutHook(c, state.Hook{Token: "tok", State: state.HookCompleted})
	require.ErrorIs(t, err, state.ErrConflict, "version 0 must not overwrite an existing hook")
}

func testHookStale(t *testing.T, s state.Store) {
	c := ctx(t)
	v1, err := s.PutHook(c, state.Hook{Token: "tok", State: state.HookDraining})
	require.NoError(t, err)
	next := v1
	next.LastHeartbeat = at
	_, err = s.PutHook(c, next)
	require.NoError(t, err)

	stale := v1
	stale.State = state.HookCompleted
	_, err = s.PutHook(c, stale)
	require.ErrorIs(t, err, state.ErrConflict)

	_, err = s.PutHook(c, state.Hook{Token: "other", Version: 4})
	require.ErrorIs(t, err, state.ErrConflict)
	_, err = s.GetHook(c, "other")
	require.ErrorIs(t, err, state.ErrNotFound)

	got, err := s.GetHook(c, "tok")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, state.HookDraining, got.State)
	require.True(t, got.LastHeartbeat.Equal(at))
}

func testHookRace(t *testing.T, s state.Store) {
	c := ctx(t)
	read, err := s.PutHook(c, state.Hook{Token: "tok", State: state.HookDraining})
	require.NoError(t, err)

	winners, errs := race(func(i int) (string, error) {
		h := read
		h.Note = fmt.Sprintf("writer %d", i)
		h.State = state.HookCompleted
		_, err := s.PutHook(c, h)
		return h.Note, err
	})
	require.Len(t, winners, 1, "exactly one writer must complete the lifecycle action; errors: %v", errs)
	for _, err := range errs {
		require.ErrorIs(t, err, state.ErrConflict)
	}

	got, err := s.GetHook(c, "tok")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, winners[0], got.Note)
}

func testHookRoundTrip(t *testing.T, s state.Store) {
	c := ctx(t)
	want := fullHook("tok-0123")
	requireAllFieldsSet(t, want, "Version")

	put, err := s.PutHook(c, want)
	require.NoError(t, err)
	want.Version = 1
	requireSameHook(t, want, put)

	got, err := s.GetHook(c, "tok-0123")
	require.NoError(t, err)
	requireSameHook(t, want, got)
}

func testListEmpty(t *testing.T, s state.Store) {
	got, err := s.ListRollouts(ctx(t))
	require.NoError(t, err)
	require.Empty(t, got)
}

func testListSorted(t *testing.T, s state.Store) {
	c := ctx(t)
	groups := []string{"m", "c", "x", "a", "k", "b", "z", "e", "q", "d", "y"}
	for _, g := range groups {
		_, err := s.PutRollout(c, fullRollout(g))
		require.NoError(t, err)
	}
	// Other records of the same targets and hooks must not be listed.
	_, err := s.PutHook(c, fullHook("tok"))
	require.NoError(t, err)
	require.NoError(t, s.AppendHistory(c, state.HistoryEntry{Group: "a", At: at, Event: "detected"}))
	require.NoError(t, s.PutLock(c, fullLock("a")))
	require.NoError(t, s.PutLock(c, fullLock(state.GlobalScope)))
	_, err = s.MarkEvent(c, "evt-1", at)
	require.NoError(t, err)

	got, err := s.ListRollouts(c)
	require.NoError(t, err)
	names := make([]string, 0, len(got))
	for _, r := range got {
		names = append(names, r.Group)
		want := fullRollout(r.Group)
		want.Version = 1
		requireSameRollout(t, want, r)
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e", "k", "m", "q", "x", "y", "z"}, names)
}

func testHistoryEmpty(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRollout(c, state.Rollout{Group: "g"}) // a rollout alone is no history
	require.NoError(t, err)

	got, err := s.History(c, "g")
	require.NoError(t, err)
	require.Empty(t, got)
}

func testHistoryOrder(t *testing.T, s state.Store) {
	c := ctx(t)
	entry := func(group, event string, at time.Time) state.HistoryEntry {
		return state.HistoryEntry{
			Group: group, At: at, Event: event,
			PreviousImage: "ami-0old", NewImage: "ami-0new",
			Source: "/golden/ecs/ami", SourceVersion: 5, Detail: event + " by patch-agent",
		}
	}
	requireAllFieldsSet(t, entry("a", "detected", at))
	want := []state.HistoryEntry{
		entry("a", "detected", at),
		entry("a", "halted", at.Add(time.Nanosecond)),
		entry("a", "rolled-back", at.Add(time.Nanosecond)), // same instant: write order
		entry("a", "detected", at.Add(100*time.Millisecond)),
		entry("a", "completed", at.Add(time.Second)),
		entry("a", "detected", at.Add(time.Hour)),
	}
	_, err := s.PutRollout(c, fullRollout("a"))
	require.NoError(t, err)
	for i, e := range want {
		require.NoError(t, s.AppendHistory(c, e))
		require.NoError(t, s.AppendHistory(c, entry("b", fmt.Sprintf("other %d", i), e.At)))
	}

	got, err := s.History(c, "a")
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		require.Truef(t, want[i].At.Equal(got[i].At), "entry %d: at %s, want %s", i, got[i].At, want[i].At)
		w, g := want[i], got[i]
		w.At, g.At = time.Time{}, time.Time{}
		require.Equal(t, w, g, "entry %d", i)
	}

	other, err := s.History(c, "b")
	require.NoError(t, err)
	require.Len(t, other, len(want))
	require.Equal(t, "other 0", other[0].Event)
}

func testHistoryOutOfOrder(t *testing.T, s state.Store) {
	c := ctx(t)
	entry := func(event string, at time.Time) state.HistoryEntry {
		return state.HistoryEntry{Group: "g", At: at, Event: event}
	}
	appended := []state.HistoryEntry{
		entry("third", at.Add(time.Hour)),
		entry("first", at.Add(-time.Hour)),
		entry("second a", at),
		entry("fourth", at.Add(2*time.Hour)),
		entry("second b", at), // same instant as "second a", appended after it
		entry("zeroth", at.Add(-2*time.Hour).UTC()),
	}
	for _, e := range appended {
		require.NoError(t, s.AppendHistory(c, e))
	}

	got, err := s.History(c, "g")
	require.NoError(t, err)
	events := make([]string, 0, len(got))
	for _, e := range got {
		events = append(events, e.Event)
	}
	require.Equal(t, []string{"zeroth", "first", "second a", "second b", "third", "fourth"}, events)
}

func testRolloutWithHistory(t *testing.T, s state.Store) {
	c := ctx(t)
	detected := state.HistoryEntry{Group: "g", At: at, Event: "detected", PreviousImage: "ami-0old", NewImage: "ami-0new",
		Source: "/golden/ecs/ami", SourceVersion: 3, Detail: "new AMI"}
	requireAllFieldsSet(t, detected)
	put, err := s.PutRolloutWithHistory(c, state.Rollout{Group: "g", Phase: state.PhaseDetected}, []state.HistoryEntry{detected})
	require.NoError(t, err)
	require.Equal(t, int64(1), put.Version)

	next := put
	next.Phase = state.PhaseCompleted
	two := []state.HistoryEntry{{Group: "g", At: at.Add(time.Minute), Event: "max-not-restored"},
		{Group: "g", At: at.Add(time.Minute), Event: "completed"}}
	put, err = s.PutRolloutWithHistory(c, next, two)
	require.NoError(t, err)
	require.Equal(t, int64(2), put.Version)
	none, err := s.PutRolloutWithHistory(c, put, nil) // no entries: a plain conditional write
	require.NoError(t, err)
	require.Equal(t, int64(3), none.Version)

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, state.PhaseCompleted, got.Phase)
	require.Equal(t, int64(3), got.Version)
	hist, err := s.History(c, "g")
	require.NoError(t, err)
	require.Equal(t, []string{"detected", "max-not-restored", "completed"}, events(hist), "same instant: write order")
	w, g := detected, hist[0]
	require.True(t, w.At.Equal(g.At))
	w.At, g.At = time.Time{}, time.Time{}
	require.Equal(t, w, g)
}

func testRolloutWithHistoryConflict(t *testing.T, s state.Store) {
	c := ctx(t)
	v1, err := s.PutRolloutWithHistory(c, state.Rollout{Group: "g", Phase: state.PhaseDetected},
		[]state.HistoryEntry{{Group: "g", At: at, Event: "detected"}})
	require.NoError(t, err)
	v2 := v1
	v2.Phase = state.PhasePreparing
	_, err = s.PutRollout(c, v2)
	require.NoError(t, err)

	stale := v1 // read at version 1, written after version 2 exists
	stale.Phase = state.PhaseCompleted
	_, err = s.PutRolloutWithHistory(c, stale, []state.HistoryEntry{{Group: "g", At: at.Add(time.Minute), Event: "completed"}})
	require.ErrorIs(t, err, state.ErrConflict)
	_, err = s.PutRolloutWithHistory(c, state.Rollout{Group: "g", Phase: state.PhaseDetected},
		[]state.HistoryEntry{{Group: "g", At: at.Add(2 * time.Minute), Event: "detected again"}})
	require.ErrorIs(t, err, state.ErrConflict, "version 0 over an existing record")
	_, err = s.PutRolloutWithHistory(c, state.Rollout{Group: "h", Version: 4},
		[]state.HistoryEntry{{Group: "h", At: at, Event: "phantom"}})
	require.ErrorIs(t, err, state.ErrConflict, "a version of a missing record")

	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Version)
	require.Equal(t, state.PhasePreparing, got.Phase)
	hist, err := s.History(c, "g")
	require.NoError(t, err)
	require.Equal(t, []string{"detected"}, events(hist), "a lost write leaves no history entry")
	hist, err = s.History(c, "h")
	require.NoError(t, err)
	require.Empty(t, hist)
	_, err = s.GetRollout(c, "h")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func testRolloutWithHistoryRace(t *testing.T, s state.Store) {
	c := ctx(t)
	winners, errs := race(func(i int) (string, error) {
		event := fmt.Sprintf("detected by writer %d", i)
		_, err := s.PutRolloutWithHistory(c, state.Rollout{Group: "g", Phase: state.PhaseDetected, Reason: event},
			[]state.HistoryEntry{{Group: "g", At: at, Event: event}})
		return event, err
	})
	require.Len(t, winners, 1, "exactly one writer must win; errors: %v", errs)
	for _, err := range errs {
		require.ErrorIs(t, err, state.ErrConflict)
	}
	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, winners[0], got.Reason)
	hist, err := s.History(c, "g")
	require.NoError(t, err)
	require.Equal(t, winners, events(hist), "only the winner's entry is in the history")
}

func testRolloutWithHistoryOtherGroup(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRolloutWithHistory(c, state.Rollout{Group: "g", Phase: state.PhaseDetected},
		[]state.HistoryEntry{{Group: "g", At: at, Event: "detected"}, {Group: "other", At: at, Event: "detected"}})
	require.ErrorContains(t, err, `history entry "detected" is of group "other"`)
	require.NotErrorIs(t, err, state.ErrConflict)
	_, err = s.GetRollout(c, "g")
	require.ErrorIs(t, err, state.ErrNotFound)
	for _, g := range []string{"g", "other"} {
		hist, err := s.History(c, g)
		require.NoError(t, err)
		require.Empty(t, hist)
	}
}

func events(hist []state.HistoryEntry) []string {
	out := []string{}
	for _, e := range hist {
		out = append(out, e.Event)
	}
	return out
}

func testHookCompletingRoundTrip(t *testing.T, s state.Store) {
	c := ctx(t)
	v1, err := s.PutHook(c, state.Hook{Token: "tok", Group: "g", State: state.HookDraining, ReceivedAt: at})
	require.NoError(t, err)

	claim := v1
	claim.State = state.HookCompleting
	claim.Owner = "replica-a"
	claim.OwnerExpires = at.Add(time.Minute)
	put, err := s.PutHook(c, claim)
	require.NoError(t, err)
	claim.Version = 2
	requireSameHook(t, claim, put)

	got, err := s.GetHook(c, "tok")
	require.NoError(t, err)
	requireSameHook(t, claim, got)
}

func testLocksEmpty(t *testing.T, s state.Store) {
	got, err := s.ListLocks(ctx(t))
	require.NoError(t, err)
	require.Empty(t, got)
}

func testLockRoundTrip(t *testing.T, s state.Store) {
	c := ctx(t)
	group := fullLock("prod-nodes")
	requireAllFieldsSet(t, group)
	global := state.Lock{Group: state.GlobalScope, Reason: "freeze", Who: "bob", Since: at} // no Until
	require.NoError(t, s.PutLock(c, group))
	require.NoError(t, s.PutLock(c, global))

	got, err := s.ListLocks(c)
	require.NoError(t, err)
	require.Len(t, got, 2)
	requireSameLock(t, global, got[0])
	require.True(t, got[0].Until.IsZero(), "a lock without Until must come back without it")
	requireSameLock(t, group, got[1])
}

func testLocksPutReplaceDeleteList(t *testing.T, s state.Store) {
	c := ctx(t)
	for _, g := range []string{"m", "c", "x", "a", state.GlobalScope, "k", "b"} {
		require.NoError(t, s.PutLock(c, fullLock(g)))
	}
	replaced := fullLock("c")
	replaced.Reason = "still investigating"
	replaced.Who = "bob"
	replaced.Since = at
	replaced.Until = time.Time{} // until lifted by hand
	require.NoError(t, s.PutLock(c, replaced))

	want := []state.Lock{fullLock(state.GlobalScope), fullLock("a"), fullLock("b"), replaced,
		fullLock("k"), fullLock("m"), fullLock("x")}
	requireLocks(t, s, want)

	require.NoError(t, s.DeleteLock(c, "b"))
	require.NoError(t, s.DeleteLock(c, state.GlobalScope))
	requireLocks(t, s, []state.Lock{fullLock("a"), replaced, fullLock("k"), fullLock("m"), fullLock("x")})

	require.NoError(t, s.PutLock(c, fullLock(state.GlobalScope)))
	for _, g := range []string{"a", "c", "k", "m", "x"} {
		require.NoError(t, s.DeleteLock(c, g))
	}
	requireLocks(t, s, []state.Lock{fullLock(state.GlobalScope)})
}

func testLockDeleteMissing(t *testing.T, s state.Store) {
	c := ctx(t)
	require.NoError(t, s.DeleteLock(c, "never-locked"))
	require.NoError(t, s.DeleteLock(c, state.GlobalScope))

	require.NoError(t, s.PutLock(c, fullLock("g")))
	require.NoError(t, s.DeleteLock(c, "g"))
	require.NoError(t, s.DeleteLock(c, "g"), "a second delete of the same lock")
	requireLocks(t, s, nil)
}

func testLiftLockReturnsTheLockItRemoved(t *testing.T, s state.Store) {
	c := ctx(t)
	_, ok, err := s.LiftLock(c, "never-locked")
	require.NoError(t, err)
	require.False(t, ok, "no lock: nothing lifted")
	for _, g := range []string{state.GlobalScope, "g"} {
		require.NoError(t, s.PutLock(c, fullLock(g)))
	}
	lifted, ok, err := s.LiftLock(c, "g")
	require.NoError(t, err)
	require.True(t, ok)
	requireSameLock(t, fullLock("g"), lifted)
	requireLocks(t, s, []state.Lock{fullLock(state.GlobalScope)})
	lifted, ok, err = s.LiftLock(c, state.GlobalScope)
	require.NoError(t, err)
	require.True(t, ok)
	requireSameLock(t, fullLock(state.GlobalScope), lifted)
	requireLocks(t, s, nil)
	_, ok, err = s.LiftLock(c, state.GlobalScope)
	require.NoError(t, err)
	require.False(t, ok, "a second lift finds nothing")
}

func testPutLockIfAbsent(t *testing.T, s state.Store) {
	c := ctx(t)
	first := state.Lock{Group: state.GlobalScope, Reason: "freeze", Who: "alice", Since: at.Truncate(time.Second), Until: at.Add(time.Hour)}
	_, written, err := s.PutLockIfAbsent(c, first, at)
	require.NoError(t, err)
	require.True(t, written, "no lock: written")

	second := state.Lock{Group: state.GlobalScope, Reason: "incident", Who: "bob", Since: at.Truncate(time.Second)}
	held, written, err := s.PutLockIfAbsent(c, second, at.Add(time.Minute))
	require.NoError(t, err)
	require.False(t, written, "a holding lock stops the write")
	requireSameLock(t, first, held)
	requireLocks(t, s, []state.Lock{first})

	held, written, err = s.PutLockIfAbsent(c, second, at.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, written, "a lock whose Until is not after now no longer holds: replaced")
	require.Equal(t, state.Lock{}, held)
	requireLocks(t, s, []state.Lock{second})

	_, written, err = s.PutLockIfAbsent(c, fullLock("g"), at)
	require.NoError(t, err)
	require.True(t, written, "a group's lock is of its own scope")
	_, written, err = s.PutLockIfAbsent(c, first, at.Add(48*time.Hour))
	require.NoError(t, err)
	require.False(t, written, "a lock without Until holds whenever")
}

func testLocksBesideRollouts(t *testing.T, s state.Store) {
	c := ctx(t)
	_, err := s.PutRollout(c, fullRollout("g"))
	require.NoError(t, err)
	require.NoError(t, s.PutLock(c, fullLock("g")))
	require.NoError(t, s.PutLock(c, fullLock("h"))) // a lock of a group without a rollout

	_, err = s.GetRollout(c, "h")
	require.ErrorIs(t, err, state.ErrNotFound)
	got, err := s.GetRollout(c, "g")
	require.NoError(t, err)
	want := fullRollout("g")
	want.Version = 1
	requireSameRollout(t, want, got)
	list, err := s.ListRollouts(c)
	require.NoError(t, err)
	require.Len(t, list, 1)
	history, err := s.History(c, "g")
	require.NoError(t, err)
	require.Empty(t, history)

	// Rollout writes leave the lock alone, and deleting the lock leaves the rollout alone.
	got.Phase = state.PhaseHalted
	_, err = s.PutRollout(c, got)
	require.NoError(t, err)
	requireLocks(t, s, []state.Lock{fullLock("g"), fullLock("h")})
	require.NoError(t, s.DeleteLock(c, "g"))
	got, err = s.GetRollout(c, "g")
	require.NoError(t, err)
	require.Equal(t, state.PhaseHalted, got.Phase)
	require.Equal(t, int64(2), got.Version)
}

func testMarkEvent(t *testing.T, s state.Store) {
	c := ctx(t)
	seen, err := s.EventSeen(c, "evt-1")
	require.NoError(t, err)
	require.False(t, seen, "not seen before it is marked")
	first, err := s.MarkEvent(c, "evt-1", at.Add(24*time.Hour))
	require.NoError(t, err)
	require.True(t, first)
	seen, err = s.EventSeen(c, "evt-1")
	require.NoError(t, err)
	require.True(t, seen, "seen once marked")

	first, err = s.MarkEvent(c, "evt-1", at.Add(48*time.Hour))
	require.NoError(t, err)
	require.False(t, first, "a duplicate delivery must not be first, whatever its expiry")

	first, err = s.MarkEvent(c, "evt-2", at.Add(24*time.Hour))
	require.NoError(t, err)
	require.True(t, first, "another id is first")

	// Markers are no rollouts, hooks or locks.
	rollouts, err := s.ListRollouts(c)
	require.NoError(t, err)
	require.Empty(t, rollouts)
	requireLocks(t, s, nil)
	_, err = s.GetHook(c, "evt-1")
	require.ErrorIs(t, err, state.ErrNotFound)
}

func testMarkEventRace(t *testing.T, s state.Store) {
	c := ctx(t)
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		start  = make(chan struct{})
		firsts int
		errs   []error
	)
	for range Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			first, err := s.MarkEvent(c, "evt-dup", at.Add(time.Hour))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if first {
				firsts++
			}
		}()
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs, "a duplicate is not an error")
	require.Equal(t, 1, firsts, "exactly one of %d concurrent markers must be first", Writers)

	first, err := s.MarkEvent(c, "evt-dup", at.Add(time.Hour))
	require.NoError(t, err)
	require.False(t, first)
}

// requireLocks checks that ListLocks returns exactly want, in order (global first, then by group).
func requireLocks(t *testing.T, s state.Store, want []state.Lock) {
	t.Helper()
	got, err := s.ListLocks(ctx(t))
	require.NoError(t, err)
	scopes := func(ls []state.Lock) []string {
		out := []string{}
		for _, l := range ls {
			out = append(out, l.Scope())
		}
		return out
	}
	require.Equal(t, scopes(want), scopes(got))
	for i := range want {
		requireSameLock(t, want[i], got[i])
	}
}

func requireSameLock(t *testing.T, want, got state.Lock) {
	t.Helper()
	requireSameTimes(t, want, got)
	require.Equal(t, normalize(want), normalize(got))
}

// race runs Writers calls of write at once and returns what the winners wrote and the losers' errors.
func race(write func(i int) (string, error)) (winners []string, errs []error) {
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			wrote, err := write(i)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			winners = append(winners, wrote)
		}()
	}
	close(start)
	wg.Wait()
	return winners, errs
}

// requireSameRollout compares two rollouts: times by instant (time.Time.Equal), everything else exactly.
func requireSameRollout(t *testing.T, want, got state.Rollout) {
	t.Helper()
	requireSameTimes(t, want, got)
	require.Equal(t, normalize(want), normalize(got))
}

func requireSameHook(t *testing.T, want, got state.Hook) {
	t.Helper()
	requireSameTimes(t, want, got)
	require.Equal(t, normalize(want), normalize(got))
}

// requireSameTimes checks every time.Time field of want and got (in nested structs too) with Equal.
func requireSameTimes(t *testing.T, want, got any) {
	t.Helper()
	walkTimes(reflect.ValueOf(want), reflect.ValueOf(got), "", func(path string, w, g time.Time) {
		require.Truef(t, w.Equal(g), "%s: got %s, want %s", path, g.Format(time.RFC3339Nano), w.Format(time.RFC3339Nano))
	})
}

func walkTimes(w, g reflect.Value, path string, check func(path string, w, g time.Time)) {
	switch w.Kind() {
	case reflect.Pointer:
		if w.IsNil() || g.IsNil() {
			return // nil-ness is compared by require.Equal
		}
		walkTimes(w.Elem(), g.Elem(), path, check)
	case reflect.Slice:
		for i := range min(w.Len(), g.Len()) { // lengths are compared by require.Equal
			walkTimes(w.Index(i), g.Index(i), fmt.Sprintf("%s[%d]", path, i), check)
		}
	case reflect.Struct:
		if tw, ok := w.Interface().(time.Time); ok {
			check(path, tw, g.Interface().(time.Time))
			return
		}
		for i := range w.NumField() {
			walkTimes(w.Field(i), g.Field(i), path+"."+w.Type().Field(i).Name, check)
		}
	}
}

// normalize returns a copy of a record with every time in UTC and without monotonic reading, so records
// that hold the same instants compare equal with require.Equal.
func normalize[T any](v T) T {
	out := reflect.New(reflect.TypeOf(v)).Elem()
	out.Set(deepCopy(reflect.ValueOf(v)))
	return out.Interface().(T)
}

func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(v.Type().Elem())
		p.Elem().Set(deepCopy(v.Elem()))
		return p
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			c.Index(i).Set(deepCopy(v.Index(i)))
		}
		return c
	case reflect.Struct:
		if tv, ok := v.Interface().(time.Time); ok {
			return reflect.ValueOf(tv.UTC().Round(0))
		}
		c := reflect.New(v.Type()).Elem()
		for i := range v.NumField() {
			c.Field(i).Set(deepCopy(v.Field(i)))
		}
		return c
	}
	return v
}

// requireAllFieldsSet fails when a field of v (recursively through pointers to structs) has its zero value,
// except the named top-level fields: a new field in a record fails the round-trip tests until the fixture
// sets it.
func requireAllFieldsSet(t *testing.T, v any, except ...string) {
	t.Helper()
	skip := map[string]bool{}
	for _, e := range except {
		skip["."+e] = true
	}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if skip[path] {
			return
		}
		require.Falsef(t, v.IsZero(), "fixture leaves %s zero: set it so the round trip covers it", path)
		switch v.Kind() {
		case reflect.Pointer:
			walk(v.Elem(), path)
		case reflect.Struct:
			if _, ok := v.Interface().(time.Time); ok {
				return
			}
			for i := range v.NumField() {
				walk(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	}
	walk(reflect.ValueOf(v), "")
}

func testListRolloutsAndLocks(t *testing.T, s state.Store) {
	lister, ok := s.(state.RolloutsAndLocksLister)
	if !ok {
		t.Skip("the store lists rollouts and locks apart")
	}
	c := ctx(t)
	rollouts, locks, err := lister.ListRolloutsAndLocks(c)
	require.NoError(t, err)
	require.Empty(t, rollouts)
	require.Empty(t, locks)
	for _, g := range []string{"m", "c", "x", "a"} {
		_, err := s.PutRollout(c, fullRollout(g))
		require.NoError(t, err)
	}
	_, err = s.PutHook(c, fullHook("tok"))
	require.NoError(t, err)
	require.NoError(t, s.AppendHistory(c, state.HistoryEntry{Group: "a", At: at, Event: "detected"}))
	require.NoError(t, s.PutLock(c, fullLock("x")))
	require.NoError(t, s.PutLock(c, fullLock("a")))
	require.NoError(t, s.PutLock(c, fullLock(state.GlobalScope)))
	require.NoError(t, s.PutDrainMark(c, state.DrainMark{InstanceID: "i-1", Group: "a"}))
	_, err = s.MarkEvent(c, "evt-1", at)
	require.NoError(t, err)
	wantRollouts, err := s.ListRollouts(c)
	require.NoError(t, err)
	wantLocks, err := s.ListLocks(c)
	require.NoError(t, err)
	rollouts, locks, err = lister.ListRolloutsAndLocks(c)
	require.NoError(t, err)
	require.Equal(t, wantRollouts, rollouts)
	require.Equal(t, wantLocks, locks)
	require.Len(t, rollouts, 4)
	require.Len(t, locks, 3)
	require.Equal(t, state.GlobalScope, locks[0].Group, "the global lock first")
}
