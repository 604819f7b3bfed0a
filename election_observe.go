package dlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// Observe returns a channel that receives the election's leader: its value
// when Observe starts (if there is a leader), then the value of every new
// leader as it takes office, and "" when the election is left without a
// leader by a release with no candidate waiting (Resign, Close). A leader
// that vanishes without a release (a crash) shows as the next leader's
// value, when one is elected.
//
// It is event-driven: Observe holds a pub/sub connection of its own,
// subscribed to the election's changes channel and its lock's release
// channel, and reads the leader from Redis when an announcement, a release
// or a reconnection says it may have changed; while nothing changes it sends
// no command. What it delivers is what Redis holds, never what a message
// says: a forged announcement costs one read and shows nothing. Values are
// delivered in the order of the leaders' terms (fencing tokens), never
// twice. The channel is closed when ctx is done or the Client is closed (at
// once for bad input or a closed Client). Receive from it promptly: a value
// waits for the receiver. Safe for concurrent use.
func (e *Election) Observe(ctx context.Context) <-chan string {
	out := make(chan string, 16)
	if e.check(ctx) != nil {
		close(out)
		return out
	}
	o := &observer{e: e, out: out, done: make(chan struct{})}
	var runCtx context.Context
	runCtx, o.cancel = context.WithCancel(ctx)
	if !e.c.trackOther(o) {
		o.cancel()
		close(out)
		return out
	}
	go o.run(runCtx)
	return out
}

// observer is one Observe call.
type observer struct {
	e      *Election
	out    chan string
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned

	// seq orders what was delivered: 2*token for the leader of term
	// token, 2*token+1 for a vacancy after it.
	seq     uint64
	started bool
}

func (o *observer) closeWith(ctx context.Context) error {
	o.cancel()
	select {
	case <-o.done:
	case <-ctx.Done():
	}
	return nil
}

func (o *observer) run(ctx context.Context) {
	e := o.e
	defer close(o.done)
	defer close(o.out)
	defer e.c.untrackOther(o)
	defer o.cancel()
	// One SUBSCRIBE for both channels: once it is confirmed, both are.
	ps := e.c.rdb.Subscribe(context.WithoutCancel(ctx), e.ks.Changes, e.m.channel())
	msgs := make(chan any)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		backoff := 10 * time.Millisecond
		for {
			m, err := ps.Receive(context.Background())
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, redis.ErrClosed) {
					return
				}
				// go-redis reconnects and resubscribes on the next Receive.
				select {
				case <-time.After(backoff):
				case <-ctx.Done():
					return
				}
				backoff = min(2*backoff, time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer wg.Wait()
	defer ps.Close()
	// A read that failed is tried again, with backoff, until one succeeds:
	// the message that asked for it is gone.
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	backoff := 50 * time.Millisecond
	reread := func() bool {
		ok, failed := o.refresh(ctx)
		switch {
		case failed:
			retry.Reset(backoff)
			backoff = min(2*backoff, 2*time.Second)
		default:
			retry.Stop()
			backoff = 50 * time.Millisecond
		}
		return ok
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
			if !reread() {
				return
			}
		case m := <-msgs:
			switch m := m.(type) {
			case *redis.Subscription:
				// Subscribed, or resubscribed after a reconnection that may
				// have lost messages: read the state.
				if m.Kind == "subscribe" && m.Channel == e.ks.Changes && !reread() {
					return
				}
			case *redis.Message:
				// An announcement or a release only says "read Redis
				// again": anyone may publish either, and a forged term
				// must neither show nor hide a leader. An announcement of
				// a term already delivered (or no announcement at all)
				// needs no read; messages queued behind this one are
				// answered by the same read.
				if m.Channel == e.ks.Changes && !o.newer(m.Payload) {
					continue
				}
				drain(msgs)
				if !reread() {
					return
				}
			}
		}
	}
}

// refresh reads the leader (or its absence) in one MULTI and delivers it if
// it is news. It reports ok false when ctx ended, and failed when the read
// did not succeed (to be tried again).
func (o *observer) refresh(ctx context.Context) (ok, failed bool) {
	e := o.e
	var leader *redis.StringCmd
	var exists *redis.IntCmd
	var fence *redis.StringCmd
	_, _, err := roundTrip(e.c, ctx, func(ctx context.Context) ([]redis.Cmder, error) {
		return e.c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			leader = p.HGet(ctx, e.ks.Lock, keys.LeaderField)
			exists = p.Exists(ctx, e.ks.Lock)
			fence = p.Get(ctx, e.m.ks.Fence)
			return nil
		})
	}, nil)
	if ctx.Err() != nil {
		return false, false
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		e.c.cfg.logger.Debug("dlock: reading an election's leader failed", "name", e.name, "err", err)
		return true, true
	}
	first := !o.started
	o.started = true
	if tok, v, ok := keys.ParseLeaderValue(leader.Val()); ok {
		return o.deliver(ctx, 2*tok, v), false
	}
	if exists.Val() == 1 {
		return true, false // granted, not yet announced: its announcement follows
	}
	last, _ := fence.Uint64()
	seq := 2*last + 1
	if o.seq%2 == 0 && seq <= o.seq {
		// The counter expired during the term (it lives a day from its
		// sequence's start): the vacancy still follows the leader shown.
		seq = o.seq + 1
	}
	if first {
		o.seq = max(o.seq, seq) // no leader to report yet
		return true, false
	}
	return o.deliver(ctx, seq, ""), false
}

// newer reports whether announcement claims a term after the last one
// delivered. It decides only whether to read Redis, never what to deliver.
func (o *observer) newer(announcement string) bool {
	tok, _, ok := keys.ParseLeaderMessage(announcement)
	return ok && 2*tok > o.seq
}

// deliver sends v if seq is newer than what was delivered.
func (o *observer) deliver(ctx context.Context, seq uint64, v string) bool {
	if seq <= o.seq {
		return true
	}
	o.seq = seq
	o.started = true
	select {
	case o.out <- v:
		return true
	case <-ctx.Done():
		return false
	}
}

// drain discards what msgs holds ready, without waiting.
func drain(msgs <-chan any) {
	for {
		select {
		case <-msgs:
		default:
			return
		}
	}
}
