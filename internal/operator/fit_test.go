package operator_test

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
)

const soakReason = "soak: AMI ami-0b1b2b3b4b5b6b7b8 is 12m0s old, minimum 48h0m0s; may start at 2026-12-02T02:00:15Z"

func TestFitTextKeepsTheTimesAndCutsAtWordBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"fits", "approval: waiting", 40, "approval: waiting"},
		{"whitespace folded", "a\n b\tc", 40, "a b c"},
		{"the time and its words kept", soakReason, 47, "soak: AMI … may start at 2026-12-02T02:00:15Z"},
		{"as many leading words as fit", soakReason, 70, "soak: AMI ami-0b1b2b3b4b5b6b7b8 is … may start at 2026-12-02T02:00:15Z"},
		{"a time in the middle", "paused (global) by alice since 2026-11-30T02:05:00Z: incident 4711; next step: drain i-0aaaaaaaaaaaaaaa1", 60,
			"paused (global) by alice since 2026-11-30T02:05:00Z: …"},
		{"no time: a word boundary", "failed: drain of i-0ccccccccccccccc3 did not finish within 30m0s", 30, "failed: drain of …"},
		{"too narrow even for the time", soakReason, 12, "soak: AMI a…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := operator.FitText(tc.in, tc.n)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, utf8.RuneCountInString(got), tc.n)
		})
	}
}

func TestStatusTableKeepsWhenASoakMayStart(t *testing.T) {
	var b bytes.Buffer
	operator.RenderTable(&b, []operator.StatusRow{{Group: "demo-ecs-asg", Phase: state.PhaseWaiting, TargetImageID: "ami-0b1b2b3b4b5b6b7b8",
		Instances: 3, Reason: soakReason}})
	require.Contains(t, b.String(), "may start at 2026-12-02T02:00:15Z")
	require.NotContains(t, b.String(), "\n  reason:", "a short group name leaves REASON room in its column")
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		require.LessOrEqual(t, utf8.RuneCountInString(l), operator.TableWidth)
	}
}

func TestStatusTableWrapsTheReasonWhenTheColumnsLeaveItNoRoom(t *testing.T) {
	var b bytes.Buffer
	operator.RenderTable(&b, []operator.StatusRow{
		{Group: "a-group-name-of-twenty-eight", Phase: state.PhaseReplacing, Step: state.StepReplacementHealthy, TargetImageID: "ami-0b1b2b3b4b5b6b7b8",
			Instances: 3, Reason: soakReason, Paused: &operator.PauseInfo{Scope: "global"}, GroupPause: &operator.PauseInfo{Scope: "group x"}},
		{Group: "quiet", Phase: state.PhaseCompleted},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 4, b.String())
	require.NotContains(t, lines[0], "REASON")
	require.True(t, strings.HasPrefix(lines[1], "a-group-name-of-twenty-eight"))
	require.Equal(t, "  reason: "+soakReason, lines[2], "the reason in full on its own line")
	require.True(t, strings.HasPrefix(lines[3], "quiet"), "a row without a reason has no reason line")
}

func TestStatusAndHistoryCSVHaveAHeaderAndOneRowEach(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, operator.WriteStatusCSV(&b, []operator.StatusRow{{Group: "g", Phase: state.PhaseWaiting, Reason: "a, \"quoted\" reason",
		CurrentInstance: &operator.CurrentInstance{Old: "i-1", New: "i-2"}}}))
	recs, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, operator.StatusCSVHeader(), recs[0])
	row := map[string]string{}
	for i, k := range recs[0] {
		row[k] = recs[1][i]
	}
	require.Equal(t, "a, \"quoted\" reason", row["reason"])
	require.Equal(t, "i-1", row["old_instance_id"])
	require.Equal(t, "", row["paused_scope"])

	b.Reset()
	require.NoError(t, operator.WriteHistoryCSV(&b, []state.HistoryEntry{{Group: "g", Event: "rolling-back", PreviousImage: "ami-a", NewImage: "ami-b",
		Source: "/p", SourceVersion: 4}}))
	recs, err = csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Equal(t, operator.HistoryCSVHeader(), recs[0])
	require.Equal(t, []string{"", "rolling-back", "ami-b", "ami-a", "/p", "4", ""}, recs[1], "the AMIs in the direction of the event")
}
