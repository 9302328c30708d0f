package agent_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// realTimeout bounds, in real time, how long a test waits for a goroutine it started: a handler that waits
// for the blocked pass never returns before the pass is released, so the wait ends here instead.
const realTimeout = 30 * time.Second

// blockingObserver blocks the first look at group block after it is armed, inside the look (its target
// guard held), until release is closed; and it reports any group looked at by two goroutines at once.
type blockingObserver struct {
	model.NopObserver
	armed   atomic.Bool
	block   string
	entered chan struct{} // closed when the blocked look began
	release chan struct{}
	overlap chan string // receives a group looked at twice at once

	once     sync.Once
	mu       sync.Mutex
	inFlight map[string]int
}

func newBlockingObserver(block string) *blockingObserver {
	return &blockingObserver{block: block, entered: make(chan struct{}), release: make(chan struct{}),
		overlap: make(chan string, 1), inFlight: map[string]int{}}
}

func (o *blockingObserver) TargetObserved(t model.Target, _ model.GroupView, _ state.Rollout, _ *model.ResolvedAMI) {
	o.mu.Lock()
	o.inFlight[t.Group]++
	n := o.inFlight[t.Group]
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.inFlight[t.Group]--
		o.mu.Unlock()
	}()
	if n > 1 {
		select {
		case o.overlap <- t.Group:
		default:
		}
	}
	if t.Group != o.block || !o.armed.Load() {
		return
	}
	first := false
	o.once.Do(func() { first = true })
	if first {
		close(o.entered)
		<-o.release
	}
}

// blockedPass builds groups a and b (b: 2 instances, its own parameter), lets the agent see them Idle, arms
// the observer and starts a pass that blocks in its look at block. It returns the world, the observer, the
// pass's result channel and the agent's log (info and above).
func blockedPass(t *testing.T, block string) (*testworld.World, *blockingObserver, chan error, *observer.ObservedLogs) {
	t.Helper()
	obs := newBlockingObserver(block)
	core, logs := observer.New(zapcore.InfoLevel)
	w := build(t, testworld.Spec{Observer: obs, Log: zap.New(core), Groups: []testworld.GroupSetup{
		{Name: "a", Cluster: "c1", Parameter: "/golden/a", Min: 1, Max: 2, Desired: 1},
		{Name: "b", Cluster: "c1", Parameter: "/golden/b", Min: 1, Max: 3, Desired: 2},
	}, Services: map[string]int{"web": 2}})
	settle(t, w, 30*time.Second)
	obs.armed.Store(true)
	pass := make(chan error, 1)
	go func() { pass <- w.Agent.Reconcile(context.Background()) }()
	t.Cleanup(func() {
		select {
		case <-obs.release:
		default:
			close(obs.release)
		}
	})
	select {
	case <-obs.entered:
	case <-time.After(realTimeout):
		t.Fatal("the pass never reached its look at " + block)
	}
	return w, obs, pass, logs
}

// pollAside handles what is on the queue on another goroutine (events.Consumer -> Agent.Handle) and returns
// the channel that receives how many messages it handled.
func pollAside(w *testworld.World) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := w.Agent.Consumer.PollOnce(context.Background(), 0)
		done <- err
	}()
	return done
}

