// Package releasetest runs `make release` (scripts/release.sh) the way a maintainer does: in a temporary
// clone of this repository, holding the working tree under test as one commit, tagged with a semantic version.
// It checks what the release refuses (an untagged HEAD, a dirty tree) and what it builds: archives that
// SHA256SUMS verifies, an SPDX SBOM that names the module and its dependencies, a binary whose `version`
// prints the tag and, when the image tools are built, an image of the same version.
//
// It builds linux/amd64 only (RELEASE_PLATFORMS): the four-platform build is `make release`'s default and
// differs only in GOOS/GOARCH. The image is left out when the image tools (scripts/ensure-ociimage.sh, built by
// `make testbin`) are missing, unless $CI is set: CI never skips it.
package releasetest
