//go:build !(linux && (amd64 || arm64))

package testenv

import "time"

// removeShm does nothing here: a SIGKILLed PostgreSQL's System V interlock
// segment (56 bytes) stays until reboot or ipcrm.
func removeShm(dataDir string, uid int, wait time.Duration) {}
