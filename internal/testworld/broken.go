package testworld

import (
	"time"

	"github.com/patch-agent/patch-agent/internal/agent"
)

// CheckerTick is the simulated time between two looks of the invariant checker in the checker's own tests and
// the crash matrix.
const CheckerTick = 5 * time.Second

// TestingT is what BrokenWorld needs of a test (*testing.T has it), so that the package links neither the
// testing package nor an assertion library into the demo.
type TestingT interface {
	Helper()
	Fatalf(format string, args ...any)
}

// BrokenWorld builds a world of one managed ECS group "g" (cluster c1, desired 3, max 6, a terminating hook
// with a 300 s heartbeat timeout) and a service of 6 tasks, plus the groups in more, with the agent's clients
// wrapped by wrap: the tests of the invariant checker break the agent through wrap and assert that the checker
// names what it broke. A world that cannot be built fails the test.
func BrokenWorld(t TestingT, wrap func(agent.Clients) agent.Clients, more ...GroupSetup) *World {
	t.Helper()
	groups := append([]GroupSetup{{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 6, Desired: 3}}, more...)
	w, err := Build(Spec{Groups: groups, Services: map[string]int{"web": 6}, Wrap: wrap})
	if err != nil {
		t.Fatalf("building the world: %v", err)
	}
	return w
}
