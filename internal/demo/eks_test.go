package demo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

func TestDemoEKSGroupRollsWithoutBreakingItsPodDisruptionBudget(t *testing.T) {
	ctx := context.Background()
	w, err := testworld.Build(testworld.DemoSpec())
	require.NoError(t, err)
	param := w.EKSParameter(testworld.EKSGroupName)
	require.Equal(t, "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/standard/recommended/image_id", param,
		"auto: cluster version from DescribeCluster, arm64 from DescribeInstanceTypes of m7g.large")
	ready, err := w.Kube.ReadyPods(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, ready)

	w.PublishPublicAMI(param, testworld.ImageB)
	minReady := ready
	done, err := w.RunUntil(ctx, 5*time.Second, time.Hour, func() bool {
		n, err := w.Kube.ReadyPods(ctx)
		require.NoError(t, err)
		minReady = min(minReady, n)
		r := w.Rollout(ctx, testworld.EKSGroupName)
		return r.TargetImageID == testworld.ImageB && r.Phase == state.PhaseCompleted
	})
	require.NoError(t, err)
	require.True(t, done, "rollout: %+v", w.Rollout(ctx, testworld.EKSGroupName))
	require.Empty(t, w.Checker.Finish())
	require.GreaterOrEqual(t, w.Checker.MinServing[testworld.EKSGroupName], 3)
	require.GreaterOrEqual(t, minReady, 5, "PodDisruptionBudget minAvailable 5 held throughout")
	for _, i := range w.Account.Group(testworld.EKSGroupName).Instances {
		if i.LifecycleState == "InService" {
			require.Equal(t, testworld.ImageB, i.ImageID, i.ID)
		}
	}
	nodes, err := w.Kube.Observe(ctx)
	require.NoError(t, err)
	serving := 0
	for _, n := range nodes {
		if n.Ready && !n.Cordoned {
			serving++
		}
	}
	require.Equal(t, 3, serving, "three Ready, schedulable nodes: %+v", nodes)
}
