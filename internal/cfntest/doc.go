// Package cfntest checks cloudformation/patch-agent.yaml, the stack that deploys the agent in an account. It
// has only tests, run by `go test ./...`:
//
//   - lint_test.go: scripts/cfn-lint.sh (the pinned npm cfn-lint, installed by `npm ci`) finds nothing.
//   - template_test.go: goformation parses the template with parameter values and evaluated conditions, and
//     every intrinsic function resolves.
//   - iam_test.go: least privilege. No mutating action is allowed on every resource unless the opt-in tag
//     (or a listed, justified condition) scopes it; every AWS call in internal/awsapi is allowed; a small
//     policy evaluator shows what the agent may and may not do (untagged groups, other clusters, other
//     parameters, other roles).
//   - resources_test.go: the queue policy admits exactly the stack's rules, the DLQ redrive, the table (PITR,
//     SSE, TTL on expiresAt, on-demand), the task's environment and the alarms.
//   - eventbridge_test.go: every rule pattern of the template, put into kumo's EventBridge with an SQS target,
//     receives exactly the relevant fixtures of testdata/events and none of the others.
package cfntest
