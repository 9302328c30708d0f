package sim

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// world is what every service of the account shares: the one lock, the clock, the options, the generator of
// identifiers, the API call counts, the scheduler of timed behaviour, the watchers, and the services themselves,
// so that one service asks another through a named method (Auto Scaling asks EC2 to run an instance, ECS to
// register it).
type world struct {
	mu        sync.Mutex
	advanceMu sync.Mutex

	clk   *testingclock.FakeClock
	opts  Options
	rng   *rand.Rand
	calls map[string]int
	sched scheduler
	// instant is set while setup helpers run: instances and tasks they create are ready at once.
	instant bool

	// watchers are called after every change (watch.go)
	watchers  []func(*View)
	notifying bool

	autoScaling *autoScalingService
	ec2         *ec2Service
	ecs         *ecsService
	eks         *eksService
	ssm         *ssmService
	sqs         *sqsService
	cloudWatch  *cloudWatchService
	eventBridge *eventBridgeService
	sts         *stsService
}

// call is the entry of every simulated API operation: it takes the world's lock, counts the call, honours a
// cancelled context and runs behaviour that fell due since the last call (for callers that moved the clock
// themselves). On success the caller must run the returned unlock.
func (w *world) call(ctx context.Context, op string) (unlock func(), err error) {
	w.mu.Lock()
	w.calls[op]++
	if ctx != nil {
		if err := ctx.Err(); err != nil {
			w.mu.Unlock()
			return nil, err
		}
	}
	w.runDueLocked()
	return w.mu.Unlock, nil
}

// lock is the entry of setup and observation helpers: no call is counted.
func (w *world) lock() func() {
	w.mu.Lock()
	w.runDueLocked()
	return w.mu.Unlock
}

// hold is the entry of bookkeeping that must not run behaviour that fell due (call counts, watchers,
// Advance between two events): it only takes the lock.
func (w *world) hold() func() {
	w.mu.Lock()
	return w.mu.Unlock
}

func (w *world) now() time.Time { return w.clk.Now() }

// settle runs the control loops that AWS runs continuously: Auto Scaling keeps each group at its desired
// capacity, ECS managed draining completes its hooks, and the ECS service scheduler keeps services at their
// desired count. Then it tells the watchers (OnChange). Callers hold the lock.
func (w *world) settle() {
	for i := 0; i < 10; i++ {
		changed := false
		if w.autoScaling.reconcileRefreshes() { // refresh.go: decides terminations and surge before the group reconciles
			changed = true
		}
		if w.autoScaling.reconcileGroups() {
			changed = true
		}
		if w.ecs.reconcileManagedDraining() {
			changed = true
		}
		if w.autoScaling.reconcileWarmPools() { // warmpool.go
			changed = true
		}
		if w.ecs.reconcileClusters() { // the ECS service scheduler
			changed = true
		}
		if !changed {
			break
		}
	}
	w.notifyWatchers()
}

// hex returns n random lowercase hexadecimal digits.
func (w *world) hex(n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, n)
	for i := range b {
		b[i] = digits[w.rng.IntN(16)]
	}
	return string(b)
}

// uuid returns a random version-4 UUID.
func (w *world) uuid() string {
	h := w.hex(32)
	variant := "89ab"[w.rng.IntN(4)]
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-" + string(variant) + h[17:20] + "-" + h[20:32]
}
