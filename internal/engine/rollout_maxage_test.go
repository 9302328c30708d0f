package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// TestMaxInstanceAgeTagParsesDaysAndDurationsOfAtLeastADay: patch-agent/max-instance-age is whole days or a Go
// duration, at least 1 day; anything else is an error naming the tag.
func TestMaxInstanceAgeTagParsesDaysAndDurationsOfAtLeastADay(t *testing.T) {
	for _, tc := range []struct {
		tag  string
		want time.Duration
		bad  bool
	}{
		{tag: "", want: 0},
		{tag: "21d", want: 21 * 24 * time.Hour},
		{tag: "504h", want: 504 * time.Hour},
		{tag: "1d", want: 24 * time.Hour},
		{tag: "24h", want: 24 * time.Hour},
		{tag: "12h", bad: true},
		{tag: "0d", bad: true},
		{tag: "-3d", bad: true},
		{tag: "1.5d", bad: true},
		{tag: "three weeks", bad: true},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			d, err := model.ParseMaxInstanceAge(tc.tag)
			if tc.bad {
				require.ErrorContains(t, err, model.TagMaxInstanceAge+"=")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, d)
		})
	}
}

// TestMaxInstanceAgeCountsFromLaunchTime: an instance is past the age once now - LaunchTime reaches it; one
// without a known launch time, or a group without the tag, never is.
func TestMaxInstanceAgeCountsFromLaunchTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	day := model.Target{Policy: model.TargetPolicy{MaxInstanceAge: 24 * time.Hour}}
	require.True(t, agedOut(day, model.InstanceView{LaunchTime: now.Add(-24 * time.Hour)}, now))
	require.False(t, agedOut(day, model.InstanceView{LaunchTime: now.Add(-23 * time.Hour)}, now))
	require.False(t, agedOut(day, model.InstanceView{}, now), "launch time unknown")
	require.False(t, agedOut(model.Target{}, model.InstanceView{LaunchTime: now.Add(-1000 * time.Hour)}, now), "no tag")
}

// TestMaxInstanceAgeNoteSaysWhyTheAgeIsNotEnforced: a group tagged patch-agent/max-instance-age gets a status
// note whenever detectAged cannot start an age-driven rollout — the source unreadable, naming the AMI a manual
// rollback left, the target refused, halted or rolled back — and none while the age is enforced (Idle or
// Completed on the source's AMI), while a rollout is under way, or when the source names a new AMI.
func TestMaxInstanceAgeNoteSaysWhyTheAgeIsNotEnforced(t *testing.T) {
	aged := model.Target{Group: "g", Policy: model.TargetPolicy{MaxInstanceAge: 24 * time.Hour}}
	src := func(id string) *model.ResolvedAMI { return &model.ResolvedAMI{Parameter: "/p", ImageID: id} }
	for _, tc := range []struct {
		name string
		t    model.Target
		ami  *model.ResolvedAMI
		r    state.Rollout
		want string // "" for no note
	}{
		{"enforced: completed on the source's AMI", aged, src("ami-a"), state.Rollout{Phase: state.PhaseCompleted, TargetImageID: "ami-a"}, ""},
		{"no tag", model.Target{Group: "g"}, nil, state.Rollout{Phase: state.PhaseCompleted, TargetImageID: "ami-a"}, ""},
		{"a rollout under way replaces aged instances itself", aged, src("ami-a"), state.Rollout{Phase: state.PhaseReplacing, TargetImageID: "ami-a"}, ""},
		{"a new AMI starts its own rollout", aged, src("ami-c"), state.Rollout{Phase: state.PhaseCompleted, TargetImageID: "ami-a"}, ""},
		{"source unreadable", aged, nil, state.Rollout{Phase: state.PhaseCompleted, TargetImageID: "ami-a"}, "the group's AMI source cannot be read"},
		{"after a manual rollback", aged, src("ami-b"), state.Rollout{Phase: state.PhaseCompleted, TargetImageID: "ami-a", RollbackFrom: "ami-b"},
			"the source names AMI ami-b, which a manual rollback moved the group away from (its target is ami-a)"},
		{"refused AMI", aged, src("ami-b"), state.Rollout{Phase: state.PhaseWaiting, TargetImageID: "ami-b", Reason: model.AMIRefusedPrefix + "not available"},
			"the source's AMI ami-b is refused by the AMI gate"},
		{"rolled back", aged, src("ami-b"), state.Rollout{Phase: state.PhaseRolledBack, TargetImageID: "ami-b"}, "the rollout to AMI ami-b is RolledBack"},
		{"halted", aged, src("ami-b"), state.Rollout{Phase: state.PhaseHalted, TargetImageID: "ami-b"}, "the rollout to AMI ami-b is Halted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Orchestrator{Log: zap.NewNop()}
			note := o.maxAgeNote(tc.t, tc.ami, tc.r)
			if tc.want == "" {
				require.Empty(t, note)
				return
			}
			require.Contains(t, note, "tag patch-agent/max-instance-age=24h0m0s not enforced: "+tc.want)
		})
	}
}
