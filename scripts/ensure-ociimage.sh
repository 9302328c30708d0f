#!/usr/bin/env bash
# Builds the image tools from the Go module proxy, once per machine and per version of tools/ociimage, into a
# cache directory outside the repository, and prints that directory. It holds:
#   ociimage  tools/ociimage: assembles the image (go-containerregistry, the library of crane) as an OCI layout
#   crane     go-containerregistry's crane CLI: pushes the layout (crane push --index DIR REF), inspects images
# Versions are pinned in tools/ociimage/go.mod (github.com/google/go-containerregistry v0.22.1) and go.sum.
# A cold build takes ~30 s. Builds of two runs at once (a CI run beside a developer's) each write their own
# temporary file (.tmp.PID) and rename it into place: the last rename wins, both leave a complete binary.
set -euo pipefail
GGCR_VERSION=v0.22.1
here=$(cd "$(dirname "$0")/.." && pwd)
src="$here/tools/ociimage"
key=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/patch-agent/testbin/ociimage-ggcr-${GGCR_VERSION}-${key}"
if [ -x "$cache/ociimage" ] && [ -x "$cache/crane" ]; then echo "$cache"; exit 0; fi
mkdir -p "$cache"
echo "building ociimage and crane (go-containerregistry ${GGCR_VERSION}) into $cache" >&2
cd "$src"
go build -trimpath -o "$cache/ociimage.tmp.$$" . >&2
go build -trimpath -o "$cache/crane.tmp.$$" github.com/google/go-containerregistry/cmd/crane >&2
mv "$cache/ociimage.tmp.$$" "$cache/ociimage"
mv "$cache/crane.tmp.$$" "$cache/crane"
echo "$cache"
