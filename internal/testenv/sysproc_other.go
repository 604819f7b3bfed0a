//go:build !linux

package testenv

import "syscall"

// sysProcAttr puts the server in its own process group so a kill reaches any
// child it forks. Without Linux's Pdeathsig a crashed test binary can leave
// servers behind on this platform; Stop (run by t.Cleanup) still kills them.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// descendants returns nil: without /proc only the process group is
// signalled.
func descendants(pid int) []int { return nil }

// anyAlive reports false: without /proc nothing is waited for.
func anyAlive(pids []int) bool { return false }
