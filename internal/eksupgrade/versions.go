package eksupgrade

import (
	"fmt"

	"github.com/patch-agent/patch-agent/internal/eks"
)

// skewSince128 and skewBefore128 are how many minor versions a kubelet may be older than the API server:
// three since Kubernetes 1.28, two before (Kubernetes version skew policy, "kubelet").
const (
	skewSince128  = 3
	skewBefore128 = 2
)

// MaxKubeletSkew returns how many minor versions older than an API server of minor apiServerMinor a kubelet
// may be: 3 from 1.28 on, 2 before.
func MaxKubeletSkew(apiServerMinor int) int {
	if apiServerMinor >= 28 {
		return skewSince128
	}
	return skewBefore128
}

// CheckSkew returns nil when a node at Kubernetes version node may run under an API server at controlPlane:
// not newer, and at most MaxKubeletSkew minor versions older. Errors name both versions; ErrInvalidVersion
// (wrapped) when either is not "1.<minor>".
func CheckSkew(node, controlPlane string) error {
	n, err := eks.ParseVersion(node)
	if err != nil {
		return fmt.Errorf("node version %w", err)
	}
	c, err := eks.ParseVersion(controlPlane)
	if err != nil {
		return fmt.Errorf("control plane version %w", err)
	}
	switch skew := MaxKubeletSkew(c); {
	case n > c:
		return fmt.Errorf("kubelet %s is newer than the API server %s", node, controlPlane)
	case c-n > skew:
		return fmt.Errorf("kubelet %s is %d minor versions behind the API server %s (at most %d allowed)", node, c-n, controlPlane, skew)
	}
	return nil
}

// NextMinor returns "1.<minor+1>" for version "1.<minor>".
func NextMinor(version string) (string, error) {
	m, err := eks.ParseVersion(version)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("1.%d", m+1), nil
}

// Subject is the name the workflow of cluster goes by in history, pause locks and approvals: "eks:<cluster>".
func Subject(cluster string) string { return SubjectPrefix + cluster }

// SubjectPrefix starts Subject: `patch-agent approve eks:<cluster>`, `patch-agent history eks:<cluster>`,
// `patch-agent pause --group eks:<cluster>`.
const SubjectPrefix = "eks:"