// TestParameterChangeAndLifecycleActionAreHandledWhileAPassIsBlocked: message handling never waits for a
// whole-fleet pass. While a pass is stuck in its look at group a, a parameter change for group b starts b's
// rollout (durably: its record names the new AMI) and a terminate lifecycle action of b is taken up; when the
// pass then reaches b, it reads b's record again instead of acting on the one it read before b's rollout began
// (and losing its conditional write as if another replica had moved b).
func TestParameterChangeAndLifecycleActionAreHandledWhileAPassIsBlocked(t *testing.T) {
	w, obs, pass, logs := blockedPass(t, "a")
	ctx := context.Background()
	w.PublishAMI("/golden/b", testworld.ImageB)
	held := w.Agent.Consumer.Stats.Held.Load() + w.Agent.Consumer.Stats.Processed.Load()
	require.NoError(t, w.Account.SetDesiredCapacity("b", 1))
	w.Account.Advance(time.Second) // one of b's instances enters Terminating:Wait; its hook message waits
	visible, _ := w.Account.QueueDepth(w.QueueURL)
	require.Equal(t, 2, visible, "the parameter change and the lifecycle action are on the queue")

	select {
	case err := <-pollAside(w):
		require.NoError(t, err)
	case <-time.After(realTimeout):
		t.Fatal("handling the messages waited for the blocked pass")
	}
	require.Equal(t, testworld.ImageB, w.Rollout(ctx, "b").TargetImageID, "b's rollout began while the pass was blocked")
	require.Greater(t, w.Agent.Consumer.Stats.Held.Load()+w.Agent.Consumer.Stats.Processed.Load(), held,
		"the lifecycle action was taken up (held while its drain runs, or done)")
	select {
	case err := <-pass:
		t.Fatalf("the pass ended while blocked: %v", err)
	default:
	}

	close(obs.release)
	require.NoError(t, <-pass)
	require.Zero(t, logs.FilterMessageSnippet("rollout step failed").Len()+logs.FilterMessageSnippet("another replica moved the rollout first").Len(),
		"the pass read b's record again instead of acting on the one from before b's rollout began: %v", logs.FilterLevelExact(zapcore.InfoLevel).All())
	require.Equal(t, testworld.ImageB, w.Rollout(ctx, "b").TargetImageID)
	require.Empty(t, w.Checker.Check())
}

// TestOneTargetIsNeverAdvancedByTwoGoroutinesAtOnce: a parameter change for group b arriving while a pass is
// inside its look at b waits for that look to end before it advances b (the in-process target guard; the
// store's lease does the same across replicas), then starts b's rollout.
func TestOneTargetIsNeverAdvancedByTwoGoroutinesAtOnce(t *testing.T) {
	w, obs, pass, _ := blockedPass(t, "b")
	waited := make(chan string, 1)
	w.Agent.OnTargetWait(func(target string) {
		select {
		case waited <- target:
		default:
		}
	})
	w.PublishAMI("/golden/b", testworld.ImageB)
	polled := pollAside(w)
	select {
	case g := <-waited:
		require.Equal(t, "b", g, "the parameter change's look waits for the pass's look at b")
	case g := <-obs.overlap:
		t.Fatalf("group %s advanced by two goroutines at once", g)
	case <-polled:
		t.Fatal("the parameter change was handled without waiting for the look at b in progress")
	case <-time.After(realTimeout):
		t.Fatal("the parameter change's look never reached b")
	}
	close(obs.release)
	require.NoError(t, <-pass)
	require.NoError(t, <-polled)
	select {
	case g := <-obs.overlap:
		t.Fatalf("group %s advanced by two goroutines at once", g)
	default:
	}
	require.Equal(t, testworld.ImageB, w.Rollout(context.Background(), "b").TargetImageID)
}

// TestConcurrentPassesRollEveryGroupOfAFleetSafely: with 4 workers, 8 groups on two clusters sharing one
// parameter all roll to the new AMI, the invariant checker finding nothing after every step (run with -race).
func TestConcurrentPassesRollEveryGroupOfAFleetSafely(t *testing.T) {
	var groups []testworld.GroupSetup
	for i := range 8 {
		groups = append(groups, testworld.GroupSetup{Name: fmt.Sprintf("g%d", i), Cluster: fmt.Sprintf("c%d", i%2),
			Parameter: "/golden/fleet", Min: 1, Max: 3, Desired: 2})
	}
	w := build(t, testworld.Spec{Groups: groups, Workers: 4})
	ctx := context.Background()
	settle(t, w, 30*time.Second)
	w.PublishAMI("/golden/fleet", testworld.ImageB)
	done, err := w.RunUntil(ctx, tick, 6*time.Hour, func() bool {
		for _, g := range groups {
			if r := w.Rollout(ctx, g.Name); r.TargetImageID != testworld.ImageB || r.Active() {
				return false
			}
		}
		return true
	})
	require.NoError(t, err)
	require.True(t, done, "every group rolled")
	for _, g := range groups {
		requireAllOn(t, w, g.Name, testworld.ImageB, 2)
	}
	require.Empty(t, w.Checker.Finish())
}
