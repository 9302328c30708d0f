package agent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// Field case C26 (../shared/CASES.md): an AMI-factory account builds the golden AMI and shares it with every
// member account; the agent's stack, deployed by StackSets with one set of parameters, passes AllowedAMIOwners
// to the agent as PATCH_AGENT_ALLOWED_AMI_OWNERS (TestAgentSettingsAndPublishedNamesAreStackParameters,
// internal/cfntest). Each member's agent, configured from that environment alone, rolls its untagged groups onto
// the factory's AMI.
func TestC26AMIFactoryAccountAllowedOnceAsAStackParameterRollsEveryMemberAccount(t *testing.T) {
	const factory = "210987654321"
	t.Setenv(config.EnvAllowedAMIOwners, factory)
	cfg := config.Default()
	cfg.QueueURL, cfg.Table, cfg.Region = "https://sqs.us-east-1.amazonaws.com/111122223333/patch-agent", "patch-agent-table", "us-east-1" // the stack's own
	require.NoError(t, cfg.Validate())
	owners := cfg.AMIOwners()
	require.Equal(t, []string{factory}, owners)

	shared := golden(imageC, "arm64")
	shared.OwnerID = factory
	for _, member := range []string{"111122223333", "444455556666", "777788889999"} {
		t.Run(member, func(t *testing.T) {
			w := buildGate(t, testworld.GroupSetup{Name: "web-asg", Min: 2, Max: 4, Desired: 2}, func(s *testworld.Spec) {
				s.Sim.AccountID = member
				s.AllowedAMIOwners = owners // the same value in every member: no parameter of its own
			})
			require.Equal(t, member, w.Account.Options().AccountID)
			w.Account.RegisterImage(shared)
			r := rollTo(t, w.World, w.g, imageC)
			require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
			requireAllOn(t, w.World, w.g.Name, imageC, 2)
			require.Zero(t, w.rejected(providers.RejectOwnerNotAllowed))
		})
	}
}
