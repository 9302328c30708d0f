package state

import "time"

// DefaultLeaseTTL is how long a lease lasts without renewal when no TTL is configured (`--lease-ttl`).
const DefaultLeaseTTL = 2 * time.Minute

// MinLeaseTTL is the shortest lease TTL the agent accepts: its margin (a quarter) must outlast a reconcile
// tick's DynamoDB round trips and the clock skew between replicas.
const MinLeaseTTL = 10 * time.Second

// Lease is one owner's claim on a record (a rollout, a lifecycle action, an EKS upgrade workflow): Owner
// acts on the record until Expires. Expires is written with the writer's clock, and every write of the
// record is also conditional on its version, so a lease is never the only fence.
type Lease struct {
	Owner   string
	Expires time.Time
}

// LeaseRule is the one rule every lease user follows, with a skew margin of a quarter of the TTL on both
// sides of the expiry, so that replicas whose clocks differ by up to a quarter of the TTL each (half the TTL
// between them) never both act:
//
//   - another owner's lease counts as held until Expires + margin (HeldByOther);
//   - an owner stops acting on its own lease margin before Expires (MayAct), and renews it once less than
//     half the TTL is left (RenewDue), so a live owner never reaches the margin.
//
// The zero value uses DefaultLeaseTTL.
type LeaseRule struct {
	// TTL is how long a new or renewed lease lasts; <= 0 means DefaultLeaseTTL.
	TTL time.Duration
}

// ttl returns the effective TTL.
func (p LeaseRule) ttl() time.Duration {
	if p.TTL > 0 {
		return p.TTL
	}
	return DefaultLeaseTTL
}

// EffectiveTTL returns how long a new or renewed lease lasts: TTL, or DefaultLeaseTTL when it is <= 0.
func (p LeaseRule) EffectiveTTL() time.Duration { return p.ttl() }

// Margin is the clock skew the rule tolerates on each side of an expiry: a quarter of the TTL.
func (p LeaseRule) Margin() time.Duration { return p.ttl() / 4 }

// Claim returns owner's lease taken or renewed at now: it expires at now + TTL.
func (p LeaseRule) Claim(owner string, now time.Time) Lease {
	return Lease{Owner: owner, Expires: now.Add(p.ttl())}
}

// HeldByOther reports whether l is held by an owner other than me at now: its Expires + margin is still
// ahead. A lease without an owner is held by nobody.
func (p LeaseRule) HeldByOther(l Lease, me string, now time.Time) bool {
	return l.Owner != "" && l.Owner != me && now.Before(l.Expires.Add(p.Margin()))
}

// MayAct reports whether me may act on l at now: it is me's lease and more than the margin is left before
// Expires. A stale owner (its process stalled, its clock jumped) must renew (a conditional write) first.
func (p LeaseRule) MayAct(l Lease, me string, now time.Time) bool {
	return l.Owner == me && now.Before(l.Expires.Add(-p.Margin()))
}

// RenewDue reports whether me should write a renewal of l at now: it is not me's lease, or less than half
// the TTL is left. Call it only once HeldByOther is false.
func (p LeaseRule) RenewDue(l Lease, me string, now time.Time) bool {
	return l.Owner != me || l.Expires.Sub(now) < p.ttl()/2
}

// Lease returns the rollout's lease on its target.
func (r Rollout) Lease() Lease { return Lease{Owner: r.LeaseOwner, Expires: r.LeaseExpires} }

// Lease returns the claim of the replica working on the lifecycle action.
func (h Hook) Lease() Lease { return Lease{Owner: h.Owner, Expires: h.OwnerExpires} }

// Lease returns the lease of the invocation running the workflow.
func (w Workflow) Lease() Lease { return Lease{Owner: w.LeaseOwner, Expires: w.LeaseExpires} }

// Leased is a versioned record that carries one Lease: Rollout, Hook and Workflow. Every user of a lease
// (the rollout engine, lifecycle actions, the EKS upgrade workflow) reads it with Lease, writes it with
// WithLease, and decides with LeaseRule (held by another, renew, take over); storetest.RunLeases is the one
// conformance test every such record passes on every store.
type Leased[T any] interface {
	Lease() Lease
	// WithLease returns a copy of the record carrying l.
	WithLease(l Lease) T
}

var (
	_ Leased[Rollout]  = Rollout{}
	_ Leased[Hook]     = Hook{}
	_ Leased[Workflow] = Workflow{}
)

// WithLease returns r carrying l (LeaseOwner, LeaseExpires).
func (r Rollout) WithLease(l Lease) Rollout {
	r.LeaseOwner, r.LeaseExpires = l.Owner, l.Expires
	return r
}

// WithLease returns h carrying l (Owner, OwnerExpires).
func (h Hook) WithLease(l Lease) Hook {
	h.Owner, h.OwnerExpires = l.Owner, l.Expires
	return h
}

// WithLease returns w carrying l (LeaseOwner, LeaseExpires).
func (w Workflow) WithLease(l Lease) Workflow {
	w.LeaseOwner, w.LeaseExpires = l.Owner, l.Expires
	return w
}
