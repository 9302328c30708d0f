package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// leaseTTL is the agent's default lease TTL; margin its skew margin (a quarter).
var (
	leaseTTL = state.DefaultLeaseTTL
	margin   = state.LeaseRule{}.Margin()
)

// replicaClock is one replica's view of time: the account's clock shifted by offset, or frozen while the
// replica is stalled (a paused process: SIGSTOP, a long GC pause, a VM migration). On resume it reads the
// account's time again, as a wall clock does after a pause. Timers come from the account's clock.
type replicaClock struct {
	*testingclock.FakeClock
	offset time.Duration
	mu     sync.Mutex
	frozen *time.Time
}

func (c *replicaClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen != nil {
		return *c.frozen
	}
	return c.FakeClock.Now().Add(c.offset)
}

func (c *replicaClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *replicaClock) stall() {
	now := c.Now()
	c.mu.Lock()
	c.frozen = &now
	c.mu.Unlock()
}

func (c *replicaClock) resume() {
	c.mu.Lock()
	c.frozen = nil
	c.mu.Unlock()
}

// write is one refresh or lifecycle call an agent made, and which replica made it.
type write struct {
	actor, call string
}

// recordingASG records the instance refresh starts and lifecycle action completions of every replica, tagged
// with the replica the test says is running (replicas run one at a time in these tests).
type recordingASG struct {
	awsapi.AutoScaling
	mu     sync.Mutex
	actor  string
	writes []write
}

func (r *recordingASG) setActor(a string) {
	r.mu.Lock()
	r.actor = a
	r.mu.Unlock()
}

func (r *recordingASG) record(call string) {
	r.mu.Lock()
	r.writes = append(r.writes, write{actor: r.actor, call: call})
	r.mu.Unlock()
}

func (r *recordingASG) StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	r.record("StartInstanceRefresh")
	return r.AutoScaling.StartInstanceRefresh(ctx, in, o...)
}

func (r *recordingASG) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	r.record("CompleteLifecycleAction")
	return r.AutoScaling.CompleteLifecycleAction(ctx, in, o...)
}

// by returns the calls named call that actor made, between the indexes from and to (-1: the end).
func (r *recordingASG) by(actor, call string, from, to int) []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	if to < 0 {
		to = len(r.writes)
	}
	var out []write
	for _, w := range r.writes[from:to] {
		if w.actor == actor && w.call == call {
			out = append(out, w)
		}
	}
	return out
}

func (r *recordingASG) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.writes)
}

// calls counts the calls named call of every replica.
func (r *recordingASG) calls(call string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.writes {
		if w.call == call {
			n++
		}
	}
	return n
}

// leaseWorld is a 3-instance group (baseline desired 3, max 6, min as given), rolled by instance refresh, with
// recorded AWS writes.
func leaseWorld(t *testing.T, minSize int32) (*testworld.World, testworld.GroupSetup, *recordingASG) {
	t.Helper()
	g := testworld.GroupSetup{Name: "lease-asg", Min: minSize, Max: 6, Desired: 3}
	spec := oneGroup(&g)
	rec := &recordingASG{}
	spec.Wrap = func(c agent.Clients) agent.Clients {
		rec.AutoScaling = c.AutoScaling
		c.AutoScaling = rec
		return c
	}
	return build(t, spec), g, rec
}

// requireOneCompletionPerAction asserts that every lifecycle action got exactly one CompleteLifecycleAction
// call from the agents.
func requireOneCompletionPerAction(t *testing.T, w *testworld.World) {
	t.Helper()
	calls := map[string]int{}
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Caller == "api" && c.Result != "" {
			calls[c.Token]++
		}
	}
	for token, n := range calls {
		require.Equal(t, 1, n, "one CompleteLifecycleAction for %s", token)
	}
}

func historyEvents(t *testing.T, s state.Store, group string) []string {
	t.Helper()
	hist, err := s.History(context.Background(), group)
	require.NoError(t, err)
	out := []string{}
	for _, e := range hist {
		out = append(out, e.Event)
	}
	return out
}

