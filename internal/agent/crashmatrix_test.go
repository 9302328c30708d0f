package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

// crashScenario turns a strategy world of the fault matrix (faultScenarios) into a crash scenario: the same
// world and driver, and at the end the fault matrix's checks (every termination's lifecycle action completed
// by the agent, no message left behind) and the strategy's own.
func crashScenario(t *testing.T, name string) crash.CrashScenario {
	var sc faultScenario
	for _, s := range faultScenarios {
		if s.name == name {
			sc = s
		}
	}
	require.NotEmpty(t, sc.name, "no fault scenario %q", name)
	_, group := sc.spec()
	return crash.CrashScenario{
		Name: sc.name,
		Build: func() (*testworld.World, error) {
			spec, _ := sc.spec()
			return testworld.Build(spec)
		},
		Drive: func(w *testworld.World) error { sc.play(t, w, group); return nil },
		Final: func(w *testworld.World) error {
			if err := hooksAndQueueSettled(w, group); err != nil {
				return err
			}
			sc.check(t, w, group)
			return nil
		},
	}
}

// hooksAndQueueSettled is the fault matrix's end check of a crash run: every termination in group has its
// lifecycle action completed by the agent (invariant 4), and no message is left on the queue (invariant 8).
func hooksAndQueueSettled(w *testworld.World, group string) error {
	terminations, own := 0, 0
	for _, term := range w.Account.Terminations() {
		if term.Group == group {
			terminations++
		}
	}
	for _, cs := range acceptedCompletions(w) {
		if cs[0].Hook == testworld.HookName && cs[0].Group == group {
			own++
		}
	}
	if terminations != own {
		return fmt.Errorf("%d terminations in %s, %d of their lifecycle actions completed by the agent", terminations, group, own)
	}
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	if visible+inFlight != 0 {
		return fmt.Errorf("%d messages visible and %d in flight left on the queue", visible, inFlight)
	}
	return nil
}

// runCrashMatrix counts the scenario's effects N uncrashed, then for every k in 1..N plays it with the agent
// killed right after effect k, and with effect k applied, its response lost, then the agent killed; each run
// must complete, hold every invariant and repeat no effect (crash.RunCrashScenario). It logs N, the runs and
// the wall time (docs/testing.md, "Crash matrix").
func runCrashMatrix(t *testing.T, sc crash.CrashScenario) {
	start := time.Now()
	n, err := crash.CountCrashEffects(sc)
	require.NoError(t, err)
	runs := 1
	for k := 1; k <= n; k++ {
		for _, mode := range crash.CrashModes {
			t.Run(fmt.Sprintf("%s effect %d of %d", mode, k, n), func(t *testing.T) {
				run, err := crash.RunCrashScenario(sc, k, mode)
				require.NoError(t, err)
				require.Equal(t, 1, run.Restarts, "one crash, one fresh incarnation")
			})
			runs++
		}
	}
	t.Logf("crash matrix %s: N = %d effects, %d runs, %v wall", sc.Name, n, runs, time.Since(start).Round(time.Millisecond))
}

// runConcurrentCrashMatrix is runCrashMatrix for a Concurrent scenario: N is the effects of one uncrashed
// run, and a run that makes fewer effects than its k is played uncrashed (it must hold all the same). It logs
// how many runs crashed.
func runConcurrentCrashMatrix(t *testing.T, sc crash.CrashScenario) {
	require.True(t, sc.Concurrent)
	start := time.Now()
	n, err := crash.CountCrashEffects(sc)
	require.NoError(t, err)
	runs, fired := 1, 0
	for k := 1; k <= n; k++ {
		for _, mode := range crash.CrashModes {
			t.Run(fmt.Sprintf("%s effect %d of %d", mode, k, n), func(t *testing.T) {
				run, err := crash.RunCrashScenario(sc, k, mode)
				require.NoError(t, err)
				if run.Fired {
					fired++
					require.Equal(t, 1, run.Restarts, "one crash, one fresh incarnation")
				}
			})
			runs++
		}
	}
	require.Positive(t, fired)
	t.Logf("concurrent crash matrix %s: N = %d effects, %d runs, %d crashed, %v wall", sc.Name, n, runs, fired, time.Since(start).Round(time.Millisecond))
}

func TestCrashMatrixECS(t *testing.T) {
	runCrashMatrix(t, crashScenario(t, "ECS"))
}

// Field case C23 under the crash matrix: every effect of a capacity-provider group's instance refresh (the
// intent, the refresh, each launch's and termination's lifecycle action, each drain) crashed after, and with
// its response lost.
func TestC23CrashMatrixCapacityProviderRoomyThreeAZ(t *testing.T) {
	runCrashMatrix(t, crashScenario(t, "ECS capacity provider (C23 roomy 3-AZ)"))
}

func TestCrashMatrixECSManagedDraining(t *testing.T) {
	runCrashMatrix(t, crashScenario(t, "ECS managed draining"))
}

