package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// holdAfterProxy forwards connections to target until a command naming
// mark has gone to the server; from then on a connection that sends hold
// (a key of the reading that follows the release) is held from there on:
// a Redis that answers the release and then nothing. Only the reading is
// held, not every command after the mark: the release's own script load
// (an EVAL of 17 KB, whose key names come last) is written in pieces, and
// holding the pieces without the mark held the release (CI failed so).
func holdAfterProxy(t *testing.T, target, mark, hold string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				held := false // this connection sent hold after the mark
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(buf[:n], []byte(mark)) {
							seen.Store(true)
						} else if seen.Load() && bytes.Contains(buf[:n], []byte(hold)) {
							held = true
						}
						if !held {
							if _, err := s.Write(buf[:n]); err != nil {
								return
							}
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// When --timeout ends after the release was answered (Redis stops
// answering the reading of the lock that follows it), the lock was
// released: the command must say so, not that it may or may not have
// been (an operator told that retries unlock --force, and breaks the lock
// of the waiter it was handed to).
func TestUnlockTimeoutAfterTheReleaseSaysReleased(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := context.Background()
	if _, err := srv.Do(ctx, "HSET", "t-unlock-after", "someone:1", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do(ctx, "PEXPIRE", "t-unlock-after", "60000"); err != nil {
		t.Fatal(err)
	}
	// Held from the reading's record of long holds, which Inspect reads and
	// no script's source names (force.lua's source has HGETALL in it).
	addr := holdAfterProxy(t, srv.Addr(), "dlock:forced:{t-unlock-after}", "dlock:held:{t-unlock-after}")
	r := dlockRun(t, nil, "--redis", "redis://"+addr, "unlock", "--force", "--timeout", "1s", "t-unlock-after")
	if n, err := srv.Do(ctx, "EXISTS", "t-unlock-after"); err != nil || n.(int64) != 0 {
		t.Fatalf("the lock is still there (%v, %v): the release did not run", n, err)
	}
	wantCode(t, r, exitUnavailable)
	if strings.Contains(r.stderr, "may or may not") || !strings.Contains(r.stderr, "released") {
		t.Fatalf("stderr %q: want it to say the lock was released", r.stderr)
	}
}
