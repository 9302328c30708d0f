// Package engine is the rollout engine: for one target per call, Orchestrator.Reconcile reads the target's
// rollout record, decides the next step from the record, what the providers saw (model.Inputs) and the clock,
// writes the decision ahead of its one effect, and takes it. An Auto Scaling group is rolled by one instance
// refresh at a time (rollout_refresh.go) after the gates (rollout_gates.go: pause, maintenance window,
// approval, alarms, AMI gate); an EKS managed node group by its own update (rollout_nodegroup.go). The
// transitions are the table in internal/state (state.CheckTransition); docs/state.md draws it.
//
// It makes its AWS calls through internal/providers and reasons on internal/model values and internal/state
// records; it imports no AWS SDK package and never internal/lifecycleaction; only internal/agent imports it
// (tools/conventions, TestProductImportRules). Its decisions are tested on in-package fakes of the providers
// with a memory store and a fake clock (orchestrator_fakes_test.go), without a simulated account.
package engine
