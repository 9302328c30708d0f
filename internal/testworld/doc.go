// Package testworld builds the world the agent's scenario tests, crash matrices and demo run in: a simulated
// AWS account (internal/sim) on a simulated clock, an ECS or EKS cluster per group (with a simulated
// Kubernetes API for EKS: kubesim), the real agent wired to it in-process (NewReplica, Restart), fault and
// crash injection at every effect (Fuse) and the invariant checker (checker) looking after every step.
//
// It is test support: the production build (cmd/patch-agent with -tags nodemo) links none of it
// (tools/conventions, TestProductImportRules); the demo (internal/demo) tells its story on it.
package testworld
