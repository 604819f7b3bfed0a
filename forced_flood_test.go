package dlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
)

// A "forced" message makes every hold of its lock in the Client ask Redis
// whether it still holds (one renewal each), and anyone allowed to PUBLISH
// can send it. A neighbour's stream of them, here for one second at the
// rate one connection can publish, at 20 read holds of one name, cost
// Redis a renewal per hold per round trip; now the rechecks of a hold are
// paced (lease.RecheckGap). A real ForceUnlock during the stream is still
// told.
func TestForgedForcedFloodIsPaced(t *testing.T) {
	const holds, flood = 20, time.Second
	r := testenvRedis(t)
	ctx := ctxT(t)
	c := newClient(t, r)
	c.e.Hub().Listen()
	<-c.e.Hub().ClientReady()
	rw := c.RWMutex("flooded")
	held := make([]context.Context, holds)
	for i := range held {
		hctx, err := rw.ReadContext(ctx, time.Second, time.Minute)
		if err != nil || hctx == nil {
			t.Fatalf("read hold %d: %v", i, err)
		}
		held[i] = hctx
	}
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	pub := rdbFor(t, r)
	channel, msg := keys.ClientChannel(c.ID()), keys.ForcedMessage(keys.For("flooded").Lock)
	sent := 0
	for end := time.Now().Add(flood); time.Now().Before(end); sent++ {
		if err := pub.Publish(ctx, channel, msg).Err(); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * lease.RecheckGap) // the last rounds run out
	stats, err := r.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The first recheck of each hold, one per RecheckGap after it, the
	// round that the last message asked for, and one round of slack.
	limit := int64(holds * (int(flood/lease.RecheckGap) + 4))
	t.Logf("%d forged messages, %d renewals of %d holds", sent, stats["evalsha"], holds)
	if stats["evalsha"] > limit {
		t.Errorf("%d forged messages in %v cost %d renewals of %d holds, want at most %d", sent, flood, stats["evalsha"], holds, limit)
	}
	if stats["evalsha"] < holds {
		t.Errorf("%d renewals of %d holds: the messages were not heard, the test proves nothing", stats["evalsha"], holds)
	}
	// A ForceUnlock in a flood is told to every hold.
	defer floodWith(pub, channel, msg)()
	if ok, err := newClient(t, r).Mutex("flooded").ForceUnlock(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for i, hctx := range held {
		select {
		case <-hctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("read hold %d not told of the ForceUnlock in a flood", i)
		}
	}
}

// The pacing's wait is not bounded by the cleanup timeout: with one
// shorter than lease.RecheckGap, a recheck that waited its turn ran on a
// spent ctx and was dropped, and a ForceUnlock in a flood was told only at
// the next renewal (about 10 s; found by review).
func TestPacedRecheckWithAShortCleanupTimeout(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	c := newClient(t, r, WithCleanupTimeout(50*time.Millisecond))
	c.e.Hub().Listen()
	<-c.e.Hub().ClientReady()
	const name = "flooded:short-cleanup"
	m := c.Mutex(name)
	mustLock(t, m)
	pub := rdbFor(t, r)
	channel, msg := keys.ClientChannel(c.ID()), keys.ForcedMessage(keys.For(name).Lock)
	defer floodWith(pub, channel, msg)()
	time.Sleep(3 * lease.RecheckGap)
	if ok, err := newClient(t, r).Mutex(name).ForceUnlock(ctx); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// A bound well under the watchdog's renewal period (10 s), which told
	// it before the fix, and far above a recheck's pace.
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a ForceUnlock in a flood was not told within 5 s")
	}
	if !errors.Is(m.Err(), ErrForced) {
		t.Fatalf("Err = %v, want ErrForced", m.Err())
	}
}

// floodWith publishes msg on channel from pub as fast as one connection
// can, until the returned function is called (it waits for the last
// message).
func floodWith(pub *redis.Client, channel, msg string) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			default:
			}
			if pub.Publish(context.Background(), channel, msg).Err() != nil {
				return
			}
		}
	}()
	return func() { close(done); <-stopped }
}
