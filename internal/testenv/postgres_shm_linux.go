//go:build linux && (amd64 || arm64)

package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// removeShm removes the System V shared memory segment (PostgreSQL's
// 56-byte interlock segment) that the server of dataDir left behind when it
// was SIGKILLed: nothing else removes it, and a restart reuses it but a
// final Stop would leak it. Only a segment that still has the key and id
// recorded in postmaster.pid, is owned by uid and has nothing attached is
// removed, so a recycled id never hits another server's segment. While
// something is still attached it retries until wait has passed.
func removeShm(dataDir string, uid int, wait time.Duration) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 7 {
		return
	}
	f := strings.Fields(lines[6]) // "shmkey shmid"
	if len(f) != 2 {
		return
	}
	key, err1 := strconv.ParseInt(f[0], 10, 64)
	id, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return
	}
	deadline := time.Now().Add(wait)
	for {
		switch shmState(key, id, uid) {
		case "unattached":
			const ipcRMID = 0
			_, _, _ = syscall.Syscall(syscall.SYS_SHMCTL, uintptr(id), ipcRMID, 0)
			return
		case "attached":
			if time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
		}
		return
	}
}

// shmState says whether the segment key/id owned by uid exists ("gone"
// if not) and whether anything is attached to it.
func shmState(key int64, id, uid int) string {
	tab, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return "gone"
	}
	for _, line := range strings.Split(string(tab), "\n")[1:] {
		// key shmid perms size cpid lpid nattch uid ...
		c := strings.Fields(line)
		if len(c) < 8 || c[0] != strconv.FormatInt(key, 10) || c[1] != strconv.Itoa(id) || c[7] != strconv.Itoa(uid) {
			continue
		}
		if c[6] == "0" {
			return "unattached"
		}
		return "attached"
	}
	return "gone"
}