// TestLeaseSkewQuarterTTLReplicasNeverTakeALiveReplicasLease: two replicas whose clocks are a quarter of the
// lease TTL ahead and behind the account's roll one group, ticking one after the other. The lease holder is
// alive and renews at half-life, so the lease never changes hands (without the skew margin, a replica ahead
// takes a lease written by one behind at the tick its expiry shows on its own clock), one instance refresh,
// every lifecycle action completed once, one "detected" and one "completed" history row.
func TestLeaseSkewQuarterTTLReplicasNeverTakeALiveReplicasLease(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, second time.Duration // clock offsets; the first replica ticks first and takes the lease
	}{
		{"holder ahead by TTL/4, other behind by TTL/4", margin, -margin},
		{"holder behind by TTL/4, other ahead by TTL/4", -margin, margin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, g, rec := leaseWorld(t, 3)
			ctx := context.Background()
			names := []string{"replica-a", "replica-b"}
			replicas := []*agent.Agent{
				w.NewReplicaWith(names[0], &replicaClock{FakeClock: w.Account.Clock(), offset: tc.first}, w.Store),
				w.NewReplicaWith(names[1], &replicaClock{FakeClock: w.Account.Clock(), offset: tc.second}, w.Store),
			}
			w.PublishAMI(g.Parameter, testworld.ImageB)
			owners := []string{}
			for range 3000 {
				for i, a := range replicas {
					rec.setActor(names[i])
					_ = a.RunOnce(ctx)
					require.Empty(t, w.Checker.Check())
				}
				r := w.Rollout(ctx, g.Name)
				if r.Active() && (len(owners) == 0 || owners[len(owners)-1] != r.LeaseOwner) {
					owners = append(owners, r.LeaseOwner)
				}
				w.Account.Advance(tick)
				if r.Phase == state.PhaseCompleted {
					break
				}
			}
			for range 36 { // 3 minutes for the last lifecycle actions
				for i, a := range replicas {
					rec.setActor(names[i])
					_ = a.RunOnce(ctx)
				}
				w.Account.Advance(tick)
			}
			require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase)
			require.Equal(t, []string{"replica-a"}, owners, "the live holder's lease never changes hands")
			requireAllOn(t, w, g.Name, testworld.ImageB, 3)
			require.Equal(t, 6, w.Account.LaunchedInstances(g.Name), "one new instance per old one")
			require.Equal(t, 1, rec.calls("StartInstanceRefresh"), "one refresh, never a second")
			requireOneCompletionPerAction(t, w)
			require.Equal(t, []string{"detected", "completed"}, historyEvents(t, w.Store, g.Name))
			require.Empty(t, w.Checker.Violations)
		})
	}
}

// stallingStore is one replica's store: when stallOn says so after a successful write, the replica stalls
// there (stall runs the rest of the world meanwhile) and then carries on with its in-memory view, stale by
// now. It stalls once.
type stallingStore struct {
	state.Store
	stallOn   func(r *state.Rollout, h *state.Hook) bool
	stall     func()
	triggered bool
}

func (s *stallingStore) maybeStall(r *state.Rollout, h *state.Hook) {
	if !s.triggered && s.stallOn(r, h) {
		s.triggered = true
		s.stall()
	}
}

func (s *stallingStore) PutRollout(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	out, err := s.Store.PutRollout(ctx, r)
	if err == nil {
		s.maybeStall(&out, nil)
	}
	return out, err
}

func (s *stallingStore) PutRolloutWithHistory(ctx context.Context, r state.Rollout, h []state.HistoryEntry) (state.Rollout, error) {
	out, err := s.Store.PutRolloutWithHistory(ctx, r, h)
	if err == nil {
		s.maybeStall(&out, nil)
	}
	return out, err
}

func (s *stallingStore) PutRolloutUnlessPaused(ctx context.Context, r state.Rollout, h []state.HistoryEntry, now time.Time, claim *state.ClusterBudget) (state.Rollout, error) {
	out, err := s.Store.PutRolloutUnlessPaused(ctx, r, h, now, claim)
	if err == nil {
		s.maybeStall(&out, nil)
	}
	return out, err
}

