//go:build !linux

package testenv

import "syscall"

// childProcAttr: outside Linux there is no parent-death signal; Main stops the emulator.
func childProcAttr() *syscall.SysProcAttr { return nil }
