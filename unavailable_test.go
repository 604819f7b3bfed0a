package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// ErrUnavailable as documented: an acquisition that gets no answer from
// Redis (nothing listens; a server that hangs from before the Client's
// first contact) returns an error wrapping ErrUnavailable within its wait
// (+1 s for the scheduler), never a bare dial or i/o error.
func TestFaultUnavailableIsTyped(t *testing.T) {
	refused := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		return addr
	}
	hung := func(t *testing.T) string {
		r := testenv.StartRedis(t)
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Resume() })
		return r.Addr()
	}
	const wait = 8 * time.Second
	calls := map[string]func(ctx context.Context, c *Client) error{
		"TryLock": func(ctx context.Context, c *Client) error {
			ok, err := c.Mutex("u-try").TryLock(ctx, wait, 0)
			if ok {
				return errors.New("granted")
			}
			return err
		},
		"Lock": func(ctx context.Context, c *Client) error {
			ctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			return c.Mutex("u-lock").Lock(ctx)
		},
		"WithLock": func(ctx context.Context, c *Client) error {
			return c.WithLock(ctx, "u-with", func(context.Context) error { return errors.New("fn ran") }, WaitTime(wait))
		},
		"RLock": func(ctx context.Context, c *Client) error {
			ok, err := c.RWMutex("u-rw").TryRLock(ctx, wait, 0)
			if ok {
				return errors.New("granted")
			}
			return err
		},
		"Semaphore": func(ctx context.Context, c *Client) error {
			p, err := c.Semaphore("u-sem", 2).Acquire(ctx, wait, 0)
			if p != nil {
				return errors.New("granted")
			}
			return err
		},
	}
	var mu sync.Mutex
	var longest time.Duration
	for name, server := range map[string]func(*testing.T) string{"refused": refused, "hung": hung} {
		t.Run(name, func(t *testing.T) {
			addr := server(t)
			rdb := redis.NewClient(withoutNotices(&redis.Options{Addr: addr}))
			t.Cleanup(func() { _ = rdb.Close() })
			c := newClientOn(t, rdb, WithCloseTimeout(time.Second))
			var wg sync.WaitGroup
			for call, run := range calls {
				wg.Add(1)
				go func() {
					defer wg.Done()
					start := time.Now()
					err := run(context.Background(), c)
					took := time.Since(start)
					mu.Lock()
					longest = max(longest, took)
					mu.Unlock()
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("%s: %v, want ErrUnavailable", call, err)
					}
					if took > wait+time.Second {
						t.Errorf("%s returned after %v, past its wait of %v", call, took, wait)
					}
				}()
			}
			wg.Wait()
		})
	}
	recordReliability(t, reliabilityRow{
		Scenario: "Redis unreachable",
		Faults:   fmt.Sprintf("nothing listening at the address; a redis-server paused (SIGSTOP) before the Client's first contact; TryLock, Lock, WithLock, TryRLock and Acquire, each with a wait of %v", wait),
		Signal:   -1,
		Notes: fmt.Sprintf("every call returned ErrUnavailable; longest call %v, overrun past its wait %v (cf1ff77: raw dial and i/o errors)",
			longest.Round(time.Millisecond), max(longest-wait, 0).Round(time.Millisecond)),
	})
}
