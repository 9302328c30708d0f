package operate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// The plan of a group's rollback names the instance refresh that rolls it back, with instance counts or
// without (a record that never counted them), and says desired capacity is not written.
func TestRollbackPlanOfAGroupNamesTheInstanceRefresh(t *testing.T) {
	var b strings.Builder
	printRollbackPlan(&b, operator.RollbackPlan{Group: "web", Platform: "ecs", Phase: state.PhaseCompleted, From: testworld.ImageB, To: testworld.ImageA,
		Instances: 4, OnFrom: 4})
	require.Contains(t, b.String(), "4 of the group's 4 instance(s) run "+testworld.ImageB)
	require.Contains(t, b.String(), "an instance refresh to a launch template version with "+testworld.ImageA)
	require.Contains(t, b.String(), "desired capacity is not written")
	require.NotContains(t, b.String(), "surge")

	b.Reset()
	printRollbackPlan(&b, operator.RollbackPlan{Group: "web", Platform: "ecs", Phase: state.PhaseCompleted, From: testworld.ImageB, To: testworld.ImageA})
	require.Contains(t, b.String(), "an instance refresh to a launch template version with "+testworld.ImageA+" replaces every instance not on it")
	require.NotContains(t, b.String(), "surge")
}

// The plan of a rollback of a refresh whose intent is recorded but never sent (a pause, the window or an alarm
// held StartInstanceRefresh) names no refresh to roll back: the agent starts one back to the previous version.
func TestRollbackPlanOfARefreshNeverSentSaysSo(t *testing.T) {
	var b strings.Builder
	printRollbackPlan(&b, operator.RollbackPlan{Group: "web", Platform: "ecs", Phase: state.PhaseReplacing, From: testworld.ImageB, To: testworld.ImageA,
		Refresh: &operator.RefreshRollbackPlan{PreviousVersion: "1"}})
	require.NotContains(t, b.String(), "instance refresh  (")
	require.NotContains(t, b.String(), "RollbackInstanceRefresh")
	require.Contains(t, b.String(), "no instance refresh is recorded as sent yet")
	require.Contains(t, b.String(), "launch template version 1")
}
