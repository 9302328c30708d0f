//go:build tools

// Package tools pins the kumo emulator used by integration tests; it is not part of the agent.
package tools

import _ "github.com/sivchari/kumo/cmd/kumo"
