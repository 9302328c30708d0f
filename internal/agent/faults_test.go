package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// twentyPercent fails 20 % of the calls of every AWS operation with a throttling, 5xx or timeout fault; half
// of those faults on mutating calls come after the effect (the response is lost). Not for ReceiveMessage:
// a lost receive hides its messages for their visibility timeout (2 minutes), and three in a row (seed 9 of
// the hook-only scenario) hide a lifecycle action past its 300 s heartbeat timeout, so Auto Scaling
// terminates the instance undrained before the agent ever hears of it — a limit of the message path, not of
// the agent's retries (docs/testing.md, "Fault matrix").
func twentyPercent() []sim.FaultRule {
	return []sim.FaultRule{
		{Op: "*", Probability: 0.1, Codes: sim.TransientFaults, ResponseLost: true, Except: []string{"sqs:ReceiveMessage"}},
		{Op: "*", Probability: 1.0 / 9, Codes: sim.TransientFaults},              // 1 - 0.9 * (8/9) = 20 % in all
		{Op: "sqs:ReceiveMessage", Probability: 0.1, Codes: sim.TransientFaults}, // the receive's other 10 %
	}
}

// faultScenario is one strategy of the agent, played from a built world to its end.
type faultScenario struct {
	name  string
	spec  func() (testworld.Spec, string) // the world, and the group that is rolled or scaled in
	play  func(t *testing.T, w *testworld.World, group string)
	check func(t *testing.T, w *testworld.World, group string)
	// ratioLimit, when set, replaces successRatioLimit for this scenario (see there).
	ratioLimit float64
}

// rollAll publishes ImageB for the group and runs until its rollout ends, then lets hooks settle.
func rollAll(t *testing.T, w *testworld.World, group string) {
	ctx := context.Background()
	settle(t, w, time.Minute)
	param := w.EKSParameter(group)
	if param != "" {
		w.PublishPublicAMI(param, testworld.ImageB)
	} else {
		w.PublishAMI("/golden/"+group, testworld.ImageB)
	}
	done, err := w.RunUntil(ctx, tick, 4*time.Hour, func() bool {
		r := w.Rollout(ctx, group)
		return r.TargetImageID == testworld.ImageB && !r.Active()
	})
	require.NoError(t, err)
	require.True(t, done, "rollout of %s did not end: %+v", group, w.Rollout(ctx, group))
	drainQueue(t, w)
}

// drainQueue runs until every message is deleted (the last lifecycle actions completed), then a minute more.
func drainQueue(t *testing.T, w *testworld.World) {
	done, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool {
		visible, inFlight := w.Account.QueueDepth(w.QueueURL)
		return visible+inFlight == 0
	})
	require.NoError(t, err)
	require.True(t, done, "messages left on the queue")
	settle(t, w, time.Minute)
}

func completedOnTarget(t *testing.T, w *testworld.World, group string) {
	r := w.Rollout(context.Background(), group)
	require.Equal(t, state.PhaseCompleted, r.Phase, "reason: %s", r.Reason)
	requireAllOn(t, w, group, testworld.ImageB, len(w.Account.Group(group).Instances)-countLeaving(w, group))
}

var faultScenarios = []faultScenario{
	{
		name: "ECS",
		spec: func() (testworld.Spec, string) {
			g := testworld.GroupSetup{Name: "ecs", Min: 3, Max: 6, Desired: 3}
			return oneGroup(&g), g.Name
		},
		play: rollAll, check: completedOnTarget,
	},
	{
		// Field case C23: the roomy 3-AZ layout of C16, a capacity-provider group rolled by instance refresh.
		name: "ECS capacity provider (C23 roomy 3-AZ)",
		spec: func() (testworld.Spec, string) {
			g := testworld.GroupSetup{Name: "cp-c23", Min: 1, Max: 6, Desired: 3, CapacityProvider: c23Provider("cp")}
			return oneGroup(&g), g.Name
		},
		play: rollAll,
		check: func(t *testing.T, w *testworld.World, group string) {
			completedOnTarget(t, w, group)
			require.Equal(t, model.StrategyRefresh, w.Rollout(context.Background(), group).Strategy)
			// Size and spread at the end as at the start: the checker's end-of-scenario rule.
			require.Empty(t, w.Checker.Finish(), trace(w, group))
		},
		// The refresh of a group ECS managed scaling owns waits out a checkpoint delay after each batch (spacing),
		// so faults that stretch a batch also stretch the run's polls: the limit stays 1.4, the one this layout
		// had before, until `make soak` measures it again.
		ratioLimit: 1.4,
	},
	{
		name: "ECS managed draining",
		spec: func() (testworld.Spec, string) {
			g := testworld.GroupSetup{Name: "md-asg", Min: 1, Max: 6, Desired: 3,
				CapacityProvider: &sim.CapacityProviderSpec{Name: "cp", ManagedScaling: true, ManagedTerminationProtection: true, ManagedDraining: true}}
			return oneGroup(&g), g.Name
		},
		play: rollAll,
		check: func(t *testing.T, w *testworld.World, group string) {
			completedOnTarget(t, w, group)
			require.Equal(t, model.StrategyRefresh, w.Rollout(context.Background(), group).Strategy)
		},
	},
	{
		name: "EKS self-managed",
		spec: func() (testworld.Spec, string) {
			s := testworld.DemoSpec()
			s.Groups, s.Services = s.Groups[1:], nil
			return s, testworld.EKSGroupName
		},
		play: rollAll, check: completedOnTarget,
	},
	{
		name: "lifecycle hook only (scale-in drain)",
		spec: func() (testworld.Spec, string) {
			g := testworld.GroupSetup{Name: "scale-in", Min: 1, Max: 4, Desired: 3}
			return oneGroup(&g), g.Name
		},
		play: func(t *testing.T, w *testworld.World, group string) {
			settle(t, w, time.Minute)
			require.NoError(t, w.Account.SetDesiredCapacity(group, 1))
			w.Checker.Baseline[group] = 1
			done, err := w.RunUntil(context.Background(), tick, 2*time.Hour, func() bool { return len(acceptedCompletions(w)) == 2 })
			require.NoError(t, err)
			require.True(t, done, "both lifecycle actions completed")
			drainQueue(t, w)
		},
		check: func(t *testing.T, w *testworld.World, group string) {
			for _, cs := range acceptedCompletions(w) {
				require.Equal(t, sim.ResultContinue, cs[0].Result)
				require.True(t, cs[0].Drained, "completed only once drained")
			}
			require.Len(t, w.Account.Group(group).Instances, 1+countLeaving(w, group))
		},
	},
}

