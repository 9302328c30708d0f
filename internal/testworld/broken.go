package testworld

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
)

// CheckerTick is the simulated time between two looks of the invariant checker in the checker's own tests and
// the crash matrix.
const CheckerTick = 5 * time.Second

// BrokenWorld builds a world of one managed ECS group "g" (cluster c1, desired 3, max 6, a terminating hook
// with a 300 s heartbeat timeout) and a service of 6 tasks, plus the groups in more, with the agent's clients
// wrapped by wrap: the tests of the invariant checker break the agent through wrap and assert that the checker
// names what it broke.
func BrokenWorld(t testing.TB, wrap func(agent.Clients) agent.Clients, more ...GroupSetup) *World {
	t.Helper()
	groups := append([]GroupSetup{{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 6, Desired: 3}}, more...)
	w, err := Build(Spec{Groups: groups, Services: map[string]int{"web": 6}, Wrap: wrap})
	require.NoError(t, err)
	return w
}