func TestCrashMatrixEKSSelfManaged(t *testing.T) {
	runCrashMatrix(t, crashScenario(t, "EKS self-managed"))
}

func TestCrashMatrixLifecycleHookOnlyScaleInDrain(t *testing.T) {
	runCrashMatrix(t, crashScenario(t, "lifecycle hook only (scale-in drain)"))
}

// TestRefreshCrashMatrixOfAGroupAtMaxSizeUntilItHasRoom crashes the rollout of a refresh group at its MaxSize
// (3 of max 3): the agent starts its refresh, which cannot launch before it terminates and waits for room; the
// agent writes neither MaxSize nor desired capacity. Ten minutes into the wait another writer scales the group
// in to 2, which gives the refresh room, and the rollout completes. Every effect crashed after, and with its
// response lost: the fresh incarnation starts no second refresh and raises nothing while it waits.
func TestRefreshCrashMatrixOfAGroupAtMaxSizeUntilItHasRoom(t *testing.T) {
	g := testworld.GroupSetup{Name: "full", Min: 1, Max: 3, Desired: 3}
	sc := refreshCrash("ECS instance refresh at MaxSize", oneGroup(&g), false, 0)
	sc.Drive = func(w *testworld.World) error {
		ctx := context.Background()
		w.PublishAMI(g.Parameter, testworld.ImageB)
		waiting, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
			return strings.Contains(w.Rollout(ctx, g.Name).Reason, "at its MaxSize (3)")
		})
		if err != nil {
			return err
		}
		if !waiting {
			return fmt.Errorf("the rollout does not wait for room: %+v", w.Rollout(ctx, g.Name))
		}
		if _, err := w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false }); err != nil {
			return err
		}
		for _, i := range w.Account.Group(g.Name).Instances {
			if i.ImageID != testworld.ImageA {
				return fmt.Errorf("%s launched on %s before the group had room", i.ID, i.ImageID)
			}
		}
		if err := w.Account.SetDesiredCapacity(g.Name, 2); err != nil {
			return err
		}
		done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return ended(testworld.ImageB)(w.Rollout(ctx, g.Name)) })
		if err != nil {
			return err
		}
		if !done {
			return fmt.Errorf("the rollout did not end: %+v", w.Rollout(ctx, g.Name))
		}
		_, err = w.RunUntil(ctx, tick, 10*time.Minute, func() bool { return false })
		return err
	}
	runCrashMatrix(t, sc)
}

// TestCrashMatrixTwoGroupsOfOneClusterUnderTheClusterBudget crashes two groups of one cluster rolling together
// by instance refresh under the per-cluster budget (1): every effect — the drain slot claims of the
// terminating actions in the cluster's budget record among them — crashed after, and with its response lost. The fresh
// incarnation finds its own slot held and claims nothing twice; the checker holds invariant 3 per cluster
// throughout.
func TestCrashMatrixTwoGroupsOfOneClusterUnderTheClusterBudget(t *testing.T) {
	runCrashMatrix(t, twoGroupsUnderTheClusterBudget(t))
}

// twoGroupsUnderTheClusterBudget is the crash scenario of two groups of one cluster rolled at once by instance
// refresh under the per-cluster budget (1).
func twoGroupsUnderTheClusterBudget(t *testing.T) crash.CrashScenario {
	a := testworld.GroupSetup{Name: "web-a", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 6, Desired: 2}
	b := testworld.GroupSetup{Name: "web-b", Cluster: "shared", Parameter: "/golden/shared", Min: 2, Max: 6, Desired: 2}
	return crash.CrashScenario{
		Name: "two groups of one cluster, cluster budget 1",
		Build: func() (*testworld.World, error) {
			return testworld.Build(testworld.Spec{Groups: []testworld.GroupSetup{a, b}, Services: map[string]int{"web": 6}})
		},
		Drive: func(w *testworld.World) error {
			ctx := context.Background()
			w.PublishAMI("/golden/shared", testworld.ImageB)
			done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
				ra, rb := w.Rollout(ctx, a.Name), w.Rollout(ctx, b.Name)
				return ra.TargetImageID == testworld.ImageB && !ra.Active() && rb.TargetImageID == testworld.ImageB && !rb.Active()
			})
			require.NoError(t, err)
			require.True(t, done, "both rollouts ended")
			drainQueue(t, w)
			return nil
		},
		Final: func(w *testworld.World) error {
			for _, g := range []string{a.Name, b.Name} {
				completedOnTarget(t, w, g)
				require.Equal(t, int32(2), w.Account.Group(g).Desired, g)
				require.Equal(t, 4, w.Account.LaunchedInstances(g), "one new instance per replacement in %s", g)
			}
			return nil
		},
	}
}

// TestCrashMatrixECSBatch crashes a group of 4 with patch-agent/batch-size 2 under a per-cluster budget of 2:
// every effect of its instance refresh (two launched before two terminate at a time) — the lifecycle actions,
// the drain slot claims, the drains — crashed after, and with its response lost. The fresh incarnation never
// starts a second refresh, terminates no instance twice and makes one replacement per old instance.
func TestCrashMatrixECSBatch(t *testing.T) {
	runCrashMatrix(t, ecsBatchOfTwo(t))
}

