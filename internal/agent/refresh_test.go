package agent_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/checker"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// refreshGroup is an ECS group of desired 10 rolled by instance refresh in batches of batch, with room above
// desired for one batch and the agent's launching and terminating hooks.
func refreshGroup(batch int) testworld.GroupSetup {
	return testworld.GroupSetup{Name: "rf", Min: 2, Max: int32(10 + batch), Desired: 10,
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh, model.TagBatchSize: fmt.Sprint(batch)}}
}

// buildRefresh builds the world of g with the rule that the agent never writes desired capacity on, and with
// the PodDisruptionBudget of its Deployment watched (watchPodDisruptionBudget).
func buildRefresh(t *testing.T, spec testworld.Spec) *testworld.World {
	t.Helper()
	w := build(t, spec)
	watchPodDisruptionBudget(w)
	settle(t, w, time.Minute)
	return w
}

// watchPodDisruptionBudget makes the checker of a world with a Deployment under a PodDisruptionBudget (EKS
// groups) also judge the budget: when the checker reads the Kubernetes nodes (Check) at a new moment of the
// world's clock, once a step, it counts the Deployment's Ready pods, and it records a violation each time they
// fall below the budget's minAvailable. A pod lost in a step is not Ready again before the next one (a new pod
// takes PodStartDelay, two ticks), so w.Checker.Finish() empty also says that the budget held throughout.
func watchPodDisruptionBudget(w *testworld.World) {
	if w.Kube == nil || w.Kube.Workload.MinAvailable == 0 || w.Checker.Nodes == nil {
		return
	}
	nodes, minAvailable, below := w.Checker.Nodes, w.Kube.Workload.MinAvailable, false
	var seen time.Time
	w.Checker.Nodes = func() (map[string]kubesim.NodeObservation, error) {
		now := w.Account.Clock().Now()
		if now.Equal(seen) {
			return nodes()
		}
		seen = now
		ready, err := w.Kube.ReadyPods(context.Background())
		if err != nil {
			return nil, err
		}
		if ready < minAvailable && !below {
			w.Checker.Violations = append(w.Checker.Violations, checker.Violation{At: w.Account.Clock().Now(),
				Detail: fmt.Sprintf("PodDisruptionBudget web (minAvailable %d) violated: %d Ready pods", minAvailable, ready)})
		}
		below = ready < minAvailable
		return nodes()
	}
}

// refreshPlatform is a kind of group the refresh scenarios run on.
type refreshPlatform struct {
	name string
	// spec is a world with one group (spec.Groups[0]) of desired 10 rolled by instance refresh in batches of
	// batch, with room above desired for one batch and the agent's launching and terminating hooks.
	spec func(batch int) testworld.Spec
}

// refreshPlatforms are a plain ECS group (refreshGroup) and an EKS self-managed group whose nodes run a
// Deployment under a PodDisruptionBudget (eksRefreshSpec).
var refreshPlatforms = []refreshPlatform{
	{"ECS", func(batch int) testworld.Spec { g := refreshGroup(batch); return oneGroup(&g) }},
	{"EKS", func(batch int) testworld.Spec { s, _ := eksRefreshSpec(batch); return s }},
}

// publish publishes image as the next AMI of g: on its parameter, or on the public EKS-optimized parameter
// of an EKS group with AMI source auto.
func publish(w *testworld.World, g testworld.GroupSetup, image string) {
	if param := w.EKSParameter(g.Name); param != "" {
		w.PublishPublicAMI(param, image)
		return
	}
	w.PublishAMI(g.Parameter, image)
}

// refreshCalls counts the agent's calls of op ("autoscaling:StartInstanceRefresh") in the account's call log.
func refreshCalls(w *testworld.World, op string) int { return w.Account.Calls()[op] }

// requireNoCapacityWrites asserts from the account's capacity writes that the agent wrote no desired capacity
// and no MaxSize of group: no SetDesiredCapacity, no decrementing termination, no UpdateAutoScalingGroup that
// changes either; and from its call log that the agent made no SetInstanceProtection, SetDesiredCapacity or
// UpdateAutoScalingGroup call at all (the worlds of these tests have no other group the agent rolls).
func requireNoCapacityWrites(t *testing.T, w *testworld.World, group string) {
	t.Helper()
	for _, op := range []string{"autoscaling:SetInstanceProtection", "autoscaling:SetDesiredCapacity", "autoscaling:UpdateAutoScalingGroup"} {
		require.Zero(t, w.Account.Calls()[op], "the agent called %s", op)
	}
	for _, cw := range w.Account.CapacityWrites() {
		if cw.Group == group && cw.By == sim.CallerAPI {
			require.False(t, cw.Op == sim.OpSetDesiredCapacity || (cw.Op == sim.OpTerminateInstance && cw.Decrement) ||
				(cw.Op == sim.OpUpdateAutoScalingGroup && (cw.From != cw.To || cw.MaxFrom != cw.MaxTo)), "the agent wrote %s", cw)
		}
	}
}

