package kind

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/shardsub"
	"github.com/dlock-dev/dlock/internal/wire"
)

var (
	//go:embed election_announce.lua
	luaAnnounce    string
	scriptAnnounce = script(luaAnnounce)
)

// Election is an election's protocol beyond its lock (a Mutex on
// keys.ElectionSet.Lock): the leader's value announced in the lock hash,
// and Observe's reading of it.
type Election struct {
	e       *lease.Engine
	name    string
	ks      keys.ElectionSet
	fence   string // the lock's fencing counter
	channel string // the lock's release channel
}

// Init prepares p for the election name on e, whose lock is lock.
func (p *Election) Init(e *lease.Engine, name string, ks keys.ElectionSet, lock *Mutex) {
	p.e, p.name, p.ks = e, name, ks
	p.ks.Changes = modeChannel(e, ks.Changes, ks.Lock)
	p.fence = lock.Keys().Fence
	p.channel, _ = lock.Channel()
}

// Announce states value as the leader's, for the lease l of the election's
// lock; it reports false when l no longer holds the lock.
func (p *Election) Announce(ctx context.Context, l *lease.Lease, value string) (bool, error) {
	n, _, err := wire.Go(p.e.Wire, ctx, func(ctx context.Context) (int64, error) {
		return scriptAnnounce.Run(ctx, p.e.Wire, []any{p.ks.Lock}, l.FieldArg(), l.Token(), value, p.ks.Changes).Int64()
	}, nil)
	return n == 1, err
}

// Observe delivers the election's leader on a new channel until ctx is
// done or the engine closes (see dlock's Election.Observe for the contract).
func (p *Election) Observe(ctx context.Context) <-chan string {
	out := make(chan string, 16)
	o := &observer{p: p, out: out, done: make(chan struct{})}
	var runCtx context.Context
	runCtx, o.cancel = context.WithCancel(ctx)
	if !p.e.TrackCloser(o) {
		o.cancel()
		close(out)
		return out
	}
	go o.run(runCtx)
	return out
}

// observer is one Observe call.
type observer struct {
	p      *Election
	out    chan string
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned

	// seq orders what was delivered: 2*token for the leader of term
	// token, 2*token+1 for a vacancy after it.
	seq     uint64
	last    string // the value delivered last
	started bool
	// subscribed: the changes channel's subscription was confirmed. Until
	// it is (pub/sub refused by an ACL, say) the observer reads Redis every
	// re-check interval instead of waiting for messages that never come.
	subscribed bool
	retry      *time.Timer // a failed read's next try
	backoff    time.Duration
}

// CloseWith implements lease.Closer: Close stops the observer.
func (o *observer) CloseWith(ctx context.Context) error {
	o.cancel()
	select {
	case <-o.done:
	case <-ctx.Done():
	}
	return nil
}

func (o *observer) run(ctx context.Context) {
	defer close(o.done)
	defer close(o.out)
	defer o.p.e.UntrackCloser(o)
	defer o.cancel()
	msgs, stop := o.subscribe(ctx)
	defer stop()
	o.retry = time.NewTimer(time.Hour)
	o.retry.Stop()
	defer o.retry.Stop()
	o.backoff = 50 * time.Millisecond
	poll := time.NewTimer(o.p.e.Cfg.Recheck)
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.retry.C:
			if !o.reread(ctx) {
				return
			}
		case <-poll.C:
			if o.subscribed {
				continue
			}
			if !o.reread(ctx) {
				return
			}
			poll.Reset(o.p.e.Cfg.Recheck)
		case m := <-msgs:
			if !o.handle(ctx, m, msgs) {
				return
			}
		}
	}
}

// subscribe subscribes the election's changes and its lock's release
// channel and returns their messages (as go-redis types) and the function
// that ends the subscription.
func (o *observer) subscribe(ctx context.Context) (<-chan any, func()) {
	if cc := o.p.e.Cfg.Sharded; cc != nil {
		return o.subscribeSharded(cc)
	}
	// Subscribe without channels makes no connection: the SUBSCRIBE (one
	// for both channels: once it is confirmed, both are) is sent by the
	// receiving goroutine, since go-redis makes a connection deaf to ctx (a
	// Redis that accepts and never answers holds it for its timeouts).
	ps := o.p.e.Redis().Subscribe(context.WithoutCancel(ctx))
	msgs := make(chan any)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if err := ps.Subscribe(context.WithoutCancel(ctx), o.p.ks.Changes, o.p.channel); err != nil {
			// go-redis keeps the channels and subscribes them again on the
			// next Receive's connection.
			o.p.e.Cfg.Logger.Debug("dlock: observing an election failed", "name", o.p.name, "err", err)
		}
		receive(ctx, ps, msgs)
	}()
	return msgs, func() {
		// Closing waits for a connection being made, deaf to ctx: done in
		// the background, counted for Close, so the observer ends at once.
		o.p.e.Detach(func(context.Context) {
			_ = ps.Close()
			<-ended
		})
	}
}

