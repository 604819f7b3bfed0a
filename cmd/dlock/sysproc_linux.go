package main

import (
	"os/exec"
	"syscall"
)

// prepareChild puts CMD in a process group of its own and asks the kernel
// to SIGKILL it when dlock dies (the parent-death signal, which fires when
// the thread that started CMD ends: startChild keeps that thread alive
// until CMD exits).
func prepareChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalChild sends sig to CMD's process group: CMD and the processes it
// started (unless they made groups of their own).
func signalChild(cmd *exec.Cmd, sig syscall.Signal) error {
	return syscall.Kill(-cmd.Process.Pid, sig)
}

// groupAlive reports whether a process of CMD's group is still there (CMD
// itself, once waited for, is not).
func groupAlive(cmd *exec.Cmd) bool {
	return syscall.Kill(-cmd.Process.Pid, 0) == nil
}
