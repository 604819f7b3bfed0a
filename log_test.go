package dlock

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/testenv"
)

// WithLogger gets renewal trouble, lost holds and pub/sub reconnects, and
// never a fencing token.
func TestLogging(t *testing.T) {
	r := testenvRedis(t)
	var buf testenv.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c := newClient(t, r, WithLogger(log), WithWatchdogTimeout(600*time.Millisecond))
	other := newClient(t, r)
	ctx := ctxT(t)

	// A reconnect: a waiter's pub/sub connection is killed.
	blocker := other.Mutex("log:wait")
	mustLock(t, blocker)
	w := c.Mutex("log:wait")
	got := make(chan error, 1)
	go func() { got <- w.Lock(ctx) }()
	waitFor(t, "waiter queued", func() bool { n, _ := rdbFor(t, r).LLen(ctx, w.p.Keys().Queue).Result(); return n == 1 })
	if _, err := r.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reconnect logged", func() bool { return strings.Contains(buf.String(), "pub/sub connection restored") })
	mustUnlock(t, blocker)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	tokens := []uint64{w.Token()}
	mustUnlock(t, w)

	// Renewal trouble and a lost hold: Redis paused past the TTL.
	m := c.Mutex("log:lost")
	mustLock(t, m)
	tokens = append(tokens, m.Token())
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	<-m.Done()
	// The failed renewal call itself may return only after go-redis gives
	// up on the paused server, later than the loss.
	waitFor(t, "renewal trouble logged", func() bool { return strings.Contains(buf.String(), "renewal failed") })
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"pub/sub connection lost", "renewal failed", "lock lost", "name=log:lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	for _, tok := range tokens {
		if strings.Contains(out, strconv.FormatUint(tok, 10)) {
			t.Errorf("a fencing token (%d) was logged:\n%s", tok, out)
		}
	}
	_ = m.Unlock(context.Background())
}