// playScenario builds the scenario's world with an injector of the rules seeded with seed and plays it. It
// returns the injector's counts.
func playScenario(t *testing.T, sc faultScenario, seed uint64, rules []sim.FaultRule) (sim.FaultStats, *testworld.World) {
	spec, group := sc.spec()
	faults := sim.NewFaults(seed, nil, rules...)
	spec.Faults = faults
	w := build(t, spec)
	sc.play(t, w, group)
	require.Empty(t, w.Checker.Violations, "every invariant holds")
	// Invariant 4: every lifecycle action of the agent's hook was completed, once, by the agent (none
	// timed out: that would leave a termination without its completion).
	terminations := 0
	for _, term := range w.Account.Terminations() {
		if term.Group == group {
			terminations++
		}
	}
	own := 0
	for _, cs := range acceptedCompletions(w) {
		if cs[0].Hook == testworld.HookName && cs[0].Group == group {
			own++
		}
	}
	require.Equal(t, terminations, own, "each termination's lifecycle action completed by the agent")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "no message left behind")
	sc.check(t, w, group)
	return faults.Stats(), w
}

// successRatioLimit bounds the successful AWS calls of runs with 20 % faults against the fault-free run of the
// same scenario: a failed read must not cost a full re-read of everything, nor a retry on every tick.
const successRatioLimit = 1.3

// faultSeeds are the seeds of the runs with faults in the short form (`make test`); `make soak` runs 20
// ($PATCH_AGENT_SEEDS, testenv.Seeds). One run's ratio depends on which calls its draws hit (a lost
// ReceiveMessage hides a message for its visibility timeout), so the ratio of the sums is asserted only in the
// long form: over 3 seeds it measures the seeds, not the agent (per seed it ranges 0.54 - 2.25).
var faultSeeds = []uint64{1, 2, 3}

func TestFaultMatrixEveryStrategyCompletesUnder20PercentFaults(t *testing.T) {
	faultSeeds := testenv.Seeds(t, faultSeeds)
	for _, sc := range faultScenarios {
		t.Run(sc.name, func(t *testing.T) {
			clean, _ := playScenario(t, sc, 0, nil)
			require.Zero(t, sim.Total(clean.Injected))
			cleanOK := sim.Total(clean.Successes)
			faultyOK, injected, calls, lost := 0, 0, 0, 0
			var ratios []string
			for _, seed := range faultSeeds {
				faulty, _ := playScenario(t, sc, seed, twentyPercent())
				faultyOK += sim.Total(faulty.Successes)
				injected += sim.Total(faulty.Injected)
				calls += sim.Total(faulty.Calls)
				lost += sim.Total(faulty.Lost)
				ratios = append(ratios, fmt.Sprintf("%.2f", float64(sim.Total(faulty.Successes))/float64(cleanOK)))
			}
			require.Greater(t, float64(injected), 0.15*float64(calls), "about 20 %% of the calls failed")
			ratio := float64(faultyOK) / float64(cleanOK*len(faultSeeds))
			t.Logf("%s: %d successful calls fault-free; with 20 %% faults %.0f on average (%d of %d calls injected, %d lost responses): ratio %.2f (per seed %v)",
				sc.name, cleanOK, float64(faultyOK)/float64(len(faultSeeds)), injected, calls, lost, ratio, ratios)
			limit := successRatioLimit
			if sc.ratioLimit > 0 {
				limit = sc.ratioLimit
			}
			if !testenv.Soak(faultSeeds) {
				t.Logf("%d seeds: the ratio (limit %.2f) is asserted from %d seeds on (make soak)", len(faultSeeds), limit, testenv.SoakSeeds)
				return
			}
			require.LessOrEqual(t, ratio, limit, "successful calls with faults / fault-free")
		})
	}
}

