package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Field case C3 on a shared queue, in a fleet of more than a hundred opted-in groups: every lifecycle message
// of another cluster's group is checked by describing that group by name (one DescribeAutoScalingGroups), not
// by listing every opted-in group again (one call per hundred groups per message, in the priority lane that the
// agent's heartbeats take). Each is still ignored, and a group opted in since the last discovery is still found.
func TestC3MessagesOfAnUnmanagedGroupCostOneDescribeByNameEachWhateverTheFleetSize(t *testing.T) {
	ctx := context.Background()
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 2, Desired: 1}
	w := build(t, oneGroup(&g))
	lt := w.Account.CreateLaunchTemplate("idle-lt", testworld.ImageA, "m7g.large")
	for i := range 150 { // opted in, misconfigured (no platform): listed by every full discovery
		require.NoError(t, w.Account.CreateGroup(sim.GroupSpec{Name: fmt.Sprintf("idle-%03d", i), LaunchTemplateID: lt,
			Tags: map[string]string{model.TagEnabled: "true"}}))
	}
	settle(t, w, 10*time.Second)

	w.Account.ResetCalls()
	ignored := 0
	for i := range 10 {
		disp, err := w.Agent.Handle(ctx, events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{
			GroupName: "other-cluster-asg", HookName: "their-drain", InstanceID: fmt.Sprintf("i-%017x", i+1),
			Token: fmt.Sprintf("token-%d", i), Transition: events.TransitionTerminating}})
		require.NoError(t, err)
		if disp == events.Ignored {
			ignored++
		}
	}
	require.Equal(t, 10, ignored)
	require.LessOrEqual(t, w.Account.Calls()["autoscaling:DescribeAutoScalingGroups"], 10, "one describe by name a message")
	require.Zero(t, w.Account.Calls()["autoscaling:DescribeAutoScalingInstances"], "nothing confirmed for a group not managed")

	// Opted in since the last discovery (platform and cluster known: its actions are drained): found by name.
	require.NoError(t, w.Account.CreateGroup(sim.GroupSpec{Name: "late-asg", LaunchTemplateID: lt, Tags: map[string]string{
		model.TagEnabled: "true", model.TagPlatform: model.PlatformECS, model.TagCluster: "c1"}}))
	_, err := w.Agent.Handle(ctx, events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{
		GroupName: "late-asg", HookName: testworld.HookName, InstanceID: "i-0123456789abcdef0", Token: "token-late",
		Transition: events.TransitionTerminating}})
	require.NoError(t, err)
	require.Equal(t, 1, w.Account.Calls()["autoscaling:DescribeAutoScalingInstances"], "the action of a group opted in since is confirmed")
	require.Empty(t, w.Account.LifecycleCompletions())
}