func TestRefreshRollsAnECSGroupInBatchesWithoutWritingDesiredCapacity(t *testing.T) {
	for _, c := range []struct{ batch, budget int }{{1, 1}, {3, 3}, {3, 1}} {
		batch, budget := c.batch, c.budget
		t.Run(fmt.Sprintf("batch %d of 10, cluster budget %d", batch, budget), func(t *testing.T) {
			g := refreshGroup(batch)
			spec := oneGroup(&g)
			spec.Policy = model.DefaultPolicy()
			spec.Policy.ClusterBudget = budget
			w := buildRefresh(t, spec)
			w.PublishAMI(g.Parameter, testworld.ImageB)
			draining, running := 0, 0
			r := runTo(t, w, 3*time.Hour, "completed", func(r state.Rollout) bool {
				d, n := 0, 0
				for _, i := range w.Account.Group(g.Name).Instances {
					if i.ContainerInstanceStatus == "DRAINING" && i.LifecycleState == "Terminating:Wait" {
						d++ // drained under its terminating action
					}
					if i.LifecycleState == "InService" || strings.HasPrefix(i.LifecycleState, "Pending") {
						n++
					}
				}
				draining, running = max(draining, d), max(running, n)
				return ended(testworld.ImageB)(r)
			}, g.Name)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			require.Equal(t, budget, draining, "drains at once: the per-cluster budget")
			require.LessOrEqual(t, running, 10+batch, "at most the batch above desired capacity (MaxHealthyPercentage)")
			settle(t, w, 10*time.Minute)
			requireAllOn(t, w, g.Name, testworld.ImageB, desiredNow(w, g.Name))
			require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "one refresh per rollout")
			require.Equal(t, int32(100+10*batch), r.Refresh.MaxHealthyPercentage)
			requireNoCapacityWrites(t, w, g.Name)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// writerSeeds are the runs of a scenario: 0 alone, then each seed of testenv.Seeds with a random writer of
// desired capacity beside the rollout (besideWriter).
func writerSeeds(t *testing.T) []uint64 {
	return append([]uint64{0}, testenv.Seeds(t, []uint64{1, 2, 3})...)
}

// besideWriter starts a random writer of group's desired capacity with seed (none for seed 0) and returns the
// function that stops it.
func besideWriter(w *testworld.World, group string, seed uint64) func() {
	if seed == 0 {
		return func() {}
	}
	return w.Account.StartRandomWriter(sim.RandomWriterSpec{Group: group, Seed: seed}).Stop
}

// desiredNow is the group's desired capacity now (another writer may have moved it).
// endsOn stops the other writer, lets the world settle 10 minutes and asserts the end of a refresh scenario:
// every instance the group's desired capacity asks for on image, no capacity written by the agent, every
// invariant held.
func endsOn(t *testing.T, w *testworld.World, group, image string, stop func()) {
	t.Helper()
	stop()
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, group, image, desiredNow(w, group))
	requireNoCapacityWrites(t, w, group)
	require.Empty(t, w.Checker.Finish())
}

func desiredNow(w *testworld.World, group string) int { return int(w.Account.Group(group).Desired) }

// runTo runs the world until done, failing the test when it does not come within limit.
func runTo(t *testing.T, w *testworld.World, limit time.Duration, what string, done func(state.Rollout) bool, group string) state.Rollout {
	t.Helper()
	ctx := context.Background()
	ok, err := w.RunUntil(ctx, tick, limit, func() bool { return done(w.Rollout(ctx, group)) })
	require.NoError(t, err)
	require.True(t, ok, "%s: %+v", what, w.Rollout(ctx, group))
	return w.Rollout(ctx, group)
}

// midRefresh reports whether the agent's refresh is under way with at least one instance updated.
func midRefresh(r state.Rollout) bool {
	return r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID != "" && r.Refresh.PercentageComplete >= 10
}

func ended(image string) func(state.Rollout) bool {
	return func(r state.Rollout) bool { return r.TargetImageID == image && !r.Active() }
}

// A bad AMI (its instances never serve): the agent's launching hook ABANDONs the first launch at the health
// deadline, the refresh halts at once and the group is rolled back to the previous version. Alone, and beside
// a random writer of desired capacity (writerSeeds): its scale outs during the refresh launch the bad AMI too
// (the refresh's desired configuration), the agent holds them in Pending:Wait like any launch and abandons
// them at the halt; the checker waits for that decision within the agent's deadlines only (checker.Checker's
// HealthTimeout), so a hold past the health deadline or past the halt still breaks invariant 1.
func TestRefreshOfABadAMIHaltsAtTheFirstAbandonAndRollsBack(t *testing.T) {
	for _, p := range refreshPlatforms {
		for _, tag := range []string{model.StrategyRefresh, ""} {
			for _, seed := range writerSeeds(t) {
				t.Run(fmt.Sprintf("%s strategy tag %q writer seed %d", p.name, tag, seed), func(t *testing.T) {
					spec := p.spec(1)
					if tag == "" {
						delete(spec.Groups[0].Tags, model.TagStrategy) // the default: instance refresh
					}
					playBadAMIRefresh(t, spec, seed)
				})
			}
		}
	}
}

// playBadAMIRefresh rolls the group of spec to the bad ImageB beside a random writer of seed (none for 0) and
// asserts the halt at the first ABANDON, the launches in flight abandoned at once, the rollback to ImageA and
// every invariant.
func playBadAMIRefresh(t *testing.T, spec testworld.Spec, seed uint64) {
	t.Helper()
	g := spec.Groups[0]
	w := buildRefresh(t, spec)
	stop := besideWriter(w, g.Name, seed)
	w.Account.MarkImageUnhealthy(testworld.ImageB)
	publish(w, g, testworld.ImageB)
	r := runTo(t, w, 3*time.Hour, "rolled back", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
	require.Contains(t, r.Reason, "ABANDON")
	var first *sim.Completion
	abandons := 0
	for _, c := range w.Account.LifecycleCompletions() {
		if c.Accepted && c.Caller == sim.CallerAPI && c.Result == sim.ResultAbandon {
			if abandons++; first == nil {
				first = &c
			}
		}
	}
	require.NotNil(t, first)
	hist, err := w.Store.History(context.Background(), g.Name)
	require.NoError(t, err)
	halted := false
	for _, h := range hist {
		if h.Event == "rolling-back" {
			halted = true
			require.Contains(t, h.Detail, first.InstanceID, "the first ABANDON halts the refresh")
			require.WithinDuration(t, first.At, h.At, tick, "at once, not after Auto Scaling's hour of retries")
		}
	}
	require.True(t, halted)
	var rolledBack time.Time
	for _, h := range hist {
		if h.Event == "rolled-back" {
			rolledBack = h.At
		}
	}
	t.Logf("halted at %s, rolled back at %s, %d launch(es) of the bad AMI abandoned", first.At.Format(time.TimeOnly),
		rolledBack.Format(time.TimeOnly), abandons)
	require.Less(t, rolledBack.Sub(first.At), 10*time.Minute,
		"a launch of the halted AMI in flight is abandoned at once, not at its health deadline (10m)")
	endsOn(t, w, g.Name, testworld.ImageA, stop)
}

// A pause cancels the agent's refresh; resume starts a new one that skips the instances already on the target.
func TestRefreshPausedIsCancelledAndResumedByANewRefresh(t *testing.T) {
	midRefreshWorlds(t, func(t *testing.T, w *testworld.World, g testworld.GroupSetup, stop func()) {
		ctx := context.Background()
		require.NoError(t, operator.Pause(ctx, w.Store, g.Name, "game day", "bob", time.Time{}, w.Account.Clock().Now()))
		r := runTo(t, w, time.Hour, "waiting on the pause", func(r state.Rollout) bool { return r.Phase == state.PhaseWaiting }, g.Name)
		require.Contains(t, r.Reason, "paused")
		require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"))
		settle(t, w, 30*time.Minute)
		require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "nothing starts while paused")
		_, err := operator.Resume(ctx, w.Store, g.Name, w.Account.Clock().Now())
		require.NoError(t, err)
		r = runTo(t, w, 3*time.Hour, "completed", ended(testworld.ImageB), g.Name)
		require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
		starts, cancels := refreshCalls(w, "autoscaling:StartInstanceRefresh"), refreshCalls(w, "autoscaling:CancelInstanceRefresh")
		require.Equal(t, cancels+1, starts, "one new refresh per window, each cancelled at the window's end but the last")
		endsOn(t, w, g.Name, testworld.ImageB, stop)
		t.Logf("%d windows", starts)
	})
}

// A newer AMI mid-refresh cancels it; the newer AMI goes through the gates and its own refresh.
func TestRefreshSupersededByANewerAMI(t *testing.T) {
	midRefreshWorlds(t, func(t *testing.T, w *testworld.World, g testworld.GroupSetup, stop func()) {
		publish(w, g, imageC)
		r := runTo(t, w, 4*time.Hour, "completed on the newer AMI", ended(imageC), g.Name)
		require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
		require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"))
		require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
		endsOn(t, w, g.Name, imageC, stop)
	})
}

// `patch-agent rollback` in the middle of a refresh rolls the group back at once.
func TestRefreshRolledBackByAnOperatorMidRefresh(t *testing.T) {
	midRefreshWorlds(t, func(t *testing.T, w *testworld.World, g testworld.GroupSetup, stop func()) {
		ctx := context.Background()
		_, err := operator.Rollback(ctx, w.Store, g.Name, "", "alice", false, w.Account.Clock().Now())
		require.NoError(t, err)
		r := runTo(t, w, 3*time.Hour, "rolled back", func(r state.Rollout) bool { return !r.Active() }, g.Name)
		require.Equal(t, state.PhaseRolledBack, r.Phase, r.Reason)
		require.Contains(t, r.Reason, "manual rollback by alice")
		endsOn(t, w, g.Name, testworld.ImageA, stop)
	})
}

// C27: a refresh someone else started is never cancelled; the rollout waits, says whose refresh holds the
// group, and starts its own once it ended.
func TestRefreshWaitsForARefreshItDidNotStartAndNeverCancelsIt(t *testing.T) {
	for _, p := range refreshPlatforms {
		for _, seed := range writerSeeds(t) {
			t.Run(fmt.Sprintf("%s writer seed %d", p.name, seed), func(t *testing.T) {
				spec := p.spec(1)
				g := spec.Groups[0]
				w := buildRefresh(t, spec)
				stop := besideWriter(w, g.Name, seed)
				ctx := context.Background()
				_, err := w.Account.AutoScaling().StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String(g.Name),
					Preferences: &astypes.RefreshPreferences{MinHealthyPercentage: aws.Int32(100), MaxHealthyPercentage: aws.Int32(110)}})
				require.NoError(t, err)
				publish(w, g, testworld.ImageB)
				r := runTo(t, w, time.Hour, "waiting for the foreign refresh", func(r state.Rollout) bool {
					return r.Phase == state.PhaseWaiting && strings.Contains(r.Reason, "not started by patch-agent")
				}, g.Name)
				require.Contains(t, r.Reason, "patch-agent never cancels it")
				r = runTo(t, w, 6*time.Hour, "completed", ended(testworld.ImageB), g.Name)
				require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
				require.Zero(t, refreshCalls(w, "autoscaling:CancelInstanceRefresh"), "the foreign refresh is never cancelled")
				require.Equal(t, 2, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "the foreign one and the agent's")
				endsOn(t, w, g.Name, testworld.ImageB, stop)
			})
		}
	}
}

