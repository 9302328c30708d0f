package cfntest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLifecycleRuleFiltersOnTheAgentsHookNamesOnlyWhenGiven: LifecycleHookNames (default empty) swaps the
// lifecycle rule for one whose pattern keeps only the agent's hooks (detail.LifecycleHookName); left empty,
// the stack keeps the rule existing stacks have, every hook's actions (the agent then rejects other tools'
// hooks as ForeignHook).
func TestLifecycleRuleFiltersOnTheAgentsHookNamesOnlyWhenGiven(t *testing.T) {
	for _, tc := range []struct {
		name   string
		params map[string]string
		rule   string
		want   any // the pattern's detail; nil: none
	}{
		{"default: every hook", defaultConfig, "LifecycleActionRule", nil},
		{"named hooks", namedHooksConfig, "LifecycleNamedHooksRule",
			map[string]any{"LifecycleHookName": []any{"patch-agent-drain", "patch-agent-launch"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props, _, _ := loadStack(t, tc.params).resource(t, tc.rule)
			require.NotNil(t, props, "rule %s exists", tc.rule)
			pattern := props["EventPattern"].(map[string]any)
			require.Equal(t, []any{"aws.autoscaling"}, pattern["source"])
			require.Equal(t, []any{"EC2 Instance-launch Lifecycle Action", "EC2 Instance-terminate Lifecycle Action"}, pattern["detail-type"])
			require.Equal(t, tc.want, pattern["detail"])
		})
	}
}
