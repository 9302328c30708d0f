// Package buildinfo holds what a build of patch-agent is: its version, the commit it was built from and when.
// `make build`, `make image` and `make release` set them from git with the linker (-ldflags -X,
// scripts/version.sh; a release's version is its tag); a plain `go build` or `go run` falls back to what the
// Go toolchain stamps into the binary (module version, VCS revision and time: runtime/debug.ReadBuildInfo),
// and to "dev" / "unknown" when even that is missing.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Set with -ldflags "-X github.com/patch-agent/patch-agent/internal/buildinfo.version=v1.2.3 ...". Empty
// when the build did not set them.
var (
	version string // `git describe --tags --always --dirty`, e.g. v1.2.3, v1.2.3-4-gabc1234, abc1234-dirty
	commit  string // full commit id
	date    string // build time, RFC 3339 UTC
)

// Info is one build's identity. Every field is non-empty.
type Info struct {
	// Version is the release tag (v1.2.3), a description relative to it (v1.2.3-4-gabc1234), the short
	// commit id when no tag exists, the module version of `go install ...@v1.2.3`, or "dev".
	Version string `json:"version"`
	// Commit is the full git commit id, with "-dirty" when the tree had uncommitted changes; "unknown"
	// when neither the linker nor the toolchain recorded it.
	Commit string `json:"commit"`
	// Date is when the binary was built (RFC 3339, UTC) or, without it, the commit's time; "unknown" when
	// neither is known.
	Date string `json:"date"`
}

// Get returns the build's identity.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(version, commit, date, bi)
}

// resolve prefers the linker values, then the toolchain's build info (nil when there is none).
func resolve(v, c, d string, bi *debug.BuildInfo) Info {
	var vcsRev, vcsTime string
	dirty := false
	modVersion := ""
	if bi != nil {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			modVersion = mv
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRev = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if c == "" && vcsRev != "" {
		c = vcsRev
		if dirty {
			c += "-dirty"
		}
	}
	if v == "" {
		switch {
		case modVersion != "":
			v = modVersion
		case vcsRev != "":
			v = shortCommit(vcsRev)
			if dirty {
				v += "-dirty"
			}
		default:
			v = "dev"
		}
	}
	if d == "" {
		d = vcsTime
	}
	return Info{Version: v, Commit: orUnknown(c), Date: orUnknown(d)}
}

func shortCommit(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "unknown"
	}
	return s
}
