package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/demo"
)

// Issue #21 item 2, bursts spread out: the missing-hook check reads DescribeLifecycleHooks for at most
// hookChecksPerPass groups a pass, never-checked and longest-unchecked first, so that at 1,000 groups no pass
// spends 40-100 s reading hooks before its budget starts; every group is still checked (its warning set)
// within ceil(N/K) passes, and again once the poll interval has passed since its last check.
func TestHookCheckReadsABoundedNumberOfGroupsAPassAndEveryGroupWithinThePollInterval(t *testing.T) {
	const n = 60 // three passes at the default 25
	ctx := context.Background()
	var groups []demo.GroupSetup
	for i := range n {
		groups = append(groups, demo.GroupSetup{Name: fmt.Sprintf("bare-%02d", i), Cluster: "c1", Parameter: "/golden/x",
			Min: 1, Max: 2, Desired: 1, HeartbeatTimeout: -1}) // no terminating hook: a check leaves a warning
	}
	w := build(t, demo.Spec{Groups: groups})
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
