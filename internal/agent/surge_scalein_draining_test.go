package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Invariants 1 and 3, the single-replacement form of TestBatchScaledInByAnotherActorGivesBackOnlyItsOwnSurgeAndTheScaleInStands:
// an autoscaler scales in by one (4 -> 3) while the old instance drains, after the surge's replacement serves,
// and the draining instance is protected from scale in (ECS managed termination protection protects instances
// that still run tasks), so Auto Scaling removes another instance. Another actor's scale in counts by its change
// (the checker's followDesired): its -1 stands and the agent's termination with decrement gives back its own
// surge, so desired capacity ends at 2, never lower on the way, every instance on the target AMI.
func TestSurgeScaledInByAnotherActorWhileDrainingGivesBackItsOwnAndTheScaleInStands(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 8, Desired: 3}
	w := buildWatched(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 4}})
	settle(t, w.World, 10*time.Second)
	rollToDraining(t, w.World, g)
	require.Equal(t, int32(4), w.Account.Group(g.Name).Desired, "the surge is in desired capacity")
	old := w.Rollout(ctx, g.Name).Current.OldInstanceID
	_, err := w.Account.AutoScaling().SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{AutoScalingGroupName: aws.String(g.Name),
		InstanceIds: []string{old}, ProtectedFromScaleIn: aws.Bool(true)})
	require.NoError(t, err, "the draining instance is protected from scale in (ECS managed termination protection: it still runs tasks)")
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3), "the autoscaler scales in while the old instance drains")
	minDesired := int32(99)
	_, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
		minDesired = min(minDesired, w.Account.Group(g.Name).Desired)
		return w.Rollout(ctx, g.Name).Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	settle(t, w.World, 5*time.Minute)
	violations := logDesired(t, w.World, g.Name)
	require.Equal(t, state.PhaseCompleted, w.Rollout(ctx, g.Name).Phase)
	grp := w.Account.Group(g.Name)
	require.Equal(t, int32(2), grp.Desired, "the surge given back, the other actor's -1 kept")
	require.Equal(t, int32(2), minDesired, "never below that on the way")
	require.Len(t, grp.Instances, 2)
	requireAllOn(t, w.World, g.Name, demo.ImageB, 2)
	require.Equal(t, int32(2), w.Checker.Baseline[g.Name], "the checker's baseline follows the other actor's -1")
	require.Empty(t, violations)
}
