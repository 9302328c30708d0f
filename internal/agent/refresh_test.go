package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
)

// refreshGroup is an ECS group of desired 10 rolled by instance refresh in batches of batch, with room above
// desired for one batch and the agent's launching and terminating hooks.
func refreshGroup(batch int) demo.GroupSetup {
	return demo.GroupSetup{Name: "rf", Min: 2, Max: int32(10 + batch), Desired: 10, LaunchingHook: true,
		Tags: map[string]string{lifecycle.TagStrategy: lifecycle.StrategyRefresh, lifecycle.TagBatchSize: fmt.Sprint(batch)}}
}

// buildRefresh builds the world of g with the rule that the agent never writes desired capacity on.
func buildRefresh(t *testing.T, spec demo.Spec) *demo.World {
	t.Helper()
	w := build(t, spec)
	w.Checker.NoDesiredWrites = true
	settle(t, w, time.Minute)
	return w
}

// refreshCalls counts the agent's calls of op ("autoscaling:StartInstanceRefresh") in the account's call log.
func refreshCalls(w *demo.World, op string) int { return w.Account.Calls()[op] }

// requireNoCapacityWrites asserts from the account's capacity writes that the agent wrote no desired capacity
// and no MaxSize of group: no SetDesiredCapacity, no decrementing termination, no UpdateAutoScalingGroup that
// changes either.
func requireNoCapacityWrites(t *testing.T, w *demo.World, group string) {
	t.Helper()
	for _, cw := range w.Account.CapacityWrites() {
		if cw.Group == group && cw.By == sim.CallerAPI {
			require.False(t, cw.Op == sim.OpSetDesiredCapacity || (cw.Op == sim.OpTerminateInstance && cw.Decrement) ||
				(cw.Op == sim.OpUpdateAutoScalingGroup && (cw.From != cw.To || cw.MaxFrom != cw.MaxTo)), "the agent wrote %s", cw)
		}
	}
}

func TestRefreshRollsAnECSGroupInBatchesWithoutWritingDesiredCapacity(t *testing.T) {
	for _, batch := range []int{1, 3} {
		t.Run(fmt.Sprintf("batch %d of 10", batch), func(t *testing.T) {
			g := refreshGroup(batch)
			spec := oneGroup(&g)
			spec.Policy = lifecycle.DefaultPolicy()
			spec.Policy.ClusterBudget = batch
			w := buildRefresh(t, spec)
			r := rollTo(t, w, g, demo.ImageB)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			requireAllOn(t, w, g.Name, demo.ImageB, 10)
			require.Equal(t, 1, refreshCalls(w, "autoscaling:StartInstanceRefresh"), "one refresh per rollout")
			requireNoCapacityWrites(t, w, g.Name)
		})
	}
}
