package operator_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

func replacingOnC() state.Rollout {
	return state.Rollout{Group: "batch", Platform: "ecs", Cluster: "c2", Phase: state.PhaseReplacing,
		TargetImageID: amiC, PreviousImageID: amiB, DetectedAt: now.Add(-30 * time.Minute), Instances: 4, OnTarget: 1,
		Current:   &state.Replacement{Step: state.StepReplacementHealthy, OldInstanceID: "i-old"},
		Reason:    "paused (group batch) by bob since 2026-11-30T08:50:00Z: game day; next step: drain i-old",
		UpdatedAt: now.Add(-time.Minute)}
}

func TestStatus(t *testing.T) {
	global := state.Lock{Reason: "incident", Who: "alice", Since: now.Add(-time.Hour)}
	expiredGlobal := state.Lock{Reason: "old", Who: "alice", Since: now.Add(-3 * time.Hour), Until: now.Add(-time.Hour)}
	batch := state.Lock{Group: "batch", Reason: "game day", Who: "bob", Since: now.Add(-10 * time.Minute), Until: now.Add(time.Hour)}
	prodRow := operator.StatusRow{Group: "prod", Platform: "ecs", Cluster: "c1", TargetImageID: amiB, PreviousImageID: amiA,
		ChangedAt: now.Add(-2 * time.Hour), Instances: 3, OnTarget: 3, Other: 0, Phase: state.PhaseCompleted, UpdatedAt: now.Add(-time.Hour)}
	batchRow := operator.StatusRow{Group: "batch", Platform: "ecs", Cluster: "c2", TargetImageID: amiC, PreviousImageID: amiB,
		ChangedAt: now.Add(-30 * time.Minute), Instances: 4, OnTarget: 1, Other: 3, Phase: state.PhaseReplacing,
		Step: state.StepReplacementHealthy, CurrentInstance: &operator.CurrentInstance{Old: "i-old"},
		Reason: replacingOnC().Reason, UpdatedAt: now.Add(-time.Minute)}
	pausedBy := func(row operator.StatusRow, l state.Lock) operator.StatusRow {
		row.Paused = &operator.PauseInfo{Scope: l.Scope(), Who: l.Who, Reason: l.Reason, Since: l.Since, Until: l.Until}
		return row
	}
	alsoPausedBy := func(row operator.StatusRow, l state.Lock) operator.StatusRow {
		row.GroupPause = &operator.PauseInfo{Scope: l.Scope(), Who: l.Who, Reason: l.Reason, Since: l.Since, Until: l.Until}
		return row
	}
	for _, tc := range []struct {
		name    string
		locks   []state.Lock
		group   string
		want    []operator.StatusRow
		wantErr string
	}{
		{name: "every group, sorted, nothing paused", want: []operator.StatusRow{batchRow, prodRow}},
		{name: "one group", group: "prod", want: []operator.StatusRow{prodRow}},
		{name: "group pause shows on its group only", locks: []state.Lock{batch},
			want: []operator.StatusRow{pausedBy(batchRow, batch), prodRow}},
		{name: "global pause shows on every group and before a group's own", locks: []state.Lock{global, batch},
			want: []operator.StatusRow{alsoPausedBy(pausedBy(batchRow, global), batch), pausedBy(prodRow, global)}},
		{name: "expired pause is not shown", locks: []state.Lock{expiredGlobal}, want: []operator.StatusRow{batchRow, prodRow}},
		{name: "unknown group", group: "nope", wantErr: "no rollout record for group nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t, []state.Rollout{completedOnB(), replacingOnC()})
			for _, l := range tc.locks {
				require.NoError(t, m.PutLock(context.Background(), l))
			}
			rows, err := operator.Status(context.Background(), m, tc.group, now)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.ErrorIs(t, err, state.ErrNotFound)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, rows)
		})
	}
}

func TestStatusOfAnEmptyStoreIsNoRows(t *testing.T) {
	rows, err := operator.Status(context.Background(), state.NewMemory(), "", now)
	require.NoError(t, err)
	require.Empty(t, rows)
}

func TestRenderTableAlignsColumns(t *testing.T) {
	m := seed(t, []state.Rollout{completedOnB(), replacingOnC()})
	require.NoError(t, m.PutLock(context.Background(), state.Lock{Group: "batch", Reason: "game day", Who: "bob", Since: now, Until: now.Add(time.Hour)}))
	rows, err := operator.Status(context.Background(), m, "", now)
	require.NoError(t, err)
	var buf bytes.Buffer
	operator.RenderWideTable(&buf, rows)
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	require.Len(t, lines, 3)
	header := lines[0]
	for _, col := range []string{"PHASE", "STEP", "ON TARGET", "TARGET AMI", "PAUSED", "REASON"} {
		at := strings.Index(header, col)
		require.GreaterOrEqual(t, at, 0, col)
		for _, l := range lines[1:] {
			require.NotEqual(t, byte(' '), l[at], "column %s starts at the same offset in %q", col, l)
			require.Equal(t, byte(' '), l[at-1], "column %s is separated in %q", col, l)
		}
	}
	require.Contains(t, lines[1], "1/4")
	require.Contains(t, lines[1], "i-old -> -", "an older agent's record names the instance it was replacing")
	require.Contains(t, lines[1], "group batch by bob until 2026-11-30T10:00:00Z: game day")
	require.Contains(t, lines[2], "Completed")
	require.Contains(t, lines[2], "3/3")
}

