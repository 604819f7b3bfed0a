//go:build !linux

package main

import (
	"os/exec"
	"syscall"
)

// prepareChild leaves CMD in dlock's process group: there is no
// parent-death signal outside Linux.
func prepareChild(*exec.Cmd) {}

// signalChild sends sig to CMD itself.
func signalChild(cmd *exec.Cmd, sig syscall.Signal) error {
	return cmd.Process.Signal(sig)
}

// groupAlive reports false: CMD has no process group of its own here.
func groupAlive(*exec.Cmd) bool { return false }
