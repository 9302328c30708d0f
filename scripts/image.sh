#!/usr/bin/env bash
# Builds the patch-agent image without Docker and prints the OCI layout's path@digest:
#   scripts/image.sh [OUT]      (default bin/image/oci; `make image`)
# For linux/amd64 and linux/arm64: a static binary (CGO_ENABLED=0, -trimpath, -tags nodemo: no demo, no
# simulated account, the time zone database embedded) stamped with scripts/version.sh; then tools/ociimage puts
# it on an empty base with the CA certificates of this machine and /etc/passwd, entrypoint /patch-agent, user
# 65532:65532 and the OCI labels source, revision, version, created. Push it with
#   "$(scripts/ensure-ociimage.sh)/crane" push --index bin/image/oci REGISTRY/patch-agent:TAG
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
out=${1:-bin/image/oci}
CA_CERTS=${CA_CERTS:-/etc/ssl/certs/ca-certificates.crt}
IMAGE_SOURCE=${IMAGE_SOURCE:-https://github.com/patch-agent/patch-agent}
PLATFORMS=${PLATFORMS:-linux/amd64 linux/arm64}
eval "$(scripts/version.sh)"
tools=$(scripts/ensure-ociimage.sh)
bins=()
for p in $PLATFORMS; do
  os=${p%/*} arch=${p#*/}
  bin="bin/image/${os}-${arch}/patch-agent"
  mkdir -p "$(dirname "$bin")"
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags nodemo -ldflags "-s -w ${LDFLAGS}" -o "$bin" ./cmd/patch-agent
  bins+=(-binary "${p}=${bin}")
done
"$tools/ociimage" -out "$out" -ca-certs "$CA_CERTS" -created "$DATE" "${bins[@]}" \
  -label "org.opencontainers.image.title=patch-agent" \
  -label "org.opencontainers.image.source=${IMAGE_SOURCE}" \
  -label "org.opencontainers.image.revision=${COMMIT}" \
  -label "org.opencontainers.image.version=${VERSION}" \
  -label "org.opencontainers.image.created=${DATE}"