func TestHistory(t *testing.T) {
	entries := []state.HistoryEntry{
		{Group: "prod", At: now.Add(-2 * time.Hour), Event: "detected", PreviousImage: amiA, NewImage: amiB, Source: "/golden/ecs", SourceVersion: 4},
		{Group: "prod", At: now.Add(-time.Hour), Event: "completed", PreviousImage: amiA, NewImage: amiB, Detail: "3 instance(s) replaced"},
	}
	for _, tc := range []struct {
		name    string
		rs      []state.Rollout
		hist    []state.HistoryEntry
		group   string
		want    []state.HistoryEntry
		wantErr string
	}{
		{name: "entries oldest first", rs: []state.Rollout{completedOnB()}, hist: []state.HistoryEntry{entries[1], entries[0]}, group: "prod", want: entries},
		{name: "a known group without history", rs: []state.Rollout{completedOnB()}, group: "prod", want: []state.HistoryEntry{}},
		{name: "unknown group", group: "prdo", wantErr: "no rollout record for group prdo"},
		{name: "group required", wantErr: "history needs a group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t, tc.rs, tc.hist...)
			got, err := operator.History(context.Background(), m, tc.group)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, len(tc.want), len(got))
			if len(tc.want) > 0 {
				require.Equal(t, tc.want, got)
			}
		})
	}
}

func TestRenderHistory(t *testing.T) {
	var buf bytes.Buffer
	operator.RenderWideHistory(&buf, []state.HistoryEntry{
		{Group: "prod", At: now, Event: "detected", PreviousImage: amiA, NewImage: amiB, Source: "/golden/ecs", SourceVersion: 4},
		{Group: "prod", At: now.Add(time.Hour), Event: "manual-rollback", PreviousImage: amiB, NewImage: amiA, Detail: "alice"},
	})
	out := buf.String()
	require.Contains(t, out, "AT")
	require.Contains(t, out, "2026-11-30T09:00:00Z  detected")
	require.Contains(t, out, "/golden/ecs (version 4)")
	require.Contains(t, out, "manual-rollback")
}

// The status of a plain Auto Scaling group's automatic rollback shows as TARGET AMI the AMI the rollback goes
// to, not the AMI rolled back from (the record's TargetImageID), as a managed node group's rollback does, with
// the AMI rolled back from as PREVIOUS AMI and ON TARGET counting the instances not on it. A rollout that is
// not rolling back shows its target.
func TestStatusOfAnAutomaticRollbackOfAnAutoScalingGroupShowsTheAMIItGoesBackTo(t *testing.T) {
	for _, tc := range []struct {
		phase            state.Phase
		target, previous string
		onTarget         int // the record: 4 instances, 1 on amiC
	}{
		{state.PhaseRollingBack, amiB, amiC, 3},
		{state.PhaseRolledBack, amiB, amiC, 3},
		{state.PhaseHalted, amiC, amiB, 1},
		{state.PhaseReplacing, amiC, amiB, 1},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			r := replacingOnC() // an Auto Scaling group (no Nodegroup) rolled from amiB to amiC
			r.Phase, r.Current, r.Reason = tc.phase, nil, ""
			m := seed(t, []state.Rollout{r})
			rows, err := operator.Status(context.Background(), m, r.Group, now)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Equal(t, tc.target, rows[0].TargetImageID, "TARGET AMI")
			require.Equal(t, tc.previous, rows[0].PreviousImageID, "PREVIOUS AMI")
			require.Equal(t, tc.onTarget, rows[0].OnTarget, "ON TARGET counts on the AMI shown")
			require.Equal(t, r.Instances-tc.onTarget, rows[0].Other)
			var out bytes.Buffer
			operator.RenderTable(&out, rows)
			require.Contains(t, out.String(), tc.target)
		})
	}
}

// A rollout in an instance refresh shows the refresh (id, status, percentage, instances left, AWS's reason)
// instead of an instance pair, in the wide table too.
func TestStatusOfARolloutInAnInstanceRefreshShowsTheRefresh(t *testing.T) {
	r := replacingOnC()
	r.Strategy, r.Current = "refresh", &state.Replacement{Step: state.StepInstanceRefresh}
	r.Refresh = &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "3", ID: "ir-7", Status: "InProgress", PercentageComplete: 40,
		InstancesToUpdate: 6, StatusReason: "Waiting: launching before terminating needs room above the desired capacity (10), and the group's MaxSize (10) leaves none."}
	rows, err := operator.Status(context.Background(), seed(t, []state.Rollout{r}), r.Group, now)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].CurrentInstance)
	require.Equal(t, &operator.RefreshInfo{ID: "ir-7", Status: "InProgress", PercentageComplete: 40, InstancesToUpdate: 6,
		StatusReason: r.Refresh.StatusReason}, rows[0].Refresh)
	var b strings.Builder
	operator.RenderWideTable(&b, rows)
	require.Contains(t, b.String(), "refresh ir-7 InProgress 40%, 6 left")
}
