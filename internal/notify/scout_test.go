package notify

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// One message on a latch's or a read-write lock's channel costs a process
// one attempt, however many goroutines wait: it wakes one waiter, the
// scout, and the others only when the scout's attempt got through. Before,
// one PUBLISH woke all 50, and each asked Redis.
func TestOneMessageWakesOneScout(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.NewClient(t)
	ctx := context.Background()
	for _, tc := range []struct {
		mode    string
		payload string
		join    func(h *Hub) (*Waiter, error)
	}{
		{"latch", "0", func(h *Hub) (*Waiter, error) { return h.JoinAll(ctx, "latch") }},
		{"readers", "1", func(h *Hub) (*Waiter, error) { return h.JoinShared(ctx, "rw", "k") }},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h := New(rdb, Config{ClientChannel: "dlock:client:scout", Linger: time.Minute, Log: slog.New(slog.DiscardHandler)})
			defer h.Close()
			// The marker's hand-off is published after each message on the
			// same connection, so when it arrives the message was
			// dispatched: what is woken by then is all the message woke.
			marker, err := h.Join(ctx, "marker", "m")
			if err != nil {
				t.Fatal(err)
			}
			ws := make([]*Waiter, 50)
			for i := range ws {
				if ws[i], err = tc.join(h); err != nil {
					t.Fatal(err)
				}
			}
			ch := map[string]string{"latch": "latch", "readers": "rw"}[tc.mode]
			// Join waits for the client channel only: a message on the
			// lock's channel before its SUBSCRIBE is confirmed reaches
			// nobody (failed about 1 run in 30).
			for deadline := time.Now().Add(10 * time.Second); rdb.PubSubNumSub(ctx, ch).Val()[ch] == 0; {
				if time.Now().After(deadline) {
					t.Fatalf("%s never subscribed", ch)
				}
				time.Sleep(5 * time.Millisecond)
			}
			publish := func(payload string) []*Waiter {
				t.Helper()
				rdb.Publish(ctx, ch, payload)
				rdb.Publish(ctx, "dlock:client:scout", strconv.FormatUint(marker.Ticket, 10))
				waitEvent(t, marker)
				return woken(ws)
			}
			// The subscription's confirmation may have woken a latch scout.
			settle(t, h, rdb, marker, ws)

			got := publish(tc.payload)
			if len(got) != 1 {
				t.Fatalf("one message woke %d of %d waiters, want 1", len(got), len(ws))
			}
			scout := got[0]
			// A message while the scout is out wakes nobody more.
			if again := publish(tc.payload); len(again) != 0 {
				t.Fatalf("a second message woke %d more", len(again))
			}
			// False: the round ends, but that second message may have come
			// after the scout's read, so another scout tries.
			h.Tried(scout, false)
			got = woken(ws)
			if len(got) != 1 {
				t.Fatalf("after a false round with a message meanwhile, %d woken, want 1 new scout", len(got))
			}
			scout = got[0]
			h.Tried(scout, false)
			if n := len(woken(ws)); n != 0 {
				t.Fatalf("a false round woke %d", n)
			}
			// A scout that leaves before telling hands the round on.
			got = publish(tc.payload)
			if len(got) != 1 {
				t.Fatalf("a message after the rounds woke %d, want 1", len(got))
			}
			h.Leave(got[0])
			if n := len(woken(ws)); n != 1 {
				t.Fatalf("the scout left: %d woken, want 1 to take its round", n)
			}
			// True: everyone else is woken.
			for _, w := range ws {
				if w.scouting.Load() {
					h.Tried(w, true)
				}
			}
			if n := len(woken(ws)); n != len(ws)-2 {
				t.Fatalf("a true round woke %d, want %d", n, len(ws)-2)
			}
			for _, w := range ws {
				h.Leave(w)
			}
			h.Leave(marker)
		})
	}
}

// woken returns the waiters that have an event, taking it (as a waiter's
// goroutine would before its attempt).
func woken(ws []*Waiter) []*Waiter {
	var out []*Waiter
	for _, w := range ws {
		select {
		case <-w.C:
			if w.Take().Retry {
				out = append(out, w)
			}
		default:
		}
	}
	return out
}

// settle ends any round begun before the test's messages: the channel's
// first confirmation wakes a latch's waiters like a message.
func settle(t *testing.T, h *Hub, rdb *redis.Client, marker *Waiter, ws []*Waiter) {
	t.Helper()
	rdb.Publish(context.Background(), "dlock:client:scout", strconv.FormatUint(marker.Ticket, 10))
	waitEvent(t, marker)
	for _, w := range woken(ws) {
		h.Tried(w, false)
	}
}
