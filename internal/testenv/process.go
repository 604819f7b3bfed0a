package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

const (
	// startTimeout bounds how long one start attempt waits for PING.
	startTimeout = 15 * time.Second
	// stopTimeout bounds how long we wait for a SIGKILLed process to be reaped.
	stopTimeout = 10 * time.Second
	// restartBindTimeout bounds how long Restart keeps retrying a port that
	// is still (or again) in use.
	restartBindTimeout = 5 * time.Second
	// freePortAttempts is how many fresh ports a first start tries.
	freePortAttempts = 5
)

var (
	errStopped    = errors.New("testenv: server was stopped")
	errNotRunning = errors.New("testenv: server is not running")
)

// addrInUseError reports that redis-server could not bind its port.
type addrInUseError struct{ msg string }

func (e *addrInUseError) Error() string { return e.msg }

// process is one redis-server (or redis-server --sentinel) child process
// with a fixed loopback port and a private temp directory. All methods are
// safe for concurrent use; lifecycle operations are serialized by mu.
type process struct {
	binary  string
	dir     string                  // private temp dir; removed by stop
	logPath string                  // stdout+stderr of every run, appended
	argv    func(port int) []string // full argument list for a port
	prepare func() error            // run before every (re)start; may be nil
	ready   func(addr string) error // nil error once serving; nil means Redis PING
	cred    *syscall.Credential     // run as this user; nil: as ourselves
	tree    bool                    // signals also reach children outside the group

	port int    // fixed after the first successful start
	addr string // "127.0.0.1:port"

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has been reaped
	stopped bool
}

// startProcess starts binary on a free loopback port, retrying with a new
// port when the chosen one turns out to be taken. dir must already exist and
// becomes owned by the process (removed by stop, also on failure).
func startProcess(binary, dir string, argv func(port int) []string, prepare func() error) (*process, error) {
	return startProcessWith(&process{binary: binary, dir: dir, argv: argv, prepare: prepare})
}

// startProcessWith is startProcess for a server that is not redis-server:
// p.ready tells when it serves, p.cred whom it runs as. p.binary, p.dir and
// p.argv must be set; the port and log path are filled in.
func startProcessWith(p *process) (*process, error) {
	dir := p.dir
	p.logPath = dir + "/server.log"
	var lastErr error
	for attempt := 0; attempt < freePortAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		p.mu.Lock()
		err = p.launchLocked(port)
		p.mu.Unlock()
		if err == nil {
			p.port = port
			p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			return p, nil
		}
		lastErr = err
		var inUse *addrInUseError
		if !errors.As(err, &inUse) {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// freePort asks the kernel for a free loopback port. The port is released
// before redis-server binds it, so a race is possible; callers retry.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testenv: find free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("testenv: find free port: %w", err)
	}
	return port, nil
}

// launchLocked starts the binary on port and waits until it answers PING.
// On failure the child is killed and reaped. p.mu must be held.
func (p *process) launchLocked(port int) error {
	if p.prepare != nil {
		if err := p.prepare(); err != nil {
			return err
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testenv: open log: %w", err)
	}
	logStart, _ := logf.Seek(0, io.SeekEnd)

	cmd := exec.Command(p.binary, p.argv(port)...)
	cmd.Dir = p.dir
	cmd.Stdout = logf // an *os.File: no copying goroutines
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	cmd.SysProcAttr.Credential = p.cred
	err = cmd.Start()
	_ = logf.Close() // the child has its own descriptor
	if err != nil {
		return fmt.Errorf("testenv: start %s: %w", p.binary, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ready := p.ready
	if ready == nil {
		ready = pingOnce
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			p.cmd, p.exited = nil, nil
			out := p.logSince(logStart)
			msg := fmt.Sprintf("testenv: %s on port %d exited during startup: %s\n%s", p.binary, port, cmd.ProcessState, out)
			if bytes.Contains([]byte(out), []byte("Address already in use")) {
				return &addrInUseError{msg: msg}
			}
			return errors.New(msg)
		default:
		}
		if ready(addr) == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = p.killLocked()
			return fmt.Errorf("testenv: %s on port %d was not ready within %v\n%s", p.binary, port, startTimeout, p.logSince(logStart))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pingOnce sends one PING on a fresh connection and expects PONG.
func pingOnce(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	v, err := rawDo(ctx, addr, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("testenv: PING answered %v", v)
	}
	return nil
}

// logSince returns (at most the last 4 KiB of) the log written after offset.
func (p *process) logSince(offset int64) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// logTail returns the last 4 KiB of the log of all runs.
func (p *process) logTail() string { return p.logSince(0) }

// killLocked SIGKILLs the process group (if running) and waits until the
// leader is reaped. p.mu must be held.
func (p *process) killLocked() error {
	if p.cmd == nil {
		return nil
	}
	cmd, exited := p.cmd, p.exited
	p.cmd, p.exited = nil, nil
	select {
	case <-exited:
		return nil // already gone (crashed, SHUTDOWN, ...)
	default:
	}
	pid := cmd.Process.Pid
	var kids []int
	if p.tree {
		// Freeze the leader so that it forks no more, then kill the
		// children that left its group.
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		kids = descendants(pid)
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	// Negative pid: the whole group (Setpgid), which includes any child the
	// server forked (RDB for replication, ...). SIGKILL also ends a stopped
	// (paused) process.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = cmd.Process.Kill()
	}
	deadline := time.After(stopTimeout)
	select {
	case <-exited:
	case <-deadline:
		return fmt.Errorf("testenv: pid %d did not exit within %v after SIGKILL", pid, stopTimeout)
	}
	// A restart must not find a child still holding the data directory.
	for anyAlive(kids) {
		select {
		case <-deadline:
			return fmt.Errorf("testenv: children of pid %d still alive %v after SIGKILL", pid, stopTimeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// signalLocked sends sig to the running process group. p.mu must be held.
func (p *process) signalLocked(sig syscall.Signal) error {
	if p.stopped {
		return errStopped
	}
	if p.cmd == nil {
		return errNotRunning
	}
	select {
	case <-p.exited:
		return errNotRunning
	default:
	}
	pid := p.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil {
		return err
	}
	if p.tree {
		// After the leader (which a SIGSTOP keeps from forking more).
		for _, k := range descendants(pid) {
			_ = syscall.Kill(k, sig)
		}
	}
	return nil
}

func (p *process) kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errStopped
	}
	return p.killLocked()
}

func (p *process) restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return errStopped
	}
	if err := p.killLocked(); err != nil {
		return err
	}
	deadline := time.Now().Add(restartBindTimeout)
	for {
		err := p.launchLocked(p.port)
		var inUse *addrInUseError
		if err == nil || !errors.As(err, &inUse) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (p *process) stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	return errors.Join(p.killLocked(), os.RemoveAll(p.dir))
}

// pid returns the pid of the running process, or 0.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
