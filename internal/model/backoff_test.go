package model

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/state"
)

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

func TestRetriesBackOffExponentiallyUpToTheCap(t *testing.T) {
	tests := []struct {
		name    string
		backoff wait.Backoff
		want    []time.Duration
	}{
		{
			name:    "default without jitter: 5 s times 1.5, capped at 2 minutes",
			backoff: func() wait.Backoff { b := DefaultBackoff(); b.Jitter = 0; return b }(),
			want: []time.Duration{5 * time.Second, 7500 * time.Millisecond, 11250 * time.Millisecond, 16875 * time.Millisecond,
				25312500 * time.Microsecond, 37968750 * time.Microsecond, 56953125 * time.Microsecond, 85429687500, 2 * time.Minute, 2 * time.Minute},
		},
		{
			name:    "doubling",
			backoff: wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 10 * time.Second},
			want:    []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Retries{Backoff: tt.backoff, Clock: testingclock.NewFakeClock(t0)}
			var got []time.Duration
			for range tt.want {
				got = append(got, r.Failed("g", time.Time{}))
			}
			require.Equal(t, tt.want, got)
			require.Equal(t, len(tt.want), r.Failures("g"))
		})
	}
}

func TestRetriesJitterStaysWithinItsShareAndTheCap(t *testing.T) {
	r := &Retries{Backoff: DefaultBackoff(), Clock: testingclock.NewFakeClock(t0), Rand: rand.New(rand.NewPCG(1, 2))}
	base := 5 * time.Second
	sawJitter := false
	for i := range 30 {
		d := r.Failed("g", time.Time{})
		require.LessOrEqual(t, d, 2*time.Minute, "attempt %d: the cap bounds the jittered delay", i)
		if base < 2*time.Minute {
			require.GreaterOrEqual(t, d, base, "attempt %d", i)
			require.LessOrEqual(t, d, base+base/5, "attempt %d: at most 20 %% more", i)
			sawJitter = sawJitter || d != base
		}
		base = min(time.Duration(float64(base)*1.5), 2*time.Minute)
	}
	require.True(t, sawJitter)
}

func TestRetriesDueSucceededAndDeadline(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	r := &Retries{Backoff: wait.Backoff{Duration: 10 * time.Second, Factor: 2, Steps: 100, Cap: time.Minute}, Clock: clk}
	require.True(t, r.Due("g"), "nothing failed yet")
	r.Failed("g", time.Time{})
	require.False(t, r.Due("g"))
	require.True(t, r.Due("other"), "per key")
	clk.Step(10 * time.Second)
	require.True(t, r.Due("g"))
	require.Equal(t, 20*time.Second, r.Failed("g", time.Time{}))

	require.Equal(t, 5*time.Second, r.Failed("g", clk.Now().Add(5*time.Second)), "a deadline ahead comes first")
	require.Equal(t, 3, r.Failures("g"))
	require.Equal(t, time.Minute, r.Failed("g", clk.Now().Add(-time.Second)), "a deadline already passed bounds nothing")

	r.Succeeded("g")
	require.True(t, r.Due("g"))
	require.Zero(t, r.Failures("g"))
	require.Equal(t, 10*time.Second, r.Failed("g", time.Time{}), "a success starts the backoff again")
}

func TestLookAgainByRenewsTheLease(t *testing.T) {
	lease := t0.Add(2 * time.Minute)
	tests := []struct {
		name string
		r    state.Rollout
		want time.Time
	}{
		{name: "idle, no lease: unbounded", r: state.Rollout{Phase: state.PhaseIdle}},
		{name: "lease renewal", r: state.Rollout{LeaseExpires: lease}, want: lease.Add(-30 * time.Second)},
		{
			name: "an older agent's step bounds nothing: only the lease",
			r: state.Rollout{LeaseExpires: t0.Add(time.Hour),
				Current: &state.Replacement{Step: state.StepDraining, StepStartedAt: t0.Add(-29 * time.Minute)}},
			want: t0.Add(time.Hour - 30*time.Second),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, LookAgainBy(tt.r))
		})
	}
}
