#!/usr/bin/env bash
# Builds a release of patch-agent from the v* tag at HEAD, offline (`make release`), into bin/release/VERSION:
#   patch-agent_VERSION_OS_ARCH/          the binary, LICENSE, NOTICE, README.md
#   patch-agent_VERSION_OS_ARCH.tar.gz    the same, as a reproducible archive (sorted, owner 0, commit time)
#   patch-agent_VERSION.spdx.json         SPDX 2.3 bill of materials of the binaries' Go modules (tools/sbom)
#   oci/                                  the OCI image layout of scripts/image.sh, same version
#   patch-agent_VERSION_image.txt         the image index digest (push: crane push --index oci REPO:VERSION)
#   SHA256SUMS                            checks the archives, the SBOM and the digest file: sha256sum -c SHA256SUMS
# Binaries: CGO_ENABLED=0, -trimpath, -tags nodemo, stamped by scripts/version.sh with the tag; the build
# date is the commit's time, so the same tag builds the same files. Platforms: RELEASE_PLATFORMS (default
# linux/amd64 linux/arm64 darwin/amd64 darwin/arm64); the image: RELEASE_IMAGE_PLATFORMS (default
# linux/amd64 linux/arm64), RELEASE_IMAGE=0 leaves it out.
#
# It refuses (exit 1) a tree with uncommitted changes, a HEAD that is not exactly at a v* tag and a tag that is
# not a semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]); RELEASE_ALLOW_UNTAGGED=1 builds anyway,
# as `git describe` names the commit (for tests, never to publish).
#
# Offline: GOPROXY=off and -mod=readonly, so every module must already be in the module cache (`go mod
# download`) and the image tools built (`make testbin`); it says which is missing instead of downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
die() {
  echo "scripts/release.sh: $*" >&2
  exit 1
}

git rev-parse --git-dir >/dev/null 2>&1 || die "not a git checkout: a release is built from a tag"
allow=${RELEASE_ALLOW_UNTAGGED:-0}
if [ -n "$(git status --porcelain --untracked-files=normal)" ] && [ "$allow" != 1 ]; then
  die "the working tree has uncommitted changes (git status): a release is built from a clean checkout of a tag"
fi
tag=$(git describe --exact-match --tags --match 'v[0-9]*' HEAD 2>/dev/null || true)
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$'
if [ -n "$tag" ] && ! [[ $tag =~ $semver ]]; then
  [ "$allow" = 1 ] || die "tag $tag at HEAD is not a semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])"
  tag=
fi
if [ -z "$tag" ]; then
  [ "$allow" = 1 ] || die "HEAD ($(git rev-parse --short HEAD)) is not at a v* tag: tag the commit to release (git tag -a v1.2.3 -m 'patch-agent v1.2.3') and run it again"
  tag=$(git describe --tags --always --dirty --match 'v[0-9]*')
  echo "scripts/release.sh: RELEASE_ALLOW_UNTAGGED=1: building $tag, which is not a release" >&2
fi

export VERSION=$tag
export COMMIT=${COMMIT:-$(git rev-parse HEAD)}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
unset DATE
eval "$(scripts/version.sh)"
export DATE

# Offline from here on: the module cache and the image tools are what there is.
export GOPROXY=off GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"
go list -deps -tags nodemo ./cmd/patch-agent >/dev/null 2>&1 ||
  die "modules of ./cmd/patch-agent are missing from the module cache and a release builds offline: run go mod download once (it needs the module proxy)"
build_image=${RELEASE_IMAGE:-1}
if [ "$build_image" = 1 ]; then
  scripts/ensure-ociimage.sh >/dev/null 2>&1 ||
    die "the image tools (ociimage, crane) are not built and a release builds offline: run make testbin once (it needs the module proxy), or RELEASE_IMAGE=0"
fi

out=bin/release/$VERSION
rm -rf "$out"
mkdir -p "$out"
platforms=${RELEASE_PLATFORMS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
bins=()
for p in $platforms; do
  os=${p%/*} arch=${p#*/}
  name=patch-agent_${VERSION}_${os}_${arch}
  echo "building $name" >&2
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -tags nodemo -ldflags "-s -w ${LDFLAGS}" -o "$out/$name/patch-agent" ./cmd/patch-agent
  cp LICENSE NOTICE README.md "$out/$name/"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@${SOURCE_DATE_EPOCH}" \
    -C "$out/$name" -cf - patch-agent LICENSE NOTICE README.md | gzip -n -9 >"$out/$name.tar.gz"
  bins+=("$out/$name/patch-agent")
done

echo "writing the SBOM" >&2
go run ./tools/sbom -version "$VERSION" -commit "$COMMIT" -created "$DATE" -o "$out/patch-agent_${VERSION}.spdx.json" "${bins[@]}"

sums=("patch-agent_${VERSION}.spdx.json")
for p in $platforms; do sums+=("patch-agent_${VERSION}_${p%/*}_${p#*/}.tar.gz"); done
if [ "$build_image" = 1 ]; then
  echo "building the image" >&2
  ref=$(PLATFORMS=${RELEASE_IMAGE_PLATFORMS:-linux/amd64 linux/arm64} scripts/image.sh "$out/oci")
  echo "${ref#*@}" >"$out/patch-agent_${VERSION}_image.txt"
  sums+=("patch-agent_${VERSION}_image.txt")
fi
(cd "$out" && sha256sum "${sums[@]}" >SHA256SUMS)
echo "$out"
