package demo

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// progressLineRE matches a group's progress line: the group, where its rollout stands, and the counts.
var progressLineRE = regexp.MustCompile(`^\[\+\s*\S+\] (\S+)\s+(\S+)\s.*\bserving=(\d+) desired=(\d+) max=\d+ on-target=(\d+)/(\d+)`)

// caseCodeRE matches the project's internal field-case codes ("C23", "field case"), which mean nothing to
// a reader of the tool's output.
var caseCodeRE = regexp.MustCompile(`\bC\d{1,2}\b|field case`)

// requireReadableProgress holds a demo's output to what a reader can follow: every position is a word of
// the state package's vocabulary, on-target counts out of desired capacity, a group's line is printed only
// when something but a running time changed, and no internal case code appears. It returns the positions seen.
func requireReadableProgress(t *testing.T, out string) []string {
	t.Helper()
	require.NotRegexp(t, caseCodeRE, out, "an internal case code in the demo's output")
	last := map[string]string{}
	var positions []string
	for _, l := range joinContinuations(out) {
		m := progressLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		group, pos, desired, of := m[1], m[2], m[4], m[6]
		require.True(t, state.IsPosition(pos), "%q is not a position of the state vocabulary: %s", pos, l)
		positions = append(positions, pos)
		require.Equal(t, desired, of, "on-target counts out of desired capacity: %s", l)
		key := changeKey(l[strings.Index(l, "]")+1:])
		require.NotEqual(t, last[group], key, "a line printed again with nothing changed: %s", l)
		last[group] = key
	}
	return positions
}

func TestProgressLineNamesThePositionAndCountsOutOfDesired(t *testing.T) {
	r := state.Rollout{Group: "g", Phase: state.PhaseReplacing, Current: &state.Replacement{Step: state.StepInstanceRefresh},
		Reason: "instance refresh r-1 InProgress: 33% complete, 2 instance(s) to update"}
	require.Equal(t, "g              Replacing/InstanceRefresh    serving=4 desired=3 max=6 on-target=1/3 reason=instance refresh r-1 InProgress: 33% complete, 2 instance(s) to update",
		progressLine("g", r, 3, 6, 4, 1))
	r = state.Rollout{Group: "g", Phase: state.PhaseWaiting, Reason: "soak: AMI ami-1 is 12m0s old, minimum 48h0m0s"}
	require.Equal(t, "g              Waiting                      serving=3 desired=3 max=6 on-target=0/3 reason=soak: AMI ami-1 is 12m0s old, minimum 48h0m0s",
		progressLine("g", r, 3, 6, 3, 0))
}

// A gate's reason whose running time ticks is one change, not one a minute; a new count is a change.
func TestChangeKeyIgnoresRunningTimesOnly(t *testing.T) {
	soak := func(age string) string {
		return "g Waiting serving=3 desired=3 max=6 on-target=0/3 reason=soak: AMI ami-0b1b2b3b4b5b6b7b8 is " + age + " old, minimum 48h0m0s"
	}
	require.Equal(t, changeKey(soak("0s")), changeKey(soak("12m0s")))
	require.Equal(t, changeKey("update 1f0dc61a-bdd6 InProgress for 5m45s"), changeKey("update 1f0dc61a-bdd6 InProgress for 10m45s"))
	require.NotEqual(t, changeKey("g Replacing serving=3 desired=3 max=6 on-target=1/3"), changeKey("g Replacing serving=3 desired=3 max=6 on-target=2/3"))
	require.NotEqual(t, changeKey("old=i-0a1a2a3a4a5a6a7a8"), changeKey("old=i-0a1a2a3a4a5a6a7a9"))
}

// A refresh stopped by a pause, or cancelled on the way to a rollback, moves through its reasons once: no
// group's line goes back to one it printed before the last (a reason that blanks out and returns, a rollback
// that says its failure again), and a paused group prints one Waiting line, whose next step is the one the
// resume takes.
func TestPauseAndRollbackProgressNeverGoesBackToAnEarlierLine(t *testing.T) {
	for _, name := range []string{"pause", "bad-ami"} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := Run(context.Background(), Options{Scenario: name, Out: &out})
			require.NoError(t, err)
			seen := map[string][]string{}
			waiting := map[string]int{}
			for _, l := range joinContinuations(out.String()) {
				m := progressLineRE.FindStringSubmatch(l)
				if m == nil {
					continue
				}
				group, key := m[1], changeKey(l[strings.Index(l, "]")+1:])
				if before := seen[group]; len(before) > 1 {
					require.NotContains(t, before[:len(before)-1], key, "%s went back to an earlier line: %s", group, l)
				}
				seen[group] = append(seen[group], key)
				if m[2] == state.PhaseWaiting.String() {
					waiting[group]++
					require.Contains(t, l, "next step: a new instance refresh that skips the instances already on the target")
				}
			}
			require.Len(t, seen, 2)
			if name == "pause" {
				require.Equal(t, map[string]int{testworld.GroupName: 1, testworld.EKSGroupName: 1}, waiting, "one Waiting line a group")
			}
		})
	}
}

// joinContinuations returns the demo's output as its lines read unwrapped: a continuation line (one that
// starts with at least continuationIndent spaces) joined to the line above by one space.
func joinContinuations(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if len(lines) > 0 && strings.HasPrefix(l, strings.Repeat(" ", continuationIndent)) {
			lines[len(lines)-1] += " " + strings.TrimLeft(l, " ")
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// Every line of the narrative of the rollout scenarios fits in lineWidth columns; a wrapped line reads, once
// joined, as it was written: the position and the counts of a progress line on its first line, its reason
// starting a line of its own.
func TestDemoLinesFitTheWidthAndJoinBackWhole(t *testing.T) {
	for _, name := range []string{"rollout", "bad-ami", "ecs-capacity-provider"} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := Run(context.Background(), Options{Scenario: name, Out: &out})
			require.NoError(t, err)
			wrapped := 0
			lines := strings.Split(out.String(), "\n")
			for i, l := range lines {
				require.LessOrEqual(t, utf8.RuneCountInString(l), lineWidth, l)
				if strings.HasPrefix(l, strings.Repeat(" ", continuationIndent)) {
					wrapped++
					if progressLineRE.MatchString(lines[i-1]) {
						require.True(t, strings.HasPrefix(strings.TrimLeft(l, " "), "reason=") || strings.HasPrefix(strings.TrimLeft(l, " "), "old="), l)
					}
				}
			}
			require.Positive(t, wrapped, "long lines were wrapped")
			require.Contains(t, strings.Join(joinContinuations(out.String()), "\n"), "simulated account: ECS cluster \"demo\", group "+testworld.GroupName+" (3 instances on "+testworld.ImageA)
		})
	}
}

func TestWrapTextBreaksBetweenWordsAndKeepsLongWordsWhole(t *testing.T) {
	require.Equal(t, []string{"ab cd", "  ef"}, wrapText("ab cd ef", 5, "  "))
	require.Equal(t, []string{"a  b"}, wrapText("a  b", 5, "  "), "runs of spaces inside a line are kept")
	require.Equal(t, []string{"ab", "  abcdefgh", "  c"}, wrapText("ab abcdefgh c", 5, "  "), "a word longer than the line stays whole")
	require.Equal(t, []string{"  abcdefgh"}, wrapText("  abcdefgh", 5, "  "), "an indent is no break")
}
