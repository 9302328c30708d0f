// Package imagetest inspects the container image `make image` builds (scripts/image.sh, tools/ociimage): an OCI
// image layout with one image per platform. It reads the layout with the standard library only (OCI Image
// Layout and Image Manifest specifications), so the check does not trust the library that wrote it.
//
// The layout comes from $PATCH_AGENT_IMAGE, which `make test` sets after `make image`. Without it the test is
// skipped, or fails when $CI is set: CI must never skip it silently.
package imagetest
