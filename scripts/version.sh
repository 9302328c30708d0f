#!/usr/bin/env bash
# Prints the build's identity as shell assignments (VERSION, COMMIT, DATE) and the linker flags that stamp it
# into the binary (LDFLAGS, for internal/buildinfo), derived from git:
#   VERSION  git describe --tags --always --dirty: v1.2.3 on a tag, v1.2.3-4-gabc1234 after it, the short
#            commit id (abc1234) in a clone without tags; "-dirty" when the tree has uncommitted changes
#   COMMIT   the full commit id
#   DATE     the build time, RFC 3339 UTC (SOURCE_DATE_EPOCH, when set, for a reproducible build)
# VERSION, COMMIT and DATE already set in the environment win (a release pipeline may pass them). Without git
# and without them, it fails: a build that cannot say what it is must not pretend to be one.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
if [ -z "${VERSION:-}" ] || [ -z "${COMMIT:-}" ]; then
  if ! git rev-parse --git-dir >/dev/null 2>&1; then
    echo "scripts/version.sh: not a git checkout and VERSION/COMMIT not given: cannot derive the version" >&2
    exit 1
  fi
fi
VERSION=${VERSION:-$(git describe --tags --always --dirty --match 'v[0-9]*')}
COMMIT=${COMMIT:-$(git rev-parse HEAD)}
if [ -z "${DATE:-}" ]; then
  if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
    DATE=$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)
  else
    DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  fi
fi
pkg=github.com/patch-agent/patch-agent/internal/buildinfo
printf 'VERSION=%q\nCOMMIT=%q\nDATE=%q\n' "$VERSION" "$COMMIT" "$DATE"
printf 'LDFLAGS=%q\n' "-X ${pkg}.version=${VERSION} -X ${pkg}.commit=${COMMIT} -X ${pkg}.date=${DATE}"
