//go:build tools

// Package tools pins kube-apiserver for the envtest-based tests; it is not part of the agent.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
