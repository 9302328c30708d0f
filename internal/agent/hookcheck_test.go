package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Bursts spread out: the missing-hook check reads DescribeLifecycleHooks for at most hookChecksPerPass groups a
// pass, never-checked and longest-unchecked first, so that at 1,000 groups no pass spends 40-100 s reading
// hooks before its budget starts; every group is still checked (its warning set) within ceil(N/K) passes, and
// again once the poll interval has passed since its last check.
func TestHookCheckReadsABoundedNumberOfGroupsAPassAndEveryGroupWithinThePollInterval(t *testing.T) {
	const n = 60 // three passes at the default 25
	ctx := context.Background()
	var groups []testworld.GroupSetup
	for i := range n {
		groups = append(groups, testworld.GroupSetup{Name: fmt.Sprintf("bare-%02d", i), Cluster: "c1", Parameter: "/golden/x",
			Min: 1, Max: 2, Desired: 1, HeartbeatTimeout: -1}) // no terminating hook: a check leaves a warning
	}
	w := build(t, testworld.Spec{Groups: groups})
	k := agent.DefaultHookChecksPerPass
	reads := func() int { return w.Account.Calls()["autoscaling:DescribeLifecycleHooks"] }
	warned := func() int {
		c := 0
		for _, g := range groups {
			if w.Agent.HookProblem(g.Name) != "" {
				c++
			}
		}
		return c
	}
	tick, interval := 5*time.Second, 10*time.Minute // the demo world's ReconcileInterval, the default PollInterval
	for _, step := range []struct {
		name       string
		advance    time.Duration // before the pass
		wantReads  int
		wantWarned int
	}{
		{name: "first pass: the first K groups", wantReads: k, wantWarned: k},
		{name: "second pass: the next K", advance: tick, wantReads: k, wantWarned: 2 * k},
		{name: "third pass: the rest", advance: tick, wantReads: n - 2*k, wantWarned: n},
		{name: "every group checked: none is read again before the interval", advance: tick, wantReads: 0, wantWarned: n},
		{name: "the interval passed since the first checks: the first K again", advance: interval - 3*tick, wantReads: k, wantWarned: n},
		{name: "then the next K", advance: tick, wantReads: k, wantWarned: n},
	} {
		w.Account.Advance(step.advance)
		before := reads()
		require.NoError(t, w.Agent.Reconcile(ctx), step.name)
		require.Equal(t, step.wantReads, reads()-before, "%s: DescribeLifecycleHooks in the pass", step.name)
		require.LessOrEqual(t, reads()-before, k, step.name)
		require.Equal(t, step.wantWarned, warned(), "%s: groups whose missing hook is reported", step.name)
	}
}

// TestHookCheckStopsAtItsOwnBudgetAndTheGroupsItLeftAreCheckedFirstNextPass: in a fleet of 1,000 x 20 the hook
// check's DescribeLifecycleHooks can wait tens of seconds behind the fleet's Auto Scaling calls, before the
// pass budget has even started. Six groups without a terminating hook, one worker, and every
// DescribeLifecycleHooks takes 400 ms of the pass clock: the check of a pass stops once agent.HookCheckBudget
// (1 s) has passed — three groups read (at 0, 0.4 and 0.8 s), the fourth request not sent — without a "checking
// lifecycle hooks failed" warning; the three it left are the next pass's first.
func TestHookCheckStopsAtItsOwnBudgetAndTheGroupsItLeftAreCheckedFirstNextPass(t *testing.T) {
	var groups []testworld.GroupSetup
	for i := range 6 {
		groups = append(groups, testworld.GroupSetup{Name: fmt.Sprintf("bare-%d", i), Cluster: "c1", Parameter: "/golden/x",
			Min: 1, Max: 2, Desired: 1, HeartbeatTimeout: -1}) // no terminating hook: a check leaves a warning
	}
	core, logs := observer.New(zapcore.WarnLevel)
	faults := sim.NewFaults(1, nil)
	faults.Pause(true) // no injected faults: the wire and the counts
	w := build(t, testworld.Spec{Groups: groups, Faults: faults, Workers: 1, Log: zap.New(core)})
	limiter := awsapi.NewLimiter(awsapi.RateLimits{awsapi.RateAutoScaling: {Rate: 1000, Burst: 1000}})
	faults.SetWire(sim.Wire{Client: limiter, Trace: func(c sim.WireCall) {
		if c.Op == "autoscaling:DescribeLifecycleHooks" && c.Err == nil {
			w.Account.Advance(400 * time.Millisecond)
		}
	}})
	ctx := context.Background()
	checked := func() (names []string) {
		for _, g := range groups {
			if w.Agent.HookProblem(g.Name) != "" {
				names = append(names, g.Name)
			}
		}
		return names
	}
	const op = "autoscaling:DescribeLifecycleHooks"
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, []string{"bare-0", "bare-1", "bare-2"}, checked(), "three reads fit the hook check's budget")
	require.Equal(t, 3, faults.Stats().Successes[op], "the fourth request was not sent")
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Len(t, checked(), 6, "the groups left are checked first in the next pass")
	require.Equal(t, 6, faults.Stats().Successes[op], "and only they: one read per group")
	require.Zero(t, logs.FilterMessage("checking lifecycle hooks failed").Len(), "a check its budget stopped is not a failure")
}
