// Package checker is the invariant checker: after every step of a simulated world it compares what the
// agent did with what Auto Scaling, ECS and Kubernetes show, and names each invariant of
// docs/architecture.md ("Invariants") a step breaks, with its group and moment (Violation). Its own tests
// break the agent deliberately and assert the checker names the break (internal/testworld, checker_test.go).
package checker
