// Package e2e runs the real `patch-agent run` binary as a separate process against two accounts served over
// the AWS wire protocols on localhost.
//
// moto_server as the whole account (Auto Scaling, EC2, ECS, SSM, SQS, DynamoDB, EventBridge; CloudWatch on
// kumo, whose protocol moto does not serve). moto 5.2.1 serves no instance refresh, the only way the agent
// rolls a group, so on moto the agent goes as far as moto serves: it finds the opted-in group, takes the new
// AMI from its parameter, waits while the group lacks its lifecycle hooks, then creates the launch template
// version and records the refresh, which moto refuses. A small proxy in front of moto logs every call,
// repairs moto's ECS task answers and can SIGKILL the agent right after a mutating call was applied and before
// its answer reached the agent.
//
// The simulated account (internal/sim) served by internal/sim/wire (served_test.go), which models what moto
// cannot: instance refresh, lifecycle hooks with effect, ECS draining and task stops; the whole rollout runs
// there. Its clock follows the wall clock (wire.Drive), the agent's table is on kumo. The server's log and the
// invariant checker (checker.Checker) judge the rollouts; the server can SIGKILL the agent after any applied call.
//
// `make e2e` (run by `make test`) builds the binary and runs these tests with PATCH_AGENT_E2E_BIN set; without
// it the tests build the binary themselves. Invariants are checked from the accounts' state and the logs of
// the calls, never from the agent's own record. The package has no non-test code besides this comment.
package e2e
