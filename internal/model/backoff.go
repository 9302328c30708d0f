package model

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// DefaultBackoff is the agent's own retry backoff for a workflow step that keeps failing: 5 s, times 1.5, up
// to 20 % jitter, capped at 2 minutes (5, 7.5, 11, 17, 25, 38, 57, 85, 120 ... seconds; a factor of 2 made
// runs with 20 % faults take a third longer than 1.5 did, docs/testing.md). The AWS SDK's standard retryer
// already retries each call a few times within a second or so; this backoff is for what survives it, so that
// a throttled or failing account is asked less often instead of on every tick (AWS General Reference, "Error
// retries and exponential backoff in AWS").
func DefaultBackoff() wait.Backoff {
	return wait.Backoff{Duration: 5 * time.Second, Factor: 1.5, Jitter: 0.2, Steps: math.MaxInt32, Cap: 2 * time.Minute}
}

// Retries holds, per key (a target's group, a lifecycle action's token), when a step that failed may be
// tried again: after a capped exponential backoff with jitter (Backoff, wait.Backoff's Duration, Factor,
// Jitter and Cap; Cap bounds the jittered delay too), never later than the deadline the caller gives (a drain
// or health deadline, a lease renewal). A success forgets the key. Safe for concurrent use; the zero value
// is not usable: set Clock (and Backoff, default DefaultBackoff).
type Retries struct {
	Backoff wait.Backoff
	Clock   clock.PassiveClock
	// Rand draws the jitter; nil: a source seeded from the clock's time at first use, so replicas started at
	// different times spread out, and a fake clock gives the same run every time.
	Rand *rand.Rand

	mu   sync.Mutex
	keys map[string]*retry
}

type retry struct {
	failures int
	backoff  wait.Backoff // this key's progression (jitter applied separately)
	next     time.Time
}

// Due reports whether key may be tried now: it has no failure recorded, or its backoff has passed.
func (r *Retries) Due(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[key]
	return !ok || !r.Clock.Now().Before(k.next)
}

// Failed records a failure of key and returns the delay until it is due again: the next backoff step, or
// less when by (a deadline still ahead) comes sooner.
func (r *Retries) Failed(key string, by time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]*retry{}
	}
	if r.Rand == nil {
		now := uint64(r.Clock.Now().UnixNano())
		r.Rand = rand.New(rand.NewPCG(now, now>>17|1))
	}
	k, ok := r.keys[key]
	if !ok {
		b := r.Backoff
		if b.Duration <= 0 {
			b = DefaultBackoff()
		}
		k = &retry{backoff: b}
		k.backoff.Jitter = 0
		r.keys[key] = k
	}
	k.failures++
	d := k.backoff.Step()
	if j := r.Backoff.Jitter; j > 0 {
		d += time.Duration(r.Rand.Float64() * j * float64(d))
	}
	if c := r.Backoff.Cap; c > 0 && d > c {
		d = c
	}
	now := r.Clock.Now()
	if by.After(now) && by.Before(now.Add(d)) { // a deadline already passed bounds nothing
		d = max(by.Sub(now), 0)
	}
	k.next = now.Add(d)
	return d
}

// Failures returns how many failures in a row key has had.
func (r *Retries) Failures(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.keys[key]; ok {
		return k.failures
	}
	return 0
}

// Succeeded forgets key's failures: the next failure starts the backoff again.
func (r *Retries) Succeeded(key string) {
	r.mu.Lock()
	delete(r.keys, key)
	r.mu.Unlock()
}

// leaseRenewalMargin is how long before its lease expires a backed-off target is looked at anyway, so the
// lease is renewed and another replica does not take a target this one still works on.
const leaseRenewalMargin = 30 * time.Second

// LookAgainBy returns the latest time a rollout whose step failed must be reconciled again whatever its
// backoff: leaseRenewalMargin before its lease expires, so the lease is renewed while the step keeps failing.
// Zero without a lease.
func LookAgainBy(r state.Rollout) time.Time {
	if r.LeaseExpires.IsZero() {
		return time.Time{}
	}
	return r.LeaseExpires.Add(-leaseRenewalMargin)
}

// NextAt returns when key is due again after its last failure; zero when no failure is recorded (it is due
// now). The agent's loop sets a timer on it so that a backed-off target is retried at its time, not at the
// next safety poll.
func (r *Retries) NextAt(key string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k, ok := r.keys[key]; ok {
		return k.next
	}
	return time.Time{}
}
