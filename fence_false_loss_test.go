package dlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// A Cluster reshard moves a fencing counter with MIGRATE, which sends its
// TTL relative (what is left of it at the source) and has the target set it
// from its own clock when RESTORE runs: the counter's absolute expiry, from
// which why_gone reads the start of its sequence, lands a millisecond or
// more later whenever a millisecond boundary passes between the two (about
// one migration in five on one host; more across hosts, with their clocks'
// skew). The holder of the sequence's first token, whose release was
// resent after its own release had run (the lock's hash gone, the counter
// the one its token began), must be told nothing (GONE), not ErrDataLost.
// The test migrates the slot of a new sequence until the expiry has moved.
func TestReleaseResentAfterReshardIsNotADataLoss(t *testing.T) {
	cl := testenv.StartCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb := cl.NewClient(t)
	c := newClientOn(t, cl.NewClient(t))
	for i := 0; i < 60; i++ {
		name := fmt.Sprintf("{reshard-fence-%d}lock", i)
		ks := keys.For(name)
		slot := int(keys.Slot(name))
		from := cl.SlotNode(slot)
		to := cl.Nodes()[0]
		if to == from {
			to = cl.Nodes()[1]
		}
		m := c.Mutex(name)
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		before, err := rdb.PExpireTime(ctx, ks.Fence).Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.MigrateSlot(ctx, slot, from, to); err != nil {
			t.Fatal(err)
		}
		after, err := rdb.PExpireTime(ctx, ks.Fence).Result()
		if err != nil {
			t.Fatal(err)
		}
		if after == before {
			if err := m.Unlock(ctx); err != nil {
				t.Fatalf("Unlock after a reshard that kept the expiry: %v", err)
			}
			continue
		}
		t.Logf("migration %d moved the counter's expiry by %v", i, after-before)
		// Its release ran (a reply lost, say): the hash is gone, the counter
		// is the one its token began, moved.
		if err := rdb.Del(ctx, name).Err(); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatalf("a release resent after its own release, the counter resharded = %v, want nil", err)
		}
		return
	}
	t.Skip("no migration moved the counter's expiry")
}

// issue_token sets the counter with SET PX, relative to when the SET runs,
// a few µs after the TIME its first token comes from: a millisecond
// boundary may pass between the two, and the counter then expires a
// millisecond later than its first token's millisecond plus its TTL. A
// Client that took a token of that sequence and whose own release then
// ran, resent, must be told nothing. The sequence is written so: first
// token t0 at µs 997 of its millisecond, the expiry a millisecond on.
func TestReleaseResentWhenTheCounterExpiresAMillisecondLate(t *testing.T) {
	r := testenvRedis(t)
	c := newClient(t, r)
	rdb := rdbFor(t, r)
	ctx := ctxT(t)
	day := (24 * time.Hour).Milliseconds()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	t0 := now.UnixMilli()*1000 + 997
	if err := rdb.Set(ctx, "dlock:fence:{late-expiry}", t0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.PExpireAt(ctx, "dlock:fence:{late-expiry}", time.UnixMilli(t0/1000+1+day)).Err(); err != nil {
		t.Fatal(err)
	}
	m := c.Mutex("late-expiry")
	mustLock(t, m)
	if m.Token() != uint64(t0+1) {
		t.Fatalf("token %d, want %d", m.Token(), t0+1)
	}
	if err := rdb.Del(ctx, "late-expiry").Err(); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatalf("a release resent in a sequence whose counter expires a millisecond late = %v, want nil", err)
	}
}
