#!/usr/bin/env bash
# Builds the kumo AWS emulator (SQS, DynamoDB, EventBridge, SSM, CloudWatch) once per machine into a cache
# directory outside the repository and prints the binary's path. A cold build takes ~8 CPU-minutes.
# kumo cannot be `go install`ed here: the checksum database lacks two of its indirect modules, so
# tools/kumo is a wrapper module that carries kumo's own go.sum.
set -euo pipefail
KUMO_VERSION=v0.33.1
here=$(cd "$(dirname "$0")/.." && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/patch-agent/testbin/kumo-${KUMO_VERSION}"
bin="$cache/kumo"
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
mkdir -p "$cache"
cd "$here/tools/kumo"
echo "building kumo ${KUMO_VERSION} into $cache (one time, ~8 CPU-minutes)" >&2
go mod download github.com/sivchari/kumo@${KUMO_VERSION} >&2
if ! grep -q "service/appmesh v1.35.14 h1" go.sum 2>/dev/null; then
  cp "$(go env GOMODCACHE)/github.com/sivchari/kumo@${KUMO_VERSION}/go.sum" go.sum && chmod 644 go.sum
fi
go mod tidy >&2
go build -o "$bin.tmp.$$" github.com/sivchari/kumo/cmd/kumo >&2
mv "$bin.tmp.$$" "$bin"
echo "$bin"
