package eksupgrade

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

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

// AddonVersion is an EKS add-on version "vX.Y.Z-eksbuild.N" (Amazon EKS User Guide, "Amazon EKS add-ons":
// the upstream version of the software, then the build EKS made of it).
type AddonVersion struct {
	Major, Minor, Patch, Build int
}

// ParseAddonVersion reads "vX.Y.Z-eksbuild.N" (the "v" and the build are optional: a missing build is 0).
// Errors: ErrInvalidAddonVersion (wrapped) naming the text.
func ParseAddonVersion(s string) (AddonVersion, error) {
	var v AddonVersion
	rest := strings.TrimPrefix(strings.TrimSpace(s), "v")
	core, build, hasBuild := strings.Cut(rest, "-eksbuild.")
	parts := strings.Split(core, ".")
	bad := fmt.Errorf("%w: %q (want vX.Y.Z-eksbuild.N)", ErrInvalidAddonVersion, s)
	if len(parts) != 3 {
		return v, bad
	}
	nums := []*int{&v.Major, &v.Minor, &v.Patch}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, bad
		}
		*nums[i] = n
	}
	if hasBuild {
		n, err := strconv.Atoi(build)
		if err != nil || n < 0 {
			return v, bad
		}
		v.Build = n
	}
	return v, nil
}

// ErrInvalidAddonVersion is wrapped by ParseAddonVersion's errors.
var ErrInvalidAddonVersion = errors.New("invalid EKS add-on version")

// Compare returns -1, 0 or +1 as v is older than, the same as, or newer than o: by major, minor, patch, then
// eksbuild number.
func (v AddonVersion) Compare(o AddonVersion) int {
	return cmp.Or(cmp.Compare(v.Major, o.Major), cmp.Compare(v.Minor, o.Minor), cmp.Compare(v.Patch, o.Patch),
		cmp.Compare(v.Build, o.Build))
}

// CompareAddonVersions compares two add-on version strings like AddonVersion.Compare. Errors: either is not
// an add-on version (ErrInvalidAddonVersion).
func CompareAddonVersions(a, b string) (int, error) {
	va, err := ParseAddonVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := ParseAddonVersion(b)
	if err != nil {
		return 0, err
	}
	return va.Compare(vb), nil
}
