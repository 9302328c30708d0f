package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// describeCounter counts the DescribeInstanceRefreshes calls made to the fake refresh API.
type describeCounter struct {
	*fakeRefreshes
	describes int
}

func (d *describeCounter) DescribeInstanceRefreshes(ctx context.Context, in *autoscaling.DescribeInstanceRefreshesInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error) {
	d.describes++
	return d.fakeRefreshes.DescribeInstanceRefreshes(ctx, in, o...)
}

// memoRig is the refresh rig with a RefreshMemo, the agent's refresh ir-1 InProgress, and its calls counted.
func memoRig(t *testing.T) (*rig, *fakeRefreshes, *describeCounter) {
	t.Helper()
	rg, f := refreshRig()
	d := &describeCounter{fakeRefreshes: f}
	rg.o.AutoScaling, rg.o.RefreshMemo = d, NewRefreshMemo()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rg.seed0(refreshing("ir-1"))
	return rg, f, d
}

func TestRefreshIsDescribedAgainOnlyWhenTheGroupsInstancesChangeOrTheMemoIsOld(t *testing.T) {
	rg, _, d := memoRig(t)
	look := func(v model.GroupView) {
		t.Helper()
		_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: v, AMI: newAMI()})
		require.NoError(t, err)
	}
	look(oldFleet())
	rg.clock.Step(15 * time.Second)
	look(oldFleet())
	rg.clock.Step(15 * time.Second)
	look(oldFleet())
	require.Equal(t, 1, d.describes, "the same instances in the same states: one description")

	launching := oldFleet()
	launching.Instances = append(launching.Instances, model.InstanceView{ID: "i-4", LifecycleState: "Pending:Wait", LaunchTime: now0})
	look(launching)
	require.Equal(t, 2, d.describes, "a new instance: described again")
	look(launching)
	require.Equal(t, 2, d.describes)

	rg.clock.Step(refreshMemoMaxAge)
	look(launching)
	require.Equal(t, 3, d.describes, "the same instances, but the description is a safety poll old")
}

func TestRefreshIsDescribedOnEveryLookWithoutAMemo(t *testing.T) {
	rg, _, d := memoRig(t)
	rg.o.RefreshMemo = nil
	for range 3 {
		_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
		require.NoError(t, err)
		rg.clock.Step(15 * time.Second)
	}
	require.Equal(t, 3, d.describes)
}

// A refresh the agent cancels is described on every look until the cancel is seen through: the memo's
// InProgress must not send CancelInstanceRefresh again nor hide Cancelled.
func TestRefreshBeingCancelledIsDescribedOnEveryLook(t *testing.T) {
	rg, f, d := memoRig(t)
	pause := &state.Lock{Group: "prod", Who: "ops", Reason: "incident", Since: now0}
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	require.Equal(t, 1, f.cancels)
	f.refreshes[0].Status = astypes.InstanceRefreshStatusCancelled
	_, err = rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	require.Equal(t, 3, d.describes, "each look, and the check right before CancelInstanceRefresh that the refresh is still the agent's")
	require.Equal(t, 1, f.cancels)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseWaiting, stored.Phase, "the cancel was seen at the second look")
}
