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

func TestValidateAMIID(t *testing.T) {
	for _, id := range []string{"ami-0a1b2c3d", "ami-0a1b2c3d4e5f60718", amiA} {
		require.NoError(t, operator.ValidateAMIID(id), id)
	}
	for id, want := range map[string]string{
		"latest":                  `"latest" is not an AMI id (ami- followed by 8 or 17 lowercase hexadecimal digits`,
		"":                        `"" is not an AMI id`,
		"ami-":                    `"ami-" is not an AMI id`,
		"ami-0A1B2C3D":            `"ami-0A1B2C3D" is not an AMI id`,
		"ami-0a1b2c3d4e5f6071":    "is not an AMI id", // 16 digits
		"ami-0a1b2c3g":            "is not an AMI id",
		"AMI-0a1b2c3d":            "is not an AMI id",
		" " + amiA:                "remove the spaces around it",
		amiA + "\n":               "remove the spaces around it",
		"ami-0a1b2c3d4e5f60718 x": "is not an AMI id (",
	} {
		require.ErrorContains(t, operator.ValidateAMIID(id), want, "%q", id)
	}
}

func TestRollbackToAnAMIOutsideTheHistoryNeedsForce(t *testing.T) {
	ctx := context.Background()
	hist := []state.HistoryEntry{{Group: "prod", At: now.Add(-10 * time.Hour), Event: "completed", PreviousImage: amiOld, NewImage: amiA}}
	const stranger = "ami-0e1e2e3e4e5e6e7e8"
	for _, tc := range []struct {
		name           string
		to             string
		force          bool
		wantErr        string
		wantUnrecorded bool
	}{
		{name: "in the history as a previous AMI", to: amiOld},
		{name: "in the history as a new AMI", to: amiA},
		{name: "unknown AMI refused", to: stranger, wantErr: stranger + " is not in the history of group prod (nor its previous AMI): check the id with `patch-agent history prod`, or pass --force"},
		{name: "unknown AMI with force", to: stranger, force: true, wantUnrecorded: true},
		{name: "the current target is refused even with force", to: amiB, force: true, wantErr: "already targets " + amiB},
		{name: "a malformed id is refused even with force", to: "ami-12345", force: true, wantErr: `"ami-12345" is not an AMI id`},
		{name: "surrounding spaces are refused", to: amiA + " ", wantErr: "remove the spaces around it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t, []state.Rollout{completedOnB()}, hist...)
			p, err := operator.PlanRollback(ctx, m, "prod", tc.to, tc.force)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				_, err = operator.Rollback(ctx, m, "prod", tc.to, "alice", tc.force, now)
				require.ErrorContains(t, err, tc.wantErr)
				r, err := m.GetRollout(ctx, "prod")
				require.NoError(t, err)
				require.Equal(t, int64(1), r.Version, "nothing written")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.to, p.To)
			require.Equal(t, tc.wantUnrecorded, p.Unrecorded)
			r, err := operator.Rollback(ctx, m, "prod", tc.to, "alice", tc.force, now)
			require.NoError(t, err)
			require.Equal(t, tc.to, r.TargetImageID)
		})
	}
}

func TestRollbackToTheRecordsPreviousAMIIsKnownWithoutHistory(t *testing.T) {
	m := seed(t, []state.Rollout{completedOnB()})
	p, err := operator.PlanRollback(context.Background(), m, "prod", amiA, false)
	require.NoError(t, err)
	require.False(t, p.Unrecorded)
}

func TestRollbackIsRefusedInEveryPhaseButTheQuietOnes(t *testing.T) {
	for phase, want := range map[state.Phase]string{
		state.PhaseDetected:    "rollout in progress at Detected/-",
		state.PhasePreparing:   "rollout in progress at Preparing/-",
		state.PhaseReplacing:   "rollout in progress at Replacing/-",
		state.PhaseVerifying:   "rollout in progress at Verifying/-",
		state.PhaseRollingBack: "rollout in progress at RollingBack/-",
		"Exploding":            `the rollout of prod is in phase "Exploding", which this patch-agent does not know: refusing to roll back`,
		"":                     `the rollout of prod is in phase "", which this patch-agent does not know`,
	} {
		t.Run(string(phase), func(t *testing.T) {
			r := completedOnB()
			r.Phase = phase
			m := seed(t, []state.Rollout{r})
			_, err := operator.Rollback(context.Background(), m, "prod", "", "alice", true, now)
			require.ErrorContains(t, err, want)
		})
	}
	for _, phase := range []state.Phase{state.PhaseIdle, state.PhaseCompleted, state.PhaseRolledBack, state.PhaseHalted, state.PhaseWaiting} {
		t.Run(string(phase), func(t *testing.T) {
			r := completedOnB()
			r.Phase = phase
			// A rolled-back group is on A again (as status shows it): it rolls back to what ran before A.
			m := seed(t, []state.Rollout{r}, completedOldToA)
			_, err := operator.Rollback(context.Background(), m, "prod", "", "alice", false, now)
			require.NoError(t, err)
		})
	}
}