func (s *stallingStore) PutHook(ctx context.Context, h state.Hook) (state.Hook, error) {
	out, err := s.Store.PutHook(ctx, h)
	if err == nil {
		s.maybeStall(nil, &out)
	}
	return out, err
}

// TestStalledReplicaWakesWithAStaleViewAndStartsNoSecondRefresh: replica A records the write-ahead of its
// instance refresh (Replacing, the refresh without its id yet) and stalls before StartInstanceRefresh; its clock
// stops while replica B's goes on. B takes the target over once A's lease plus the margin has passed, starts
// the refresh and follows it until an instance is replaced. A wakes in the same tick with its stale record and
// group view: its lease is within the margin, so it must renew first — a conditional write that fails —
// instead of calling StartInstanceRefresh from its stale record.
func TestStalledReplicaWakesWithAStaleViewAndStartsNoSecondRefresh(t *testing.T) {
	w, g, rec := leaseWorld(t, 3)
	ctx := context.Background()
	clockA := &replicaClock{FakeClock: w.Account.Clock()}
	b := w.NewReplica("replica-b")
	woke, wokeEnd := -1, -1 // A's calls from its wake-up to the end of that tick
	storeA := &stallingStore{Store: w.Store,
		stallOn: func(r *state.Rollout, _ *state.Hook) bool {
			return r != nil && r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID == ""
		},
		stall: func() {
			clockA.stall()
			stalledAt := w.Account.Clock().Now()
			for range 2000 {
				rec.setActor("replica-b")
				_ = b.RunOnce(ctx)
				require.Empty(t, w.Checker.Check())
				w.Account.Advance(tick)
				if r := w.Rollout(ctx, g.Name); r.OnTarget >= 1 && r.LeaseOwner == "replica-b" {
					break
				}
			}
			r := w.Rollout(ctx, g.Name)
			require.Equal(t, "replica-b", r.LeaseOwner, "B took the target over during the stall")
			require.NotNil(t, r.Refresh)
			require.NotEmpty(t, r.Refresh.ID, "B started the refresh A was about to start")
			require.GreaterOrEqual(t, r.OnTarget, 1, "and it replaced an instance")
			require.Greater(t, w.Account.Clock().Since(stalledAt), leaseTTL+margin)
			require.Len(t, rec.by("replica-b", "StartInstanceRefresh", 0, -1), 1, "the one refresh is B's")
			clockA.resume()
			rec.setActor("replica-a")
			woke = rec.count()
		},
	}
	a := w.NewReplicaWith("replica-a", clockA, storeA)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	for range 3000 {
		rec.setActor("replica-a")
		_ = a.RunOnce(ctx)
		if woke >= 0 && wokeEnd < 0 {
			wokeEnd = rec.count()
		}
		require.Empty(t, w.Checker.Check())
		rec.setActor("replica-b")
		_ = b.RunOnce(ctx)
		require.Empty(t, w.Checker.Check())
		w.Account.Advance(tick)
		if w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted {
			break
		}
	}
	require.True(t, storeA.triggered, "A stalled")
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase)
	require.GreaterOrEqual(t, wokeEnd, woke)
	require.Empty(t, rec.by("replica-a", "StartInstanceRefresh", woke, -1), "A started no refresh from its stale view, then or later")
	require.Equal(t, 1, rec.calls("StartInstanceRefresh"), "one refresh in all, B's")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	require.Equal(t, 6, w.Account.LaunchedInstances(g.Name), "one new instance per old one")
	settle(t, w, 3*time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 3)
	requireOneCompletionPerAction(t, w)
	require.Empty(t, w.Checker.Violations)
}