// ecsBatchOfTwo is the crash scenario of a group of 4 rolled by instance refresh with batch size 2 under a
// per-cluster budget of 2.
func ecsBatchOfTwo(t *testing.T) crash.CrashScenario {
	g := testworld.GroupSetup{Name: "batch-asg", Cluster: "c1", Parameter: "/golden/batch", Min: 4, Max: 6, Desired: 4,
		Tags: map[string]string{model.TagBatchSize: "2"}}
	policy := model.DefaultPolicy()
	policy.ClusterBudget = 2
	return crash.CrashScenario{
		Name: "ECS, batch size 2",
		Build: func() (*testworld.World, error) {
			return testworld.Build(testworld.Spec{Groups: []testworld.GroupSetup{g}, Services: map[string]int{"web": 8}, Policy: policy})
		},
		Drive: func(w *testworld.World) error {
			ctx := context.Background()
			w.PublishAMI(g.Parameter, testworld.ImageB)
			done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
				r := w.Rollout(ctx, g.Name)
				return r.TargetImageID == testworld.ImageB && !r.Active()
			})
			require.NoError(t, err)
			require.True(t, done, "the rollout ended")
			drainQueue(t, w)
			return nil
		},
		Final: func(w *testworld.World) error {
			completedOnTarget(t, w, g.Name)
			grp := w.Account.Group(g.Name)
			require.Equal(t, int32(4), grp.Desired)
			require.Equal(t, int32(6), grp.Max)
			require.Equal(t, 8, w.Account.LaunchedInstances(g.Name), "one replacement per old instance, never a second")
			return nil
		},
	}
}

// TestConcurrentCrashMatrixECSBatch is TestCrashMatrixECSBatch with every incarnation handling messages
// several at once, as in production: the two launching actions of a batch, then its two terminating actions,
// are handled side by side, and a crash at effect k kills the incarnation with the other handling in flight.
// The order of the effects varies from run to run, so each k crashes whichever effect comes k-th; every run
// must hold what the serial matrix holds.
func TestConcurrentCrashMatrixECSBatch(t *testing.T) {
	sc := ecsBatchOfTwo(t)
	sc.Concurrent = true
	runConcurrentCrashMatrix(t, sc)
}

// TestConcurrentCrashMatrixTwoGroupsOfOneClusterUnderTheClusterBudget is
// TestCrashMatrixTwoGroupsOfOneClusterUnderTheClusterBudget with messages handled several at once: the two
// groups' terminating actions race for the cluster's one drain slot in one incarnation, and a crash can come
// between one's claim and the other's.
func TestConcurrentCrashMatrixTwoGroupsOfOneClusterUnderTheClusterBudget(t *testing.T) {
	sc := twoGroupsUnderTheClusterBudget(t)
	sc.Concurrent = true
	runConcurrentCrashMatrix(t, sc)
}

// TestC4CrashMatrixEventDrivenScaleInDrainWithA60sHeartbeatTimeout crashes an event-driven agent (wake-up
// events, the 2-minute safety poll, the lifecycle sweep) at every effect of a scale-in's terminating lifecycle
// action with a 60 s HeartbeatTimeout — recording the action from its message, the drain mark, the drain, each
// heartbeat and its record, the completion claim and the completion — and with each effect's response lost.
// The message of the dead incarnation stays invisible for its 2-minute visibility timeout, longer than the
// timeout: the fresh incarnation (the same --owner-id) takes the record over at once (docs/state.md,
// "Lifecycle action records left by their owner"), so the action is heartbeated inside every 60 s window,
// completed once with CONTINUE once drained, and the returning message is deleted.
func TestC4CrashMatrixEventDrivenScaleInDrainWithA60sHeartbeatTimeout(t *testing.T) {
	hb := 60 * time.Second
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
	var instance string
	var start time.Time
	runCrashMatrix(t, crash.CrashScenario{
		Name: "event-driven scale-in drain, 60 s HeartbeatTimeout",
		Build: func() (*testworld.World, error) {
			gs := g
			spec := oneGroup(&gs)
			spec.WakeUpEvents, spec.WakeUpQueue = true, true
			spec.Sim.TaskStopStageDelay = 20 * time.Second
			return testworld.Build(spec)
		},
		Drive: func(w *testworld.World) error {
			ctx := context.Background()
			if _, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false }); err != nil {
				return err
			}
			instance, start = scaleInOne(t, w, g)
			done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
			if err != nil {
				return err
			}
			if !done {
				return fmt.Errorf("the lifecycle action of %s was not completed", instance)
			}
			_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false }) // the message comes back
			return err
		},
		Final: func(w *testworld.World) error {
			requireKeptAlive(t, w, instance, start, hb, true)
			return hooksAndQueueSettled(w, g.Name)
		},
	})
}