// Skipping the soak of an AMI other than the one reviewed is refused, and nothing is written.
func TestApproveSkippingSoakOfAnAMIOtherThanTheReviewedOneIsRefused(t *testing.T) {
	ctx := context.Background()
	soak := completedOnB()
	soak.Phase, soak.TargetImageID, soak.PreviousImageID = state.PhaseWaiting, amiC, amiB
	soak.Reason = "soak: AMI " + amiC + " is 3h0m0s old, minimum 48h0m0s; may start at 2026-12-02T06:00:00Z"
	m := seed(t, []state.Rollout{soak})
	_, err := operator.ApproveSkippingSoak(ctx, m, "prod", amiB, "carol", "CVE fix", now)
	require.ErrorContains(t, err, "waits for AMI "+soak.TargetImageID+", not "+amiB)
	stored, err := m.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.Equal(t, int64(1), stored.Version, "nothing written")
	_, err = operator.ApproveSkippingSoak(ctx, m, "prod", soak.TargetImageID, "carol", "CVE fix", now)
	require.NoError(t, err)
}

func TestApproveOnlyWhatWaitsForApprovalUnlessForced(t *testing.T) {
	ctx := context.Background()
	waiting := completedOnB()
	waiting.Phase, waiting.TargetImageID, waiting.PreviousImageID, waiting.Reason = state.PhaseWaiting, amiC, amiB, approvalReason
	soak := waiting
	soak.Reason = "soak: AMI " + amiC + " is 3h0m0s old, minimum 48h0m0s; may start at 2026-12-02T06:00:00Z"
	paused := waiting
	paused.Phase, paused.Reason = state.PhaseDetected, "paused (global) by bob since 2026-11-30T08:00:00Z: incident; next step: start the rollout"
	for _, tc := range []struct {
		name    string
		have    state.Rollout
		force   bool
		image   string // --ami: the AMI the operator reviewed
		wantErr string
	}{
		{name: "waiting for approval", have: waiting},
		{name: "waiting for the reviewed AMI", have: waiting, image: waiting.TargetImageID},
		{name: "the source moved on from the reviewed AMI: refused, even with force", have: waiting, image: amiB, force: true,
			wantErr: "group prod waits for AMI " + waiting.TargetImageID + ", not " + amiB + ": nothing approved"},
		{name: "completed is refused", have: completedOnB(),
			wantErr: "group prod is not waiting for approval (phase Completed): nothing to approve; pass --force to record an approval of " + amiB + " anyway"},
		{name: "waiting on soak is refused", have: soak, wantErr: "waits for its soak, not for approval (soak: AMI ami-0c1c2c3c4c5c6c7c8 is 3h0m0s old, minimum 48h0m0s; may start at 2026-12-02T06:00:00Z): to roll ami-0c1c2c3c4c5c6c7c8 before the soak ends: patch-agent approve prod --skip-soak --reason '...'"},
		{name: "paused is refused", have: paused, wantErr: "not waiting for approval (phase Detected, reason: paused (global)"},
		{name: "completed with force", have: completedOnB(), force: true},
		{name: "paused with force", have: paused, force: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := seed(t, []state.Rollout{tc.have})
			r, err := operator.Approve(ctx, m, "prod", tc.image, "carol", tc.force, now)
			hist, herr := m.History(ctx, "prod")
			require.NoError(t, herr)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				stored, err := m.GetRollout(ctx, "prod")
				require.NoError(t, err)
				require.Equal(t, int64(1), stored.Version, "nothing written")
				require.Empty(t, hist, "no history entry")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.have.TargetImageID, r.ApprovedImage)
			require.Equal(t, []state.HistoryEntry{{Group: "prod", At: now, Event: operator.HistoryApproved,
				NewImage: tc.have.TargetImageID, Detail: "carol"}}, hist)

			_, err = operator.Approve(ctx, m, "prod", tc.image, "carol", tc.force, now.Add(time.Minute))
			require.NoError(t, err)
			hist, err = m.History(ctx, "prod")
			require.NoError(t, err)
			require.Len(t, hist, 1, "approving again records nothing")
		})
	}
}

