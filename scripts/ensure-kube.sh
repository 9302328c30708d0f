#!/usr/bin/env bash
# Builds kube-apiserver v1.34.4 and etcd v3.6.8 from the Go module proxy, once per machine, into a cache
# directory outside the repository, and prints that directory (use it as KUBEBUILDER_ASSETS for envtest).
# A cold kube-apiserver build takes ~15 CPU-minutes and ~2 GB of memory; etcd ~1 minute.
set -euo pipefail
KUBE_VERSION=v1.34.4
STAGING_VERSION=v0.34.4
ETCD_VERSION=v3.6.8
here=$(cd "$(dirname "$0")/.." && pwd)
assets="${XDG_CACHE_HOME:-$HOME/.cache}/patch-agent/testbin/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}"
mkdir -p "$assets"

if [ ! -x "$assets/etcd" ]; then
  echo "building etcd ${ETCD_VERSION} into $assets" >&2
  (cd "$here/tools/etcd" && go mod tidy >&2 && go build -o "$assets/etcd.tmp.$$" . >&2)
  mv "$assets/etcd.tmp.$$" "$assets/etcd"
fi

if [ ! -x "$assets/kube-apiserver" ]; then
  echo "building kube-apiserver ${KUBE_VERSION} into $assets (one time, ~15 CPU-minutes)" >&2
  cd "$here/tools/kube-apiserver"
  go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" >/dev/null
  modfile="$(go env GOMODCACHE)/k8s.io/kubernetes@${KUBE_VERSION}/go.mod"
  {
    printf 'module github.com/patch-agent/patch-agent/tools/kube-apiserver\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
    sed -n '/^replace (/,/^)/p' "$modfile" | awk '/=>/{print $1}' | while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
    printf ')\n'
  } > go.mod
  go mod tidy >&2
  go build -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34" \
    -o "$assets/kube-apiserver.tmp.$$" k8s.io/kubernetes/cmd/kube-apiserver >&2
  mv "$assets/kube-apiserver.tmp.$$" "$assets/kube-apiserver"
fi
echo "$assets"
