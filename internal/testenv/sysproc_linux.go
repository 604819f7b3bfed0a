package testenv

import "syscall"

// sysProcAttr puts the server in its own process group (so a kill reaches
// any child it forks) and asks the kernel to SIGKILL it when the thread that
// started it dies. The Go runtime never retires its threads except those of
// goroutines that exit while locked with runtime.LockOSThread, which this
// package never does, so in practice the server dies with the test binary,
// even if the binary crashes, is killed, or times out.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
