package agent_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// drainingUnderHook counts the instances of group the refresh is replacing that drain under the agent's
// terminating lifecycle action: Terminating:Wait with their container instance DRAINING.
func drainingUnderHook(w *testworld.World, group string) int {
	n := 0
	w.Account.Observe(func(v *sim.View) {
		for _, i := range v.Group(group).Instances {
			if i.LifecycleState == "Terminating:Wait" && i.ContainerInstanceStatus == "DRAINING" {
				n++
			}
		}
	})
	return n
}

// requireRefreshOnNewVersion asserts that the rollout of group created its launch template version on its
// target AMI and started the instance refresh that launches it (the refresh's desired configuration; the
// group itself keeps its launch template version).
func requireRefreshOnNewVersion(t *testing.T, w *testworld.World, group string) {
	t.Helper()
	r := w.Rollout(context.Background(), group)
	require.NotEmpty(t, r.NewTemplateVersion, "%s prepared its launch template version: %+v", group, r)
	v, err := strconv.ParseInt(r.NewTemplateVersion, 10, 64)
	require.NoError(t, err)
	lt, ok := w.Account.LaunchTemplate(w.Account.Group(group).LaunchTemplateID)
	require.True(t, ok)
	require.Equal(t, r.TargetImageID, lt.ImageIDs[v], "%s's version %d names its target AMI", group, v)
	require.NotNil(t, r.Refresh, "%s rolls by instance refresh", group)
	require.NotEmpty(t, r.Refresh.ID, "%s started the refresh that launches version %d: %+v", group, v, r)
}
