package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the bench process has used so far, user and
// system, over all its threads (redis-server, a child, is not in it).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childProcAttr makes the kernel kill redis-server if the bench process
// dies without running its cleanup (e.g. SIGKILL).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
