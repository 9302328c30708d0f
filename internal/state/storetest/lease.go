package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// leasedKind is one versioned record kind with a lease, seen through the same three operations.
type leasedKind[T state.Leased[T]] struct {
	name    string
	fresh   func() T
	get     func(ctx context.Context, s WorkflowStore) (T, error)
	put     func(ctx context.Context, s WorkflowStore, r T) (T, error)
	version func(T) int64
}

// RunLeases is the one lease conformance test of every versioned record that carries a lease (rollouts,
// lifecycle actions, EKS upgrade workflows; state.Leased): a live lease is held against another owner until
// its expiry plus the skew margin; its owner renews it at half-life; once it is past expiry plus margin
// another owner takes it over with a conditional write, and the old owner's write from its stale read then
// conflicts and changes nothing (state.LeaseRule, docs/architecture.md "Leases"). newStore must return a new,
// empty store for each subtest.
func RunLeases(t *testing.T, newStore func(t *testing.T) WorkflowStore) {
	t.Helper()
	runLease(t, newStore, leasedKind[state.Rollout]{name: "rollout",
		fresh: func() state.Rollout { return state.Rollout{Group: "prod", Phase: state.PhaseReplacing} },
		get:   func(ctx context.Context, s WorkflowStore) (state.Rollout, error) { return s.GetRollout(ctx, "prod") },
		put: func(ctx context.Context, s WorkflowStore, r state.Rollout) (state.Rollout, error) {
			return s.PutRollout(ctx, r)
		},
		version: func(r state.Rollout) int64 { return r.Version }})
	runLease(t, newStore, leasedKind[state.Hook]{name: "lifecycle action",
		fresh: func() state.Hook {
			return state.Hook{Token: "tok-1", Group: "prod", InstanceID: "i-1", State: state.HookDraining}
		},
		get:     func(ctx context.Context, s WorkflowStore) (state.Hook, error) { return s.GetHook(ctx, "tok-1") },
		put:     func(ctx context.Context, s WorkflowStore, h state.Hook) (state.Hook, error) { return s.PutHook(ctx, h) },
		version: func(h state.Hook) int64 { return h.Version }})
	runLease(t, newStore, leasedKind[state.Workflow]{name: "upgrade workflow",
		fresh: func() state.Workflow {
			return state.Workflow{Cluster: "prod", To: "1.31", Phase: state.WorkflowRunning}
		},
		get: func(ctx context.Context, s WorkflowStore) (state.Workflow, error) { return s.GetWorkflow(ctx, "prod") },
		put: func(ctx context.Context, s WorkflowStore, w state.Workflow) (state.Workflow, error) {
			return s.PutWorkflow(ctx, w)
		},
		version: func(w state.Workflow) int64 { return w.Version }})
}

func runLease[T state.Leased[T]](t *testing.T, newStore func(t *testing.T) WorkflowStore, k leasedKind[T]) {
	t.Run(k.name+": held, renewed, taken over; the old owner's stale write conflicts", func(t *testing.T) {
		c := ctx(t)
		s := newStore(t)
		rule := state.LeaseRule{TTL: 2 * time.Minute} // margin 30 s
		t0 := at.UTC().Truncate(time.Second)

		a, err := k.put(c, s, k.fresh().WithLease(rule.Claim("a", t0)))
		require.NoError(t, err)
		require.Equal(t, state.Lease{Owner: "a", Expires: t0.Add(2 * time.Minute)}, leaseOf(t, c, k, s), "the claim round-trips")

		// b reads while a's lease is live (and within the margin after its expiry): held.
		seen, err := k.get(c, s)
		require.NoError(t, err)
		require.True(t, rule.HeldByOther(seen.Lease(), "b", t0.Add(2*time.Minute+29*time.Second)))
		require.False(t, rule.RenewDue(seen.Lease(), "a", t0.Add(59*time.Second)), "a renews only at half-life")
		require.True(t, rule.RenewDue(seen.Lease(), "a", t0.Add(61*time.Second)))

		// a renews at half-life: its lease moves on.
		a, err = k.put(c, s, a.WithLease(rule.Claim("a", t0.Add(61*time.Second))))
		require.NoError(t, err)
		stale := a // a's view before it stalls
		require.Equal(t, t0.Add(3*time.Minute+time.Second), leaseOf(t, c, k, s).Expires)

		// a stalls; past expiry + margin b takes over from a fresh read.
		takeOver := t0.Add(3*time.Minute + time.Second + 31*time.Second)
		seen, err = k.get(c, s)
		require.NoError(t, err)
		require.False(t, rule.HeldByOther(seen.Lease(), "b", takeOver))
		require.False(t, rule.MayAct(seen.Lease(), "a", takeOver), "a may not act on its lapsed lease")
		b, err := k.put(c, s, seen.WithLease(rule.Claim("b", takeOver)))
		require.NoError(t, err)
		require.Equal(t, "b", leaseOf(t, c, k, s).Owner)

		// a wakes and renews from its stale view: the conditional write refuses it and changes nothing.
		_, err = k.put(c, s, stale.WithLease(rule.Claim("a", takeOver.Add(time.Second))))
		require.True(t, errors.Is(err, state.ErrConflict), "stale renewal: %v", err)
		require.Equal(t, state.Lease{Owner: "b", Expires: takeOver.Add(2 * time.Minute)}, leaseOf(t, c, k, s))
		require.Equal(t, k.version(b), k.version(mustGet(t, c, k, s)))
	})
}

func mustGet[T state.Leased[T]](t *testing.T, c context.Context, k leasedKind[T], s WorkflowStore) T {
	t.Helper()
	r, err := k.get(c, s)
	require.NoError(t, err)
	return r
}

func leaseOf[T state.Leased[T]](t *testing.T, c context.Context, k leasedKind[T], s WorkflowStore) state.Lease {
	t.Helper()
	l := mustGet(t, c, k, s).Lease()
	l.Expires = l.Expires.UTC()
	return l
}