// TestStalledReplicaDoesNotCompleteALifecycleActionTwice: replica A drains an instance for a scale-in's
// terminating lifecycle action, records that it is completing it, and stalls before CompleteLifecycleAction.
// The message comes back to replica B after its visibility timeout; B takes the action over once A's claim
// plus the margin has passed and completes it. A wakes with its stale record: its claim is within the margin,
// so it does not call CompleteLifecycleAction a second time.
func TestStalledReplicaDoesNotCompleteALifecycleActionTwice(t *testing.T) {
	w, g, rec := leaseWorld(t, 2)
	ctx := context.Background()
	clockA := &replicaClock{FakeClock: w.Account.Clock()}
	b := w.NewReplica("replica-b")
	woke, wokeEnd := -1, -1
	var token string
	storeA := &stallingStore{Store: w.Store,
		stallOn: func(_ *state.Rollout, h *state.Hook) bool { return h != nil && h.State == state.HookCompleting },
		stall: func() {
			clockA.stall()
			for range 2000 {
				rec.setActor("replica-b")
				_ = b.RunOnce(ctx)
				require.Empty(t, w.Checker.Check())
				w.Account.Advance(tick)
				if n := len(rec.by("replica-b", "CompleteLifecycleAction", 0, -1)); n > 0 {
					break
				}
			}
			require.Len(t, rec.by("replica-b", "CompleteLifecycleAction", 0, -1), 1, "B completed the action A stalled on")
			clockA.resume()
			rec.setActor("replica-a")
			woke = rec.count()
		},
	}
	a := w.NewReplicaWith("replica-a", clockA, storeA)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, g.Desired-1)) // a scale-in: one terminating lifecycle action
	w.Checker.Baseline[g.Name] = g.Desired - 1
	for range 200 {
		rec.setActor("replica-a")
		_ = a.RunOnce(ctx)
		if woke >= 0 && wokeEnd < 0 {
			wokeEnd = rec.count()
		}
		rec.setActor("replica-b")
		_ = b.RunOnce(ctx)
		require.Empty(t, w.Checker.Check())
		w.Account.Advance(tick)
	}
	require.True(t, storeA.triggered, "A stalled")
	require.GreaterOrEqual(t, wokeEnd, woke)
	require.Empty(t, rec.by("replica-a", "CompleteLifecycleAction", woke, -1), "A did not complete the action again, then or later")
	completions := 0
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Caller == "api" && c.Result != "" {
			completions++
			token = model.ActionKey(c.Group, c.InstanceID, c.Hook)
		}
	}
	require.Equal(t, 1, completions, "one CompleteLifecycleAction in all")
	h, err := w.Store.GetHook(ctx, token)
	require.NoError(t, err)
	require.Equal(t, state.HookCompleted, h.State)
	require.Empty(t, w.Checker.Violations)
}

// barrierStore holds each replica's first ListRollouts until every replica has made it, so that replicas
// started together all read the table before any of them writes.
type barrierStore struct {
	state.Store
	arrive  *sync.WaitGroup
	all     chan struct{}
	arrived bool
}

func (s *barrierStore) ListRollouts(ctx context.Context) ([]state.Rollout, error) {
	list, err := s.Store.ListRollouts(ctx)
	if !s.arrived {
		s.arrived = true
		s.arrive.Done()
		select {
		case <-s.all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return list, err
}

// TestHistoryRowOnlyWithItsTransition: two replicas start together and both see the new AMI with no rollout
// record yet; both decide "detected", exactly one conditional write wins, and only the winner's history row
// exists: the row is written in the same atomic write as the transition it records.
func TestHistoryRowOnlyWithItsTransition(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d replicas", n), func(t *testing.T) {
			w, g, _ := leaseWorld(t, 3)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var arrive sync.WaitGroup
			arrive.Add(n)
			all := make(chan struct{})
			go func() { arrive.Wait(); close(all) }()
			var replicas []*agent.Agent
			for i := range n {
				s := &barrierStore{Store: w.Store, arrive: &arrive, all: all}
				replicas = append(replicas, w.NewReplicaWith(fmt.Sprintf("replica-%d", i), w.Account.Clock(), s))
			}
			w.PublishAMI(g.Parameter, testworld.ImageB)
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i, a := range replicas {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = a.RunOnce(ctx) }()
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			r := w.Rollout(ctx, g.Name)
			require.True(t, r.Active(), "the winner's rollout is under way: %+v", r)
			require.Equal(t, []string{"detected"}, historyEvents(t, w.Store, g.Name), "one row: the losers' decisions left none")
		})
	}
}
