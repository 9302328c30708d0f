package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
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
// once (the traits and the refresh's hook check read the same answer), its refreshes once before the start
// (a refresh whose answer was lost is adopted, never started twice), and the look after the start takes the
// new refresh from the start's answer while the group's instances are as they were.
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
	require.Equal(t, map[string]int{"DescribeLifecycleHooks": 1, "DescribeInstanceRefreshes": 1, "StartInstanceRefresh": 1}, c.calls)

	// Auto Scaling launches the first replacement: the next look describes the refresh.
	f.refreshes[0].Status = astypes.InstanceRefreshStatusInProgress
	launching := oldFleet()
	launching.Instances = append(launching.Instances, model.InstanceView{ID: "i-4", LifecycleState: "Pending:Wait", LaunchTime: rg.clock.Now()})
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: launching, AMI: newAMI()})
	require.NoError(t, err)
	require.Equal(t, 2, c.calls["DescribeInstanceRefreshes"])
	stored, err = rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Contains(t, stored.Reason, "instance refresh ir-1 InProgress")
}

// The refresh a start remembers is described at the first look a safety poll after the start, whatever the
// group's instances: a refresh Auto Scaling fails before it launches anything is seen within one safety poll.
func TestStartedRefreshIsDescribedWithinASafetyPoll(t *testing.T) {
	rg, f := refreshRig()
	c := &callCounter{fakeRefreshes: f, calls: map[string]int{}}
	rg.o.AutoScaling, rg.o.Groups, rg.o.RefreshMemo = c, nil, NewRefreshMemo()
	rg.seed0(refreshing(""))
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	require.Len(t, f.starts, 1)
	require.Equal(t, 1, c.calls["DescribeInstanceRefreshes"], "the check before the start")
	f.refreshes[0].Status, f.refreshes[0].StatusReason = astypes.InstanceRefreshStatusFailed, aws.String("launch template version invalid")
	rg.clock.Step(refreshMemoMaxAge)
	_, err = rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseRollingBack, stored.Phase)
	require.Contains(t, stored.Reason, "instance refresh ir-1 failed: launch template version invalid")
}