// drainDurations runs the refresh of g to ImageB and returns, for each old instance, how long its terminating
// lifecycle action held it (Terminating:Wait, from the termination to the agent's completion), each completed
// only once drained.
func drainDurations(t *testing.T, w *testworld.World, g testworld.GroupSetup) []time.Duration {
	w.PublishAMI(g.Parameter, testworld.ImageB)
	runTo(t, w, 3*time.Hour, "ended", ended(testworld.ImageB), g.Name)
	settle(t, w, time.Minute)
	var drains []time.Duration
	for _, term := range w.Account.Terminations() {
		if term.Group != g.Name {
			continue
		}
		require.True(t, term.Proceeded, "%s proceeded to terminate", term.InstanceID)
		require.True(t, term.DrainedAtProceed, "%s drained before it terminated", term.InstanceID)
		drains = append(drains, term.ProceededAt.Sub(term.RequestedAt))
	}
	return drains
}

func TestEveryFifthCallOfEveryECSOperationFailingDoesNotStarveTheDrain(t *testing.T) {
	// AWS throttles per API action (Amazon ECS and Amazon EC2 API References, "Request throttling"): each ECS
	// operation fails on its 5th, 10th, ... call.
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:*", Every: 5, Codes: []string{sim.FaultThrottlingException}})
	w := build(t, spec)

	drains := drainDurations(t, w, g)

	r := w.Rollout(context.Background(), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Len(t, drains, 2)
	t.Logf("drains took %v with every 5th call of each ECS operation failing", drains)
	for _, d := range drains {
		require.Less(t, d, 5*time.Minute, "each drain ends well before its 30-minute deadline")
	}
	require.Positive(t, sim.Total(spec.Faults.Stats().Injected))
	require.Empty(t, w.Checker.Finish())
}

func TestAStepThatKeepsFailingIsRetriedAfterItsBackoffNotOnEveryTick(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "autoscaling:StartInstanceRefresh", Every: 1, Codes: []string{"AccessDenied"},
		Message: "User is not authorized to perform: autoscaling:StartInstanceRefresh"})
	w := build(t, spec)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	settle(t, w, 20*time.Minute) // 240 ticks

	attempts := spec.Faults.Stats().Calls["autoscaling:StartInstanceRefresh"]
	// 5 s times 1.5 up to 2 minutes (+ up to 20 % jitter, capped) within 20 minutes: about 15 attempts.
	require.GreaterOrEqual(t, attempts, 10, "still retried")
	require.LessOrEqual(t, attempts, 20, "not on every tick")
	require.Equal(t, 2, w.Account.LaunchedInstances(g.Name), "nothing launched")

	spec.Faults.SetRules() // the permission is granted
	grantedAt := w.Account.Clock().Now()
	runTo(t, w, 10*time.Minute, "refresh started", func(r state.Rollout) bool { return r.Refresh != nil && r.Refresh.ID != "" }, g.Name)
	require.LessOrEqual(t, w.Account.Clock().Since(grantedAt), 2*time.Minute+tick, "the backoff is capped at 2 minutes")
	require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "the refused calls started nothing")
	r := runTo(t, w, 3*time.Hour, "ended", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, "and the rollout goes on once the step succeeds: %s", r.Reason)
	settle(t, w, time.Minute)
	requireAllOn(t, w, g.Name, testworld.ImageB, 2)
	require.Empty(t, w.Checker.Finish())
}

// Field case C4 (../shared/CASES.md).
func TestC4HeartbeatsAreNeverSkippedWhileTheDrainCheckBacksOff(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2, HeartbeatTimeout: 300 * time.Second}
	spec := oneGroup(&g)
	// ListTasks never answers: every look at the drain fails and is backed off.
	spec.Faults = sim.NewFaults(1, nil, sim.FaultRule{Op: "ecs:ListTasks", Every: 1, Codes: []string{sim.FaultThrottlingException}})
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	polls := 0
	done, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool {
		polls++
		return len(acceptedCompletions(w)) == 1
	})
	require.NoError(t, err)
	require.True(t, done, "completed at the drain deadline")

	beats := w.Account.Heartbeats()
	require.NotEmpty(t, beats)
	last := w.Account.Terminations()[0].RequestedAt
	for _, b := range append(beats, acceptedCompletions(w)[beats[0].Token]...) {
		require.True(t, b.Accepted)
		require.LessOrEqual(t, b.At.Sub(last), 100*time.Second+2*tick, "a heartbeat at each third of the 300 s timeout")
		last = b.At
	}
	looks := spec.Faults.Stats().Calls["ecs:ListTasks"]
	require.Less(t, looks, polls/3, "the drain check backed off (%d looks in %d polls)", looks, polls)
}

func countLeaving(w *testworld.World, group string) int {
	n := 0
	for _, i := range w.Account.Group(group).Instances {
		if i.LifecycleState != "InService" {
			n++
		}
	}
	return n
}
