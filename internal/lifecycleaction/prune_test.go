package lifecycleaction

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A process that runs for months does not keep something of every lifecycle action it ever handled: a
// heartbeat older than the longest an action can last (48 h) and a kept record whose claim lapsed are
// forgotten at the next prune (at most a minute apart); a live action's heartbeat and claimed record stay.
func TestWhatNoActionCanNeedIsForgotten(t *testing.T) {
	r := newRig(t)
	h := r.hooks
	claimed := func(key string) state.Hook {
		return state.Hook{Token: key}.WithLease(h.leases().Claim(h.Owner, r.clock.Now()))
	}
	h.beatAccepted("old-beat", r.clock.Now())
	h.keepHook(claimed("old-record"))
	r.clock.Step(providers.MaxGlobalTimeout + time.Minute)

	h.beatAccepted("live-beat", r.clock.Now())
	h.keepHook(claimed("live-record"))
	require.True(t, h.lastBeat("old-beat").IsZero(), "a heartbeat older than any action can last")
	require.False(t, h.lastBeat("live-beat").IsZero())
	h.mu.Lock()
	_, oldKept := h.kept["old-record"]
	_, liveKept := h.kept["live-record"]
	h.mu.Unlock()
	require.False(t, oldKept, "a record whose claim lapsed")
	require.True(t, liveKept)
	_, ok := h.Kept("live-record")
	require.True(t, ok)
}
