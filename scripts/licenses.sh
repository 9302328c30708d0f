#!/usr/bin/env bash
# Lists the licences of the Go modules the production binary links (./cmd/patch-agent, -tags nodemo, linux
# and darwin) from the module cache, offline, and writes docs/licenses.md and NOTICE (tools/licenses):
#   scripts/licenses.sh           rewrite both
#   scripts/licenses.sh -check    write nothing; fail when a module's licence is outside the allow list
#                                 (Apache-2.0, MIT, BSD-2-Clause, BSD-3-Clause, ISC, MPL-2.0) or either file is stale
# Run it after changing go.mod and commit what it writes; go test ./internal/modlicense checks the same.
set -euo pipefail
cd "$(dirname "$0")/.."
GOPROXY=off GOFLAGS=-mod=readonly exec go run ./tools/licenses "$@"
