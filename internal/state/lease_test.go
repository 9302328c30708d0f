package state_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

func TestLeaseRule(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rule := state.LeaseRule{TTL: 2 * time.Minute} // margin 30 s
	mine := rule.Claim("a", t0)                   // expires t0+2m
	require.Equal(t, t0.Add(2*time.Minute), mine.Expires)
	require.Equal(t, 30*time.Second, rule.Margin())
	require.Equal(t, 30*time.Second, state.LeaseRule{}.Margin(), "the zero rule uses the default TTL")

	for _, tc := range []struct {
		name                         string
		lease                        state.Lease
		me                           string
		at                           time.Duration // after t0
		heldByOther, mayAct, renewal bool
	}{
		{name: "free lease: nobody holds it, take it", lease: state.Lease{}, me: "b", at: 0, renewal: true},
		{name: "own fresh lease: act, no renewal", lease: mine, me: "a", at: 10 * time.Second, mayAct: true},
		{name: "own lease at half-life: act and renew", lease: mine, me: "a", at: 61 * time.Second, mayAct: true, renewal: true},
		{name: "own lease inside the margin: stop acting", lease: mine, me: "a", at: 90 * time.Second, renewal: true},
		{name: "own lease expired: stop acting", lease: mine, me: "a", at: 3 * time.Minute, renewal: true},
		{name: "other's lease before expiry: held", lease: mine, me: "b", at: time.Minute, heldByOther: true, renewal: true},
		{name: "other's lease just expired: still held for the margin", lease: mine, me: "b", at: 2*time.Minute + 29*time.Second, heldByOther: true, renewal: true},
		{name: "other's lease past expiry + margin: free", lease: mine, me: "b", at: 2*time.Minute + 30*time.Second, renewal: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.at)
			require.Equal(t, tc.heldByOther, rule.HeldByOther(tc.lease, tc.me, now), "HeldByOther")
			require.Equal(t, tc.mayAct, rule.MayAct(tc.lease, tc.me, now), "MayAct")
			require.Equal(t, tc.renewal, rule.RenewDue(tc.lease, tc.me, now), "RenewDue")
		})
	}
}

// TestLeaseSkewQuarterTTLNeverLetsTwoOwnersAct: with clocks a quarter of the TTL apart each way (half the TTL
// between them), at no real instant does the other replica see the lease free while its owner may still act.
func TestLeaseSkewQuarterTTLNeverLetsTwoOwnersAct(t *testing.T) {
	rule := state.LeaseRule{TTL: time.Minute}
	real0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{-15 * time.Second, 15 * time.Second} {
		ownerClock := func(real time.Time) time.Time { return real.Add(skew) }
		otherClock := func(real time.Time) time.Time { return real.Add(-skew) }
		l := rule.Claim("a", ownerClock(real0))
		for d := time.Duration(0); d < 3*time.Minute; d += 100 * time.Millisecond {
			real := real0.Add(d)
			acts := rule.MayAct(l, "a", ownerClock(real))
			free := !rule.HeldByOther(l, "b", otherClock(real))
			require.False(t, acts && free, "skew %s, %s after the claim: both replicas may act", skew, d)
		}
	}
}
