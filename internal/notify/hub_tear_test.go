package notify

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// tearProxy forwards one Redis connection at a time. From the server, a
// message that holds mark arrives in two parts: up to the end of mark, and
// the rest only once the client has written a PING (a health interval
// later).
type tearProxy struct {
	ln     net.Listener
	target string
	mark   []byte
	armed  atomic.Bool // cut only once armed, and once
	wg     sync.WaitGroup
}

func newTearProxy(t *testing.T, target string, mark []byte) *tearProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tearProxy{ln: ln, target: target, mark: mark}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
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
			pinged := make(chan struct{})
			var once sync.Once
			p.wg.Add(2)
			go func() { // client to server
				defer p.wg.Done()
				defer s.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if bytes.Contains(bytes.ToLower(buf[:n]), []byte("ping")) {
							once.Do(func() { close(pinged) })
						}
						if _, err := s.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // server to client
				defer p.wg.Done()
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						b := buf[:n]
						if i := bytes.Index(b, p.mark); i >= 0 && p.armed.CompareAndSwap(true, false) {
							cut := i + len(p.mark)
							if _, err := c.Write(b[:cut]); err != nil {
								return
							}
							select {
							case <-pinged:
							case <-time.After(10 * time.Second):
							}
							b = b[cut:]
						}
						if _, err := c.Write(b); err != nil {
							return
						}
					}
					if err != nil {
						if err != io.EOF {
							return
						}
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

// A message that arrives in two parts across the reader's health interval
// must not be read from its middle: a reader that timed out there and
// read on (the first health check kept the connection after a silent
// interval) found the rest of a payload, which is anyone's to publish;
// this one's rest reads as an array of two integers, on which go-redis'
// PubSub.newMessage panicked (it asserts a string), killing the process.
// The reader must survive it and hear the hand-off after it.
func TestHubSurvivesAMessageCutAtTheHealthInterval(t *testing.T) {
	r, p, w := tearHub(t, "CUT")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.armed.Store(true)
	if _, err := r.Do(ctx, "PUBLISH", "lockchan", "CUT*2\r\n:1\r\n:2\r\n"); err != nil {
		t.Fatal(err)
	}
	// The reader times out mid-message, PINGs, and reads the rest.
	time.Sleep(4 * tearInterval)
	start := time.Now()
	_, heard := heardWithin(t, r, w, start, tearInterval, 25*tearInterval)
	t.Logf("hand-off heard %v after the cut message", heard)
}

// tearInterval is the health interval of tearHub's Hub.
const tearInterval = 200 * time.Millisecond

// tearHub returns a Hub whose pub/sub connection goes through a tearProxy
// that cuts at mark once armed, and a waiter joined on "lockchan".
func tearHub(t *testing.T, mark string) (*testenv.Redis, *tearProxy, *Waiter) {
	t.Helper()
	r := testenv.StartRedis(t)
	p := newTearProxy(t, r.Addr(), []byte(mark))
	rdb := redis.NewClient(&redis.Options{
		Addr:                     p.ln.Addr().String(),
		DialTimeout:              time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	h := New(rdb, Config{ClientChannel: healthClient, HealthInterval: tearInterval, CloseWait: time.Second, Log: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = h.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := h.Join(ctx, "lockchan", "k")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Leave(w) })
	return r, p, w
}

// A release message cut after its channel's name: read from its middle,
// its rest, the payload, reads as a bare string, which go-redis returns as
// a Pong, and the message was lost: no waiter learned of it until its own
// re-check. The waiter must be told (the whole message read, or a
// re-check at a new subscription).
func TestHubTellsTheWaiterOfAMessageCutIntoAPong(t *testing.T) {
	r, p, w := tearHub(t, "lockchan\r\n")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.armed.Store(true)
	if _, err := r.Do(ctx, "PUBLISH", "lockchan", "0"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.C:
		if ev := w.Take(); !ev.Retry {
			t.Fatalf("event %+v, want a re-check", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was never told of the release whose message was cut")
	}
}
