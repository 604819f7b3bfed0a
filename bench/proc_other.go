//go:build !linux

package main

import (
	"syscall"
	"time"
)

func childProcAttr() *syscall.SysProcAttr { return nil }

// processCPU is not measured here: client CPU per pair stays 0.
func processCPU() time.Duration { return 0 }
