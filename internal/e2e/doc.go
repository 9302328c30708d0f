// Package e2e runs the real `patch-agent run` binary as a separate process against two accounts served over
// the AWS wire protocols on localhost.
//
// moto_server as the whole account (Auto Scaling, EC2, ECS, SSM, SQS, DynamoDB, EventBridge; CloudWatch on
// kumo, whose protocol moto does not serve), with a Go world driver playing the ECS container agent: it
// registers a container instance for every new EC2 instance, starts tasks on it, and reports them stopped once
// the container instance is DRAINING. A small proxy in front of moto logs every call, repairs moto's ECS task
// answers and can SIGKILL the agent right after a mutating call was applied and before its answer reached the
// agent.
//
// The simulated account (internal/sim) served by internal/sim/wire (served_test.go), which models what moto
// cannot: instance refresh, lifecycle hooks with effect, ECS draining and task stops; its clock follows the
// wall clock (wire.Drive), the agent's table is on kumo. The server's log and the invariant checker
// (demo.Checker) judge the rollouts; the server can SIGKILL the agent after any applied call.
//
// `make e2e` (run by `make test`) builds the binary and runs these tests with PATCH_AGENT_E2E_BIN set; without
// it the tests build the binary themselves. Invariants are checked from the accounts' state and the logs of
// the calls, never from the agent's own record. The package has no non-test code besides this comment.
package e2e
