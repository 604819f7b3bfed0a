package main

import "syscall"

// childProcAttr makes the kernel kill redis-server if the bench process
// dies without running its cleanup (e.g. SIGKILL).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
