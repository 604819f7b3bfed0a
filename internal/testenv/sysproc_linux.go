package testenv

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// sysProcAttr puts the server in its own process group (so a kill reaches
// any child it forks) and asks the kernel to SIGKILL it when the thread that
// started it dies. The Go runtime never retires its threads except those of
// goroutines that exit while locked with runtime.LockOSThread, which this
// package never does, so in practice the server dies with the test binary,
// even if the binary crashes, is killed, or times out.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// procStat returns the state and parent pid of pid from /proc/pid/stat.
func procStat(pid int) (state string, ppid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return "", 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return f[0], ppid, err == nil
}

// descendants returns the pids of every live descendant of pid (children
// that left its process group too, such as PostgreSQL backends, which call
// setsid).
func descendants(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := procStat(c); ok && state != "Z" {
			children[ppid] = append(children[ppid], c)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// anyAlive reports whether any of pids still runs (zombies do not).
func anyAlive(pids []int) bool {
	for _, p := range pids {
		if state, _, ok := procStat(p); ok && state != "Z" {
			return true
		}
	}
	return false
}