// A group at its MaxSize: the refresh cannot launch before it terminates; the rollout waits and says so, and
// the agent writes neither MaxSize nor desired capacity.
func TestRefreshOfAGroupAtMaxSizeWaitsAndSaysSo(t *testing.T) {
	for _, p := range refreshPlatforms {
		t.Run(p.name, func(t *testing.T) {
			spec := p.spec(1)
			g := &spec.Groups[0]
			g.Max = g.Desired
			w := buildRefresh(t, spec)
			publish(w, *g, testworld.ImageB)
			r := runTo(t, w, time.Hour, "waiting for room", func(r state.Rollout) bool { return strings.Contains(r.Reason, "at its MaxSize (10)") }, g.Name)
			require.Equal(t, state.PhaseReplacing, r.Phase)
			settle(t, w, 30*time.Minute)
			requireAllOn(t, w, g.Name, testworld.ImageA, 10)
			requireNoCapacityWrites(t, w, g.Name)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// A group at MaxSize beside a random writer of its desired capacity (testenv.Seeds; it starts once the rollout
// waits for room): the refresh replaces instances whenever the writer's scale-ins give it room and waits again
// whenever the group is back at MaxSize; the agent never raises MaxSize or writes desired capacity, and every
// invariant holds.
func TestRefreshOfAGroupAtMaxSizeBesideARandomAutoscaler(t *testing.T) {
	for _, p := range refreshPlatforms {
		for _, seed := range testenv.Seeds(t, []uint64{1}) {
			t.Run(fmt.Sprintf("%s writer seed %d", p.name, seed), func(t *testing.T) {
				ctx := context.Background()
				spec := p.spec(1)
				g := &spec.Groups[0]
				g.Max = g.Desired
				w := buildRefresh(t, spec)
				publish(w, *g, testworld.ImageB)
				runTo(t, w, time.Hour, "waiting for room", func(r state.Rollout) bool { return strings.Contains(r.Reason, "at its MaxSize (10)") }, g.Name)
				writer := w.Account.StartRandomWriter(sim.RandomWriterSpec{Group: g.Name, Seed: seed})
				settle(t, w, 3*time.Hour)
				writer.Stop()
				settle(t, w, 15*time.Minute)
				require.NotEmpty(t, writer.Writes(), "the random writer wrote")
				r := w.Rollout(ctx, g.Name)
				if r.Phase == state.PhaseCompleted {
					requireAllOn(t, w, g.Name, testworld.ImageB, desiredNow(w, g.Name))
				} else {
					require.Equal(t, state.PhaseReplacing, r.Phase, r.Reason)
					require.Contains(t, r.Reason, "at its MaxSize (10)", "left at MaxSize by the writer's last write")
					on := 0
					for _, i := range w.Account.Group(g.Name).Instances {
						if i.ImageID == testworld.ImageB && i.LifecycleState == "InService" {
							on++
						}
					}
					require.Positive(t, on, "the writer's scale-ins gave the refresh room at least once")
				}
				requireNoCapacityWrites(t, w, g.Name)
				require.Empty(t, w.Checker.Finish())
				t.Logf("%d writes; rollout %s: %s", len(writer.Writes()), r.Phase, r.Reason)
			})
		}
	}
}

// refreshCrash is the crash scenario of the refresh group of spec (spec.Groups[0]) rolled to ImageB: with bad, ImageB never
// serves and the rollout must end RolledBack with every instance on ImageA and two StartInstanceRefresh calls
// (the rollout's and the one back); else Completed on ImageB with exactly one. In both, the agent writes no
// desired capacity and every lifecycle action and queue message is settled at the end: a crash at any effect,
// or a lost answer of StartInstanceRefresh, never starts a refresh more (C27). A writer seed other than 0 starts
// a random writer of the group's desired capacity with each world (the reference run's and each crashed run's),
// stopped once the rollout ended: the fresh incarnation after a crash meets a group whose desired capacity
// moved while it was down.
func refreshCrash(name string, spec testworld.Spec, bad bool, writer uint64) crash.CrashScenario {
	g := spec.Groups[0]
	phase, image, starts, after := state.PhaseCompleted, testworld.ImageB, 1, 10*time.Minute
	if bad {
		phase, image, starts, after = state.PhaseRolledBack, testworld.ImageA, 2, 20*time.Minute
	}
	writers := map[*testworld.World]func(){}
	return crash.CrashScenario{
		Name: name,
		Build: func() (*testworld.World, error) {
			w, err := testworld.Build(spec)
			if err == nil {
				watchPodDisruptionBudget(w)
				if bad {
					w.Account.MarkImageUnhealthy(testworld.ImageB)
				}
				writers[w] = besideWriter(w, g.Name, writer)
			}
			return w, err
		},
		Drive: func(w *testworld.World) error {
			ctx := context.Background()
			publish(w, g, testworld.ImageB)
			done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool { return ended(testworld.ImageB)(w.Rollout(ctx, g.Name)) })
			if stop := writers[w]; stop != nil {
				stop()
				delete(writers, w)
			}
			if err != nil {
				return err
			}
			if !done {
				return fmt.Errorf("the rollout did not end: %+v", w.Rollout(ctx, g.Name))
			}
			_, err = w.RunUntil(ctx, tick, after, func() bool { return false })
			return err
		},
		Final: func(w *testworld.World) error {
			if r := w.Rollout(context.Background(), g.Name); r.Phase != phase {
				return fmt.Errorf("rollout ended %s: %s", r.Phase, r.Reason)
			}
			if n := refreshCalls(w, "autoscaling:StartInstanceRefresh"); n != starts {
				return fmt.Errorf("%d StartInstanceRefresh calls, want %d", n, starts)
			}
			for _, i := range w.Account.Group(g.Name).Instances {
				if !strings.HasPrefix(i.LifecycleState, "Terminating") && i.ImageID != image {
					return fmt.Errorf("%s runs %s", i.ID, i.ImageID)
				}
			}
			for _, cw := range w.Account.CapacityWrites() {
				if cw.Group == g.Name && cw.By == sim.CallerAPI && (cw.Op == sim.OpSetDesiredCapacity || cw.Decrement ||
					(cw.Op == sim.OpUpdateAutoScalingGroup && (cw.From != cw.To || cw.MaxFrom != cw.MaxTo))) {
					return fmt.Errorf("the agent wrote %s", cw)
				}
			}
			return hooksAndQueueSettled(w, g.Name)
		},
	}
}

// refreshCrashScenario rolls an ECS refresh group of 3 (room for one more) to ImageB.
func refreshCrashScenario(t *testing.T) crash.CrashScenario {
	g := testworld.GroupSetup{Name: "rc", Min: 1, Max: 4, Desired: 3,
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
	return refreshCrash("ECS instance refresh", oneGroup(&g), false, 0)
}

// eksCrashSpec is eksRefreshSpec's EKS self-managed group cut to desired 2 with room for one more, its
// Deployment to 4 pods, two on each node, under a PodDisruptionBudget minAvailable 3: a node's second pod is
// evicted only once the first one's replacement is Ready.
func eksCrashSpec() testworld.Spec {
	spec, _ := eksRefreshSpec(1)
	g := &spec.Groups[0]
	g.Min, g.Max, g.Desired = 1, 3, 2
	spec.KubeWorkload.Replicas, spec.KubeWorkload.MinAvailable = 4, 3
	return spec
}

// A crash after every effect of an instance refresh rollout, and with every effect's answer lost (the lost
// StartInstanceRefresh answer among them): each run completes, holds every invariant (on EKS the
// PodDisruptionBudget too), repeats no effect and starts one refresh.
func TestRefreshCrashMatrixStartsOneRefreshWhateverEffectTheAgentDiesAt(t *testing.T) {
	t.Run("ECS", func(t *testing.T) { runCrashMatrix(t, refreshCrashScenario(t)) })
	t.Run("EKS", func(t *testing.T) {
		runCrashMatrix(t, refreshCrash("EKS self-managed instance refresh", eksCrashSpec(), false, 0))
	})
}

// The refresh crash matrix beside a random writer of desired capacity (testenv.Seeds' first seed; each seed of
// the long form in make soak): the agent killed after every effect, and with every effect's answer lost, while
// another writer moves the group's desired capacity, for the ECS rollout and a bad AMI's rollback (and, with the
// long form's seeds, the EKS self-managed group under its PodDisruptionBudget). Each run
// ends as it does alone (one refresh, or two for the rollback), writes no desired capacity or MaxSize, leaves no
// lifecycle action or message behind and holds every invariant.
func TestRefreshCrashMatrixBesideARandomAutoscaler(t *testing.T) {
	for _, seed := range testenv.Seeds(t, []uint64{1}) {
		t.Run(fmt.Sprintf("ECS writer seed %d", seed), func(t *testing.T) {
			g := testworld.GroupSetup{Name: "rc", Min: 1, Max: 4, Desired: 3,
				Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
			runCrashMatrix(t, refreshCrash("ECS instance refresh beside a random autoscaler", oneGroup(&g), false, seed))
		})
		t.Run(fmt.Sprintf("ECS bad AMI writer seed %d", seed), func(t *testing.T) {
			g := testworld.GroupSetup{Name: "rb", Min: 1, Max: 3, Desired: 2,
				Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
			runCrashMatrix(t, refreshCrash("ECS instance refresh of a bad AMI beside a random autoscaler", oneGroup(&g), true, seed))
		})
		t.Run(fmt.Sprintf("EKS writer seed %d", seed), func(t *testing.T) {
			if !testenv.Soak(testenv.Seeds(t, nil)) {
				t.Skipf("the EKS group's matrix beside a writer (about 170 runs, 40 s a seed) runs with the long form's seeds (make soak, %s)", testenv.SeedsEnv)
			}
			runCrashMatrix(t, refreshCrash("EKS self-managed instance refresh beside a random autoscaler", eksCrashSpec(), false, seed))
		})
	}
}

// eksRefreshSpec is the demo's EKS self-managed group (Deployment web under a PodDisruptionBudget
// minAvailable 5, a DaemonSet) with desired 10, rolled by instance refresh in batches of batch.
func eksRefreshSpec(batch int) (testworld.Spec, string) {
	s := testworld.DemoSpec()
	s.Groups, s.Services = s.Groups[1:], nil
	g := &s.Groups[0]
	g.Desired, g.Max = 10, int32(10+batch)
	g.Tags = map[string]string{model.TagStrategy: model.StrategyRefresh, model.TagBatchSize: fmt.Sprint(batch)}
	s.Policy = model.DefaultPolicy()
	s.Policy.ClusterBudget = batch
	return s, g.Name
}

func TestRefreshRollsAnEKSSelfManagedGroupUnderAPodDisruptionBudget(t *testing.T) {
	for _, batch := range []int{1, 3} {
		t.Run(fmt.Sprintf("batch %d of 10", batch), func(t *testing.T) {
			spec, group := eksRefreshSpec(batch)
			w := buildRefresh(t, spec)
			w.PublishPublicAMI(w.EKSParameter(group), testworld.ImageB)
			r := runTo(t, w, 4*time.Hour, "completed", ended(testworld.ImageB), group)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			settle(t, w, time.Minute)
			requireAllOn(t, w, group, testworld.ImageB, 10)
			require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
			requireNoCapacityWrites(t, w, group)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// playRefreshBesideOthers rolls group of spec to ImageB by instance refresh while a random writer of seed moves
// its desired capacity and an operator terminates an old instance without decrement in the middle of the
// refresh; every invariant holds (NoDesiredWrites among them), the rollout completes, and the agent's calls
// write no desired capacity and no MaxSize of the group (C24).
func playRefreshBesideOthers(t *testing.T, spec testworld.Spec, group string, seed uint64) {
	w := buildRefresh(t, spec)
	ctx := context.Background()
	writer := w.Account.StartRandomWriter(sim.RandomWriterSpec{Group: group, Seed: seed})
	if param := w.EKSParameter(group); param != "" {
		w.PublishPublicAMI(param, testworld.ImageB)
	} else {
		w.PublishAMI("/golden/"+group, testworld.ImageB)
	}
	operatorDone := ""
	r := runTo(t, w, 6*time.Hour, "completed", func(r state.Rollout) bool {
		if operatorDone == "" && midRefresh(r) {
			for _, i := range w.Account.Group(group).Instances {
				if i.LifecycleState == "InService" && i.ImageID == testworld.ImageA && w.Account.TerminateWithoutDecrement(i.ID) {
					operatorDone = i.ID
					break
				}
			}
		}
		return operatorDone != "" && ended(testworld.ImageB)(r)
	}, group)
	writer.Stop()
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	_, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		visible, inFlight := w.Account.QueueDepth(w.QueueURL)
		return visible+inFlight == 0
	})
	require.NoError(t, err)
	require.NotEmpty(t, writer.Writes(), "the random writer wrote")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	requireNoCapacityWrites(t, w, group)
	require.Empty(t, w.Checker.Finish())
	t.Logf("seed %d: %d writes of the random writer, operator terminated %s, rollout took %s", seed, len(writer.Writes()), operatorDone,
		r.UpdatedAt.Sub(r.DetectedAt).Round(time.Minute))
}

// C24: other writers of desired capacity during the rollout (a seeded random autoscaler, testenv.Seeds, and an
// operator terminating an old instance without decrement) never make the agent write desired capacity, and
// serving capacity never falls below what they set.
func TestC24RefreshBesideARandomAutoscalerAndAnOperatorWritesNoDesiredCapacity(t *testing.T) {
	for _, seed := range testenv.Seeds(t, []uint64{1, 2, 3}) {
		for _, batch := range []int{1, 3} {
			t.Run(fmt.Sprintf("ECS batch %d seed %d", batch, seed), func(t *testing.T) {
				g := refreshGroup(batch)
				spec := oneGroup(&g)
				spec.Policy = model.DefaultPolicy()
				spec.Policy.ClusterBudget = batch
				playRefreshBesideOthers(t, spec, g.Name, seed)
			})
			t.Run(fmt.Sprintf("EKS batch %d seed %d", batch, seed), func(t *testing.T) {
				spec, group := eksRefreshSpec(batch)
				playRefreshBesideOthers(t, spec, group, seed)
			})
		}
	}
}

// quietSeeds are the runs of a long scenario: 0 alone, then testenv.Seeds' first seed by default (every seed of
// the long form in make soak) with a random writer of desired capacity beside the rollout (besideWriter).
func quietSeeds(t *testing.T) []uint64 {
	return append([]uint64{0}, testenv.Seeds(t, []uint64{1})...)
}

// The end of the maintenance window cancels the refresh; the next window starts a new one that skips the
// instances already on the target. Between windows, once what the cancel left in flight has had an hour, the
// world steps a minute at a time: nothing moves until the next window opens. Alone, and beside a random writer
// of desired capacity (quietSeeds) during the first window, stopped once the rollout waits for the next, and an
// operator terminating an old instance without decrement mid-refresh: the cancel with the writer's launches and
// scale-ins in flight writes no desired capacity and breaks no invariant, and every window's refresh but the
// last is cancelled at its end (how many windows it takes depends on where the writer leaves the group).
func TestRefreshCancelledAtTheWindowsEndResumesInTheNextWindow(t *testing.T) {
	for _, p := range refreshPlatforms {
		for _, seed := range quietSeeds(t) {
			t.Run(fmt.Sprintf("%s writer seed %d", p.name, seed), func(t *testing.T) {
				spec := p.spec(1)
				g := spec.Groups[0]
				start := build(t, refreshPlatforms[0].spec(1)).Account.Clock().Now() // where every world's clock starts
				open := start.Add(2 * time.Minute).Truncate(time.Minute)
				g.Tags[model.TagMaintenanceWindow] = open.Format("15:04") + "-" + open.Add(30*time.Minute).Format("15:04") + " UTC"
				w := buildRefresh(t, spec)
				stop := besideWriter(w, g.Name, seed)
				publish(w, g, testworld.ImageB)
				// waitingAfter: the rollout ended, or it waits for the next window after the window closing at close.
				waitingAfter := func(close time.Time) func(state.Rollout) bool {
					return func(r state.Rollout) bool {
						return ended(testworld.ImageB)(r) || (w.Account.Clock().Now().After(close) && r.Phase == state.PhaseWaiting &&
							r.OnTarget > 0 && strings.Contains(r.Reason, "maintenance window"))
					}
				}
				if seed != 0 {
					runTo(t, w, time.Hour, "refresh under way", midRefresh, g.Name)
					operatorTerminatesAnOldInstance(t, w, g.Name)
				}
				r := runTo(t, w, 2*time.Hour, "completed or waiting for the next window", waitingAfter(open.Add(30*time.Minute)), g.Name)
				stop()
				if gv := w.Account.Group(g.Name); gv.Desired == gv.Max {
					// Left at MaxSize, the group has no room for the refresh to launch before it terminates: each
					// window's refresh would wait and be cancelled at its end. The autoscaler scales in by one.
					require.NoError(t, w.Account.SetDesiredCapacity(g.Name, gv.Max-1))
				}
				if seed == 0 { // a writer's scale-ins may leave the first window enough to finish in
					require.Equal(t, state.PhaseWaiting, r.Phase, r.Reason)
					require.Less(t, r.OnTarget, 10, "the window closed before the refresh ended")
					require.Equal(t, 1, refreshCalls(w, "autoscaling:CancelInstanceRefresh"))
				}
				for day := 1; !ended(testworld.ImageB)(r); day++ {
					require.Less(t, day, 7, "completed within 7 windows: %+v", r)
					settle(t, w, time.Hour)
					next := open.AddDate(0, 0, day)
					_, err := w.RunUntil(context.Background(), time.Minute, next.Add(-2*time.Minute).Sub(w.Account.Clock().Now()), func() bool { return false })
					require.NoError(t, err)
					r = runTo(t, w, 24*time.Hour, "completed or waiting for the next window", waitingAfter(next.Add(30*time.Minute)), g.Name)
				}
				require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
				starts, cancels := refreshCalls(w, "autoscaling:StartInstanceRefresh"), refreshCalls(w, "autoscaling:CancelInstanceRefresh")
				require.Equal(t, cancels+1, starts, "one new refresh per window, each cancelled at the window's end but the last")
				endsOn(t, w, g.Name, testworld.ImageB, func() {})
				t.Logf("%d windows", starts)
			})
		}
	}
}

// Two refresh groups of one cluster: their refreshes run side by side, and the per-cluster budget (1) lets one
// instance of the cluster drain at a time. Alone, and beside a random writer of each group's desired capacity
// (writerSeeds) and an operator terminating an old instance without decrement: the writers' scale-ins and the
// operator's termination are terminating lifecycle actions too, drained within the same budget.
func TestTwoRefreshGroupsOfOneClusterDrainWithinTheClusterBudget(t *testing.T) {
	for _, seed := range writerSeeds(t) {
		t.Run(fmt.Sprintf("writer seed %d", seed), func(t *testing.T) { playTwoRefreshGroupsOfOneCluster(t, seed) })
	}
}

func playTwoRefreshGroupsOfOneCluster(t *testing.T, seed uint64) {
	a, b := refreshGroup(1), refreshGroup(1)
	a.Name, b.Name, a.Cluster, b.Cluster, a.Desired, b.Desired, a.Max, b.Max = "rf-a", "rf-b", "c1", "c1", 4, 4, 5, 5
	a.Parameter, b.Parameter = "/golden/shared", "/golden/shared"
	w := buildRefresh(t, testworld.Spec{Groups: []testworld.GroupSetup{a, b}, Services: map[string]int{"web": 12}})
	ctx := context.Background()
	stopA, stopB := besideWriter(w, a.Name, seed), besideWriter(w, b.Name, seed+100)
	w.PublishAMI("/golden/shared", testworld.ImageB)
	if seed != 0 {
		runTo(t, w, time.Hour, "refresh under way", midRefresh, a.Name)
		operatorTerminatesAnOldInstance(t, w, b.Name)
	}
	draining, overlapped := 0, false
	ok, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		d, refreshing := 0, 0
		for _, name := range []string{a.Name, b.Name} {
			for _, i := range w.Account.Group(name).Instances {
				if i.ContainerInstanceStatus == "DRAINING" && i.LifecycleState == "Terminating:Wait" {
					d++
				}
			}
			if r := w.Rollout(ctx, name); r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID != "" {
				refreshing++
			}
		}
		draining, overlapped = max(draining, d), overlapped || refreshing == 2
		return ended(testworld.ImageB)(w.Rollout(ctx, a.Name)) && ended(testworld.ImageB)(w.Rollout(ctx, b.Name))
	})
	require.NoError(t, err)
	require.True(t, ok)
	stopA()
	stopB()
	require.True(t, overlapped, "the two refreshes ran side by side")
	require.Equal(t, 1, draining, "one drain of the cluster at a time")
	settle(t, w, 10*time.Minute)
	for _, g := range []testworld.GroupSetup{a, b} {
		require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase)
		requireAllOn(t, w, g.Name, testworld.ImageB, desiredNow(w, g.Name))
		requireNoCapacityWrites(t, w, g.Name)
	}
	require.Empty(t, w.Checker.Finish())
}

// Launches short of EC2 capacity (InsufficientInstanceCapacity) are not a bad AMI: the refresh waits for
// capacity past the hour a failing replacement gets, nothing halts, and it completes once capacity is back.
func TestRefreshShortOfCapacityWaitsAndIsNotRolledBack(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	w.Account.SetLaunchShortfall(g.Name, sim.Shortfall{})
	w.PublishAMI(g.Parameter, testworld.ImageB)
	settle(t, w, 90*time.Minute)
	r := w.Rollout(context.Background(), g.Name)
	require.Equal(t, state.PhaseReplacing, r.Phase, "not halted, not rolled back: %s", r.Reason)
	require.Greater(t, w.Account.FailedLaunches(g.Name), 10, "Auto Scaling kept trying")
	w.Account.ClearLaunchShortfall(g.Name)
	r = runTo(t, w, 3*time.Hour, "completed", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
}

// The crash matrix of a bad AMI's rollout: halted at the first ABANDON and rolled back (the groups reference
// $Default, so Auto Scaling refuses RollbackInstanceRefresh and the agent cancels its refresh and refreshes back
// to the previous version), with the agent killed after every effect and with every effect's answer lost.
func TestRefreshCrashMatrixOfABadAMIsRollback(t *testing.T) {
	g := testworld.GroupSetup{Name: "rb", Min: 1, Max: 3, Desired: 2,
		Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
	t.Run("ECS", func(t *testing.T) {
		runCrashMatrix(t, refreshCrash("ECS instance refresh of a bad AMI", oneGroup(&g), true, 0))
	})
	t.Run("EKS", func(t *testing.T) {
		if !testenv.Soak(testenv.Seeds(t, nil)) {
			t.Skipf("the EKS group's matrix (about 200 runs, 50 s) runs with the long form's seeds (make soak, %s)", testenv.SeedsEnv)
		}
		runCrashMatrix(t, refreshCrash("EKS self-managed instance refresh of a bad AMI", eksCrashSpec(), true, 0))
	})
}

// An event-driven agent (wake-up events, the 2-minute safety poll) rolls a refresh group too: the refresh's
// progress wakes the group through its lifecycle actions and the safety poll.
func TestRefreshRollsAGroupWithAnEventDrivenAgent(t *testing.T) {
	g := refreshGroup(1)
	spec := oneGroup(&g)
	spec.WakeUpEvents = true
	w := build(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	ok, err := w.RunEvents(ctx, 4*time.Hour, func() bool { return ended(testworld.ImageB)(w.Rollout(ctx, g.Name)) })
	require.NoError(t, err)
	require.True(t, ok, "%+v", w.Rollout(ctx, g.Name))
	r := w.Rollout(ctx, g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"))
	requireNoCapacityWrites(t, w, g.Name)
	require.Empty(t, w.Checker.Finish())
	t.Logf("took %s, %d DescribeInstanceRefreshes", r.UpdatedAt.Sub(r.DetectedAt).Round(time.Minute), refreshCalls(w, "autoscaling:DescribeInstanceRefreshes"))
}

// A mixed-instances group rolls by a refresh whose desired configuration is a MixedInstancesPolicy naming the
// new launch template version; a group that selects instance types by attributes (InstanceRequirements), on
// which Auto Scaling refuses a desired configuration, is not rolled: it waits with a reason that says why and
// what to do, and the agent starts no refresh and replaces nothing there.
func TestRefreshOfMixedInstancesGroupsAndInstanceRequirementsGroupsLeftOut(t *testing.T) {
	mixed := testworld.GroupSetup{Name: "mixed", Cluster: "c1", Parameter: "/golden/shared", Min: 2, Max: 5, Desired: 3,
		MixedInstances: true, Overrides: []string{"m7g.large", "m6g.large"}}
	abis := testworld.GroupSetup{Name: "abis", Cluster: "c1", Parameter: "/golden/shared", Min: 2, Max: 5, Desired: 3,
		MixedInstances: true, InstanceRequirements: true}
	w := buildRefresh(t, testworld.Spec{Groups: []testworld.GroupSetup{mixed, abis}, Services: map[string]int{"web": 6}})
	ctx := context.Background()
	w.PublishAMI("/golden/shared", testworld.ImageB)
	r := runTo(t, w, 3*time.Hour, "completed", ended(testworld.ImageB), mixed.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.True(t, r.Refresh.MixedInstances)
	left := w.Rollout(ctx, abis.Name)
	require.Equal(t, state.PhaseWaiting, left.Phase)
	require.Contains(t, left.Reason, "InstanceRequirements")
	require.Contains(t, left.Reason, "list the instance types in the mixed instances policy")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "one refresh, the mixed group's")
	settle(t, w, 10*time.Minute)
	requireAllOn(t, w, mixed.Name, testworld.ImageB, 3)
	requireAllOn(t, w, abis.Name, testworld.ImageA, 3)
	for _, term := range w.Account.Terminations() {
		require.NotEqual(t, abis.Name, term.Group, "nothing of the left-out group replaced")
	}
	requireNoCapacityWrites(t, w, mixed.Name)
	require.Empty(t, w.Checker.Finish())
}

// The checker of a refresh world with a Deployment under a PodDisruptionBudget records a violation when the
// Deployment's Ready pods fall below the budget's minAvailable (watchPodDisruptionBudget): two of its six pods
// deleted at once, past the budget, leave four Ready of minAvailable 5.
func TestRefreshWorldsCheckerSeesAPodDisruptionBudgetViolated(t *testing.T) {
	spec, _ := eksRefreshSpec(1)
	w := buildRefresh(t, spec)
	ctx := context.Background()
	require.Empty(t, w.Checker.Check())
	pods, err := w.Kube.Client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 6)
	for _, p := range pods.Items[:2] {
		require.NoError(t, w.Kube.Client.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{}))
	}
	settle(t, w, time.Minute)
	v := w.Checker.Finish()
	require.Len(t, v, 1, "one violation while the pods were below the budget: %v", v)
	require.Contains(t, v[0].Detail, "PodDisruptionBudget web (minAvailable 5) violated: 4 Ready pods")
}

// midRefreshWorlds runs f, for every platform and writer seed, on a world of the platform's group (batch 1)
// beside the seed's writer (stop stops it), once the group's refresh to ImageB is under way. Beside a writer
// (seed > 0) an operator also terminates an old instance without decrement at that moment (C24).
// operatorTerminatesAnOldInstance terminates one InService instance of group on ImageA without decrement, as an
// operator with the console would, and fails when there is none.
func operatorTerminatesAnOldInstance(t *testing.T, w *testworld.World, group string) {
	t.Helper()
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState == "InService" && i.ImageID == testworld.ImageA && w.Account.TerminateWithoutDecrement(i.ID) {
			return
		}
	}
	t.Fatalf("the operator found no old instance of %s to terminate", group)
}

func midRefreshWorlds(t *testing.T, f func(t *testing.T, w *testworld.World, g testworld.GroupSetup, stop func())) {
	for _, p := range refreshPlatforms {
		for _, seed := range writerSeeds(t) {
			t.Run(fmt.Sprintf("%s writer seed %d", p.name, seed), func(t *testing.T) {
				spec := p.spec(1)
				g := spec.Groups[0]
				w := buildRefresh(t, spec)
				stop := besideWriter(w, g.Name, seed)
				publish(w, g, testworld.ImageB)
				runTo(t, w, 2*time.Hour, "refresh under way", midRefresh, g.Name)
				if seed != 0 {
					operatorTerminatesAnOldInstance(t, w, g.Name)
				}
				f(t, w, g, stop)
			})
		}
	}
}
