package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// callCounter counts the Auto Scaling calls made to the fake refresh API, by operation.
type callCounter struct {
	*fakeRefreshes
	calls map[string]int
}

func (c *callCounter) DescribeLifecycleHooks(ctx context.Context, in *autoscaling.DescribeLifecycleHooksInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	c.calls["DescribeLifecycleHooks"]++
	return c.fakeRefreshes.DescribeLifecycleHooks(ctx, in, o...)
}

func (c *callCounter) DescribeInstanceRefreshes(ctx context.Context, in *autoscaling.DescribeInstanceRefreshesInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error) {
	c.calls["DescribeInstanceRefreshes"]++
	return c.fakeRefreshes.DescribeInstanceRefreshes(ctx, in, o...)
}

func (c *callCounter) StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, o ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	c.calls["StartInstanceRefresh"]++
	return c.fakeRefreshes.StartInstanceRefresh(ctx, in, o...)
}

// One refresh start, from a detected AMI to the look after StartInstanceRefresh, over the production Groups
// provider (providers.AutoScalingGroups) and the agent's RefreshMemo: the group's lifecycle hooks are described
// once (the traits and the refresh's hook check read the same answer), its refreshes before the start (a
// refresh whose answer was lost is adopted, never started twice) and at the look after it.
func TestAutoScalingCallsOfOneRefreshStart(t *testing.T) {
	rg, f := refreshRig()
	c := &callCounter{fakeRefreshes: f, calls: map[string]int{}}
	rg.o.AutoScaling, rg.o.Groups, rg.o.RefreshMemo = c, nil, NewRefreshMemo()
	rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
	look := func() state.Rollout {
		t.Helper()
		_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
		require.NoError(t, err)
		stored, err := rg.store.GetRollout(context.Background(), "prod")
		require.NoError(t, err)
		rg.clock.Step(15 * time.Second)
		return stored
	}
	for i := 0; len(f.starts) == 0; i++ {
		require.Less(t, i, 5, "no refresh started")
		look()
	}
	stored := look() // the look after the start
	t.Logf("Auto Scaling calls of one refresh start: %v", c.calls)
	require.Equal(t, state.PhaseReplacing, stored.Phase)
	require.Equal(t, "ir-1", stored.Refresh.ID)
	require.Contains(t, stored.Reason, "instance refresh ir-1 Pending")
	require.Equal(t, map[string]int{"DescribeLifecycleHooks": 1, "DescribeInstanceRefreshes": 2, "StartInstanceRefresh": 1}, c.calls)
}
