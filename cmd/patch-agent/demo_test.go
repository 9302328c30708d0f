//go:build !nodemo

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The demo's suggested commands name the program the way the user can run it again: from `go run`'s temporary
// binary, `go run ./cmd/patch-agent`; from an installed binary, patch-agent.
func TestDemoSuggestsCommandsTheUserCanRunAgain(t *testing.T) {
	require.Equal(t, "go run ./cmd/patch-agent", selfCommand("/tmp/go-build1234567/b001/exe/patch-agent"))
	require.Equal(t, "patch-agent", selfCommand("/usr/local/bin/patch-agent"))
	require.Equal(t, "patch-agent", selfCommand("patch-agent"))
}
