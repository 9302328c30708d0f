// Package kubesim simulates what the agent needs of a Kubernetes cluster on top of a real kube-apiserver
// client or a fake one: nodes that join as their EC2 instances boot, workloads whose pods land on Ready
// nodes and honour PodDisruptionBudgets on eviction, and an observation of each node (NodeObservation) for
// the invariant checker.
package kubesim