func TestRenderHistoryReadsEachEventInItsDirection(t *testing.T) {
	var buf bytes.Buffer
	operator.RenderHistory(&buf, []state.HistoryEntry{
		{Group: "prod", At: now, Event: "detected", PreviousImage: amiA, NewImage: amiB},
		{Group: "prod", At: now.Add(time.Minute), Event: "rolling-back", PreviousImage: amiA, NewImage: amiB, Detail: "replacement i-5 not healthy"},
		{Group: "prod", At: now.Add(2 * time.Minute), Event: "rolled-back", PreviousImage: amiB, NewImage: amiA},
		{Group: "prod", At: now.Add(3 * time.Minute), Event: "manual-rollback", PreviousImage: amiB, NewImage: amiA, Detail: "alice"},
		{Group: "prod", At: now.Add(4 * time.Minute), Event: "approved", NewImage: amiC, Detail: "carol"},
		{Group: "prod", At: now.Add(5 * time.Minute), Event: "max-not-restored", Detail: "desired 4"},
	})
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	require.Len(t, lines, 7)
	col := strings.Index(lines[0], "FROM → TO")
	require.Positive(t, col)
	// tabwriter aligns by runes: cut the column from the rune offset.
	cell := func(l string) string {
		r := []rune(l)
		start := len([]rune(lines[0][:col]))
		return strings.Fields(string(r[start:]))[0] + " → " + strings.Fields(string(r[start:]))[2]
	}
	require.Equal(t, amiA+" → "+amiB, cell(lines[1]), "detected: the new rollout")
	require.Equal(t, amiB+" → "+amiA, cell(lines[2]), "rolling-back: from the failed AMI to the restored one")
	require.Equal(t, amiB+" → "+amiA, cell(lines[3]), "rolled-back: from the failed AMI to the restored one")
	require.Equal(t, amiB+" → "+amiA, cell(lines[4]), "manual-rollback")
	require.Equal(t, "- → "+amiC, cell(lines[5]), "approved: only the AMI approved")
	require.Contains(t, lines[6], "max-not-restored  -  ", "no AMI: a dash")
	require.NotContains(t, lines[0], "PREVIOUS AMI", "the direction is shown once")

	buf.Reset()
	operator.RenderWideHistory(&buf, []state.HistoryEntry{{Group: "prod", At: now, Event: "rolling-back", PreviousImage: amiA, NewImage: amiB, Source: "/p", SourceVersion: 3}})
	require.NotContains(t, buf.String(), "PREVIOUS AMI", "wide adds the source, not the AMIs a second time")
	require.Contains(t, buf.String(), amiB+" → "+amiA+"  /p (version 3)")
}

func TestRenderTableShowsTheGroupPauseBehindTheGlobalOne(t *testing.T) {
	m := seed(t, []state.Rollout{completedOnB()})
	ctx := context.Background()
	require.NoError(t, m.PutLock(ctx, state.Lock{Reason: "incident", Who: "alice", Since: now}))
	require.NoError(t, m.PutLock(ctx, state.Lock{Group: "prod", Reason: "game day", Who: "bob", Since: now, Until: now.Add(time.Hour)}))
	rows, err := operator.Status(ctx, m, "", now)
	require.NoError(t, err)
	require.Equal(t, "global", rows[0].Paused.Scope)
	require.Equal(t, "group prod", rows[0].GroupPause.Scope)
	var buf bytes.Buffer
	operator.RenderWideTable(&buf, rows)
	require.Contains(t, buf.String(), "global by alice: incident; also group prod by bob until 2026-11-30T10:00:00Z: game day")

	require.NoError(t, m.DeleteLock(ctx, state.GlobalScope))
	rows, err = operator.Status(ctx, m, "", now)
	require.NoError(t, err)
	require.Equal(t, "group prod", rows[0].Paused.Scope)
	require.Nil(t, rows[0].GroupPause, "the group's own pause alone is Paused")
}