// subscribeSharded is subscribe with sharded pub/sub: a subscriber that
// follows the channels' slot. A message that finds the buffer full is
// dropped: the observer re-reads Redis on the next one.
func (o *observer) subscribeSharded(cc *redis.ClusterClient) (<-chan any, func()) {
	msgs := make(chan any, 64)
	put := func(m any) {
		select {
		case msgs <- m:
		default:
		}
	}
	sub := shardsub.New(cc, shardsub.Config{Log: o.p.e.Cfg.Logger, Handler: func(ev shardsub.Event) {
		switch ev.Kind {
		case shardsub.Message:
			put(&redis.Message{Channel: ev.Channel, Payload: ev.Payload})
		case shardsub.Subscribed, shardsub.Resubscribed:
			put(&redis.Subscription{Kind: "subscribe", Channel: ev.Channel})
		}
	}})
	if err := sub.Subscribe(o.p.ks.Changes, o.p.channel); err != nil {
		o.p.e.Cfg.Logger.Debug("dlock: observing an election failed", "name", o.p.name, "err", err)
	}
	// Closing waits for the subscriber's Redis calls in progress, which end
	// only within the Cluster client's timeouts: done in the background,
	// counted for Close, as subscribe's.
	return msgs, func() { o.p.e.Detach(func(context.Context) { _ = sub.Close() }) }
}

// receive passes ps's messages to msgs until ctx is done or ps is closed.
func receive(ctx context.Context, ps *redis.PubSub, msgs chan<- any) {
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
}

// handle answers one message of the subscription; false when ctx ended.
func (o *observer) handle(ctx context.Context, m any, msgs <-chan any) bool {
	switch m := m.(type) {
	case *redis.Subscription:
		// Subscribed, or resubscribed after a reconnection that may have
		// lost messages: read the state.
		if m.Kind == "subscribe" && m.Channel == o.p.ks.Changes {
			o.subscribed = true
			return o.reread(ctx)
		}
	case *redis.Message:
		// An announcement or a release only says "read Redis again":
		// anyone may publish either, and a forged term must neither show
		// nor hide a leader. An announcement of a term already delivered
		// (or no announcement at all) needs no read; messages queued
		// behind this one are answered by the same read.
		if m.Channel == o.p.ks.Changes && !o.newer(m.Payload) {
			return true
		}
		drain(msgs)
		return o.reread(ctx)
	}
	return true
}

// reread reads the leader; a read that failed is tried again, with
// backoff, until one succeeds: the message that asked for it is gone. It
// reports false when ctx ended.
func (o *observer) reread(ctx context.Context) bool {
	ok, failed := o.refresh(ctx)
	if failed {
		o.retry.Reset(o.backoff)
		o.backoff = min(2*o.backoff, 2*time.Second)
	} else {
		o.retry.Stop()
		o.backoff = 50 * time.Millisecond
	}
	return ok
}

// refresh reads the leader (or its absence) in one MULTI and delivers it if
// it is news. It reports ok false when ctx ended, and failed when the read
// did not succeed (to be tried again).
func (o *observer) refresh(ctx context.Context) (ok, failed bool) {
	p := o.p
	var leader *redis.StringCmd
	var exists *redis.IntCmd
	var fence *redis.StringCmd
	_, _, err := wire.Go(p.e.Wire, ctx, func(ctx context.Context) ([]redis.Cmder, error) {
		return p.e.Redis().TxPipelined(ctx, func(tx redis.Pipeliner) error {
			leader = tx.HGet(ctx, p.ks.Lock, keys.LeaderField)
			exists = tx.Exists(ctx, p.ks.Lock)
			fence = tx.Get(ctx, p.fence)
			return nil
		})
	}, nil)
	if ctx.Err() != nil {
		return false, false
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		p.e.Cfg.Logger.Debug("dlock: reading an election's leader failed", "name", p.name, "err", err)
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
// delivered, or another value for that term (a Proclaim). It decides only
// whether to read Redis, never what to deliver.
func (o *observer) newer(announcement string) bool {
	tok, v, ok := keys.ParseLeaderMessage(announcement)
	return ok && (2*tok > o.seq || 2*tok == o.seq && v != o.last)
}

// deliver sends v if seq is newer than what was delivered, or v is a new
// value of the term delivered last (a Proclaim).
func (o *observer) deliver(ctx context.Context, seq uint64, v string) bool {
	if seq < o.seq || seq == o.seq && (v == o.last || !o.started) {
		return true
	}
	o.seq, o.last = seq, v
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
