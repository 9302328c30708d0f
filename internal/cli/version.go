package cli

import (
	"fmt"
	"runtime"

	"github.com/patch-agent/patch-agent/internal/buildinfo"
)

// Version is the version patch-agent was built as: set from git by `make build`, `make image` and
// `make release` (internal/buildinfo; the tag for a release), else the module version of
// `go install ...@v1.2.3` or the commit the toolchain stamped, else "dev".
func Version() string { return buildinfo.Get().Version }

// VersionLine is what `patch-agent version` and `patch-agent --version` print, e.g.
// "patch-agent v1.2.3 (commit 0123abc..., built 2026-12-01T09:00:00Z, go1.26.8, linux/amd64)".
func VersionLine() string {
	b := buildinfo.Get()
	return fmt.Sprintf("patch-agent %s (commit %s, built %s, %s, %s/%s)", b.Version, b.Commit, b.Date,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
