package testenv

import "syscall"

// childProcAttr makes an emulator started by a test binary die with it (SIGKILL when the parent exits).
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
