//go:build tools

package main

// crane pushes the layout `make image` writes: crane push --index bin/image/oci REGISTRY/patch-agent:TAG.
import _ "github.com/google/go-containerregistry/cmd/crane"
