// Package notify is the waiting half of dlock: one Redis pub/sub connection per
// Client, shared by every goroutine that waits for a lock.
//
// Two kinds of channel are subscribed. Each Client has its own channel, on
// which a releasing script that handed the lock straight to one registered
// waiter tells it so ("<ticket> ..."). Each lock name has Redisson's release
// channel, on which "0" means the lock became free (wake one local waiter to
// retry) and "1" means read holds ended (wake all).
//
// Every message is a wake-up and nothing more: the woken waiter's next
// attempt in Redis tells whether it holds. Anyone who may PUBLISH on the
// same Redis can send any message on these channels; the worst a message can
// do is cost one waiter one attempt. A message that may let many waiters
// through at once ("1" to readers, any message to a latch's waiters) wakes
// one of them first, and the rest only when its attempt got through
// (scout.go): one message costs a process one attempt per kind of waiter,
// not one per goroutine. Lock channels are reference counted and stay
// subscribed for a short linger after their last waiter leaves, so that a
// process that waits on the same hot lock again and again does not pay a
// SUBSCRIBE and an UNSUBSCRIBE each time.
//
// No goroutine is started per waiter: one reader goroutine per Hub dispatches
// messages to waiters, and each waiter blocks in its own caller's goroutine.
package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/shardsub"
)

// closedCh is a closed channel.
var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// healthInterval is Config.HealthInterval's default. A connection that
// vanished without a FIN or an RST (a partition, a frozen host, a
// middlebox that drops it) is found dead and replaced (read) at most two
// intervals, 10s, after it went silent, where the kernel's keepalive
// would take minutes; every message meanwhile is lost. Not shorter: an
// idle connection costs a PING per interval, and a Redis in a slow script
// or command answers nothing until it ends or, after busy-reply-threshold
// (lua-time-limit, 5s by default), answers BUSY, which counts as alive: a
// shorter interval would take such a server for a dead connection and
// make every waiter re-check at the reconnect. The sharded subscriber
// pings at the same interval (shardsub.Config).
const healthInterval = 5 * time.Second

// ErrClosed is returned by Join after Close.
var ErrClosed = errors.New("notify: hub closed")

// Hub multiplexes one pub/sub connection among waiters. Its methods are safe
// for concurrent use.
type Hub struct {
	rdb           redis.UniversalClient
	sharded       *redis.ClusterClient // sharded pub/sub (sharded.go); nil: classic
	clientID      string
	space         keys.Space
	shard         *shardsub.Subscriber // the sharded subscriptions, once started
	log           *slog.Logger
	clientChannel string
	linger        time.Duration
	forced        func(lockKey string)
	heard         func()

	listening atomic.Bool // ps is open: Listen's fast path

	mu          sync.Mutex
	ps          *redis.PubSub // nil until the first Join or Listen
	chans       map[string]*channel
	nchans      atomic.Int32 // len(chans), read without the lock (Quiet)
	tickets     map[uint64]*Waiter
	nextTicket  uint64
	clientReady chan struct{} // closed once the client channel is confirmed
	clientOK    bool
	closed      bool
	closing     chan struct{} // closed with closed: ends a join waiting for confirmation
	readerDone  chan struct{}
	// Subscription changes, applied in order by the subscriber goroutine:
	// a caller never blocks on Redis to register as a waiter.
	ops          []subOp
	opsSignal    chan struct{}
	subDone      chan struct{}
	readyTimeout time.Duration
	closeWait    time.Duration
	health       time.Duration // the reader's health check interval (read)
}

// subOp is one SUBSCRIBE or UNSUBSCRIBE to send.
type subOp struct {
	unsubscribe bool
	channels    []string
}

type channel struct {
	refs      int
	confirmed bool
	waiters   []*Waiter
	// rounds are the scouting rounds of the waiters that one message may
	// all let through (readers, latch waiters), one per such mode
	// (scout.go).
	rounds [2]round
	linger *time.Timer
	// ready is closed at the first confirmation of a slot's client channel
	// (sharded mode), which Join waits for.
	ready chan struct{}
}

// Config is what a Hub is built with.
type Config struct {
	// ClientChannel is where releasing scripts hand locks to this Hub's
	// waiters.
	ClientChannel string
	// Linger keeps a lock channel subscribed that long after its last
	// waiter left.
	Linger time.Duration
	// ReadyTimeout bounds how long Join waits for the client channel's
	// confirmation (then the waiter relies on re-checks); 0 waits as long as
	// the caller's ctx allows.
	ReadyTimeout time.Duration
	// CloseWait bounds how long Close waits for the connection to close
	// (default 5s).
	CloseWait time.Duration
	// Forced, when set, is called on the reader goroutine with the lock key
	// of a message on the client channel saying that a lock of this client
	// was forced away (keys.ForcedMessage). It must not block, and it must
	// treat the message as a hint to check Redis: anyone may send it.
	Forced func(lockKey string)
	// Heard, when set, is called on the reader goroutine each time the
	// client channel is confirmed, the first time and after a reconnect:
	// a "forced" message sent before was not heard. It must not block.
	Heard func()
	Log   *slog.Logger // required
	// Sharded, when set, makes the Hub subscribe with SSUBSCRIBE through
	// this Cluster client (sharded.go): a lock's channel in its own shard,
	// and this client's channel once per slot it waits in
	// (keys.ShardClientChannel of ClientID).
	Sharded  *redis.ClusterClient
	ClientID string
	Space    keys.Space // the namespace of the per-slot client channels
	// HealthInterval is how long the classic pub/sub connection may be
	// silent before it is sent a PING, and how long after that it may stay
	// silent before it is taken for dead (default healthInterval). Only
	// tests set it; sharded pub/sub has its own (shardsub.Config).
	HealthInterval time.Duration
}

// New returns a Hub. It opens no connection until the first Join.
func New(rdb redis.UniversalClient, cfg Config) *Hub {
	if cfg.CloseWait <= 0 {
		cfg.CloseWait = 5 * time.Second
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = healthInterval
	}
	return &Hub{
		rdb:           rdb,
		sharded:       cfg.Sharded,
		clientID:      cfg.ClientID,
		space:         cfg.Space,
		log:           cfg.Log,
		clientChannel: cfg.ClientChannel,
		linger:        cfg.Linger,
		forced:        cfg.Forced,
		heard:         cfg.Heard,
		readyTimeout:  cfg.ReadyTimeout,
		closeWait:     cfg.CloseWait,
		health:        cfg.HealthInterval,
		chans:         make(map[string]*channel),
		tickets:       make(map[uint64]*Waiter),
		clientReady:   make(chan struct{}),
		closing:       make(chan struct{}),
		opsSignal:     make(chan struct{}, 1),
		// A random start: a stale queue entry left by an earlier process
		// with the same client id must not match a ticket of this one.
		nextTicket: rand.Uint64(),
	}
}

// Join registers a waiter on lockChannel, the release channel of the lock
// at lockKey, subscribing it (and, the first time, the client channel: in
// sharded mode, the client channel of lockKey's slot) when needed. It
// returns once the client channel is confirmed, or with ctx's error. The
// caller must call Leave exactly once.
func (h *Hub) Join(ctx context.Context, lockChannel, lockKey string) (*Waiter, error) {
	return h.join(ctx, lockChannel, lockKey, exclusive)
}

// JoinShared is Join for a waiter that can share the lock with others of its
// kind (a reader): a "0" on the channel wakes one exclusive waiter when there
// is one, and every shared waiter only when there is none.
func (h *Hub) JoinShared(ctx context.Context, lockChannel, lockKey string) (*Waiter, error) {
	return h.join(ctx, lockChannel, lockKey, shared)
}

// JoinAll is Join for a waiter that every message on channel wakes, whatever
// it says (a latch's waiter: a count that reached zero concerns them all).
// It is also woken when channel's subscription is confirmed, the first one
// included: a waiter that read Redis after JoinAll returned and before that
// confirmation may have missed a message, and reads again. Nothing is
// handed to it: in sharded mode it waits for no client channel.
func (h *Hub) JoinAll(ctx context.Context, channel string) (*Waiter, error) {
	return h.join(ctx, channel, "", every)
}

// Listen subscribes the client channel, in the background, if nothing has
// yet: a holder listens there for the news that its lock was forced away
// (Config.Forced). It never blocks on Redis.
func (h *Hub) Listen() {
	if h.listening.Load() || h.sharded != nil {
		// Sharded: a client channel lives in one slot, and a holder learns
		// of a ForceUnlock at its next renewal instead.
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.ps != nil {
		return
	}
	h.queueOp(subOp{channels: h.start()})
}

// start opens the pub/sub connection and its goroutines if not yet open,
// and returns the client channel when it still needs subscribing. The
// caller holds h.mu.
func (h *Hub) start() []string {
	if h.sharded != nil {
		h.startSharded()
		return nil
	}
	if h.ps != nil {
		return nil
	}
	h.listening.Store(true)
	h.ps = h.rdb.Subscribe(context.Background())
	h.readerDone = make(chan struct{})
	h.subDone = make(chan struct{})
	go h.read(h.ps, h.readerDone)
	go h.subscriber(h.ps, h.subDone)
	return []string{h.clientChannel}
}

func (h *Hub) join(ctx context.Context, lockChannel, lockKey string, m mode) (*Waiter, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	subscribe := h.start()
	ch, subscribe := h.ref(lockChannel, subscribe)
	ready := h.clientReady
	var clientCh string
	if h.sharded != nil && lockKey == "" {
		ready = closedCh // nothing is handed to it; it hears its channel
	} else if h.sharded != nil {
		clientCh = h.space.ShardClientChannel(h.clientID, lockKey)
		var cc *channel
		cc, subscribe = h.ref(clientCh, subscribe)
		if cc.ready == nil {
			cc.ready = make(chan struct{})
		}
		ready = cc.ready
	}
	h.nextTicket++
	if h.nextTicket == 0 {
		h.nextTicket = 1 // 0 is the ticket of waiters that poll
	}
	w := &Waiter{Ticket: h.nextTicket, channel: lockChannel, clientCh: clientCh, mode: m, C: make(chan struct{}, 1)}
	ch.waiters = append(ch.waiters, w)
	h.tickets[w.Ticket] = w
	if len(subscribe) > 0 {
		// Queued under h.mu so that SUBSCRIBE and UNSUBSCRIBE for one
		// channel reach Redis in the order the reference count changed.
		h.queueOp(subOp{channels: subscribe})
	}
	h.mu.Unlock()
	var giveUp <-chan time.Time
	if h.readyTimeout > 0 {
		t := time.NewTimer(h.readyTimeout)
		defer t.Stop()
		giveUp = t.C
	}
	select {
	case <-ready:
		return w, nil
	case <-giveUp:
		// Pub/sub is not confirmed (refused by an ACL, a proxy without
		// pub/sub, a dead connection): the waiter goes on, relying on its
		// periodic re-checks instead of messages.
		h.log.Warn("dlock: pub/sub subscription not confirmed; waiting by re-checks", "after", h.readyTimeout)
		return w, nil
	case <-h.closing:
		// Closed before the confirmation came: it never will.
		h.Leave(w)
		return nil, ErrClosed
	case <-ctx.Done():
		h.Leave(w)
		return nil, context.Cause(ctx)
	}
}

// ref counts one more user of the channel name, making its entry (and
// adding name to subscribe) when it is new. The caller holds h.mu.
func (h *Hub) ref(name string, subscribe []string) (*channel, []string) {
	ch := h.chans[name]
	if ch == nil {
		ch = &channel{}
		h.chans[name] = ch
		h.nchans.Add(1)
		subscribe = append(subscribe, name)
	}
	if ch.linger != nil {
		ch.linger.Stop()
		ch.linger = nil
	}
	ch.refs++
	return ch, subscribe
}

// Leave unregisters w. When w was the channel's last waiter, the channel is
// unsubscribed after the linger period unless a new waiter arrives first.
func (h *Hub) Leave(w *Waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.left {
		return
	}
	w.left = true
	delete(h.tickets, w.Ticket)
	if ch := h.chans[w.channel]; ch != nil {
		for i, x := range ch.waiters {
			if x == w {
				ch.waiters = append(ch.waiters[:i], ch.waiters[i+1:]...)
				break
			}
		}
		ch.scoutLeft(w)
	}
	h.unref(w.channel)
	if w.clientCh != "" {
		h.unref(w.clientCh)
	}
}

// unref counts one user of the channel name less; without users it is
// unsubscribed after the linger period unless a new user arrives first.
// The caller holds h.mu.
func (h *Hub) unref(name string) {
	ch := h.chans[name]
	if ch == nil {
		return
	}
	ch.refs--
	if ch.refs > 0 || h.closed {
		return
	}
	ch.linger = time.AfterFunc(h.linger, func() { h.expire(name, ch) })
}

func (h *Hub) expire(name string, ch *channel) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.chans[name] != ch || ch.refs > 0 {
		return
	}
	delete(h.chans, name)
	h.nchans.Add(-1)
	h.queueOp(subOp{unsubscribe: true, channels: []string{name}})
}

// queueOp hands a subscription change to the subscriber goroutine (to the
// sharded subscriber, which never blocks, in sharded mode). The caller
// holds h.mu.
func (h *Hub) queueOp(op subOp) {
	if h.shard != nil {
		h.shardOp(op)
		return
	}
	h.ops = append(h.ops, op)
	select {
	case h.opsSignal <- struct{}{}:
	default:
	}
}

// subscriber sends the queued subscription changes, in order, until Close.
// Only it may block on a Redis that does not answer.
func (h *Hub) subscriber(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	for range h.opsSignal {
		h.mu.Lock()
		ops, closed := h.ops, h.closed
		h.ops = nil
		h.mu.Unlock()
		if closed {
			return
		}
		for _, op := range ops {
			var err error
			if op.unsubscribe {
				err = ps.Unsubscribe(context.Background(), op.channels...)
			} else {
				err = ps.Subscribe(context.Background(), op.channels...)
			}
			if err != nil {
				// The reader reconnects and resubscribes every channel the
				// PubSub knows of; waiters meanwhile rely on re-checks.
				h.log.Debug("dlock: (un)subscribe failed", "channels", op.channels, "err", err)
			}
		}
	}
}

// Subscribed returns the lock channels currently subscribed or lingering.
func (h *Hub) Subscribed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.chans))
	for name := range h.chans {
		out = append(out, name)
	}
	return out
}

// ClientReady returns a channel closed once the client channel was
// confirmed for the first time and the Heard callback for it returned.
func (h *Hub) ClientReady() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clientReady
}

// Quiet reports, without taking the hub's lock, that no channel is
// subscribed or lingering: then Listening is false for every lock, and a
// caller need not even make the channel's name.
func (h *Hub) Quiet() bool { return h.nchans.Load() == 0 }

// Listening reports whether the client channel is confirmed and
// lockChannel subscribed or lingering: a waiter that joins now costs no
// SUBSCRIBE and is sure to hear its hand-off.
func (h *Hub) Listening(lockChannel, lockKey string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sharded != nil {
		cc := h.chans[h.space.ShardClientChannel(h.clientID, lockKey)]
		return cc != nil && cc.confirmed && h.chans[lockChannel] != nil
	}
	return h.clientOK && h.chans[lockChannel] != nil
}

// Close wakes every waiter with Closed set, drops all subscriptions by closing
// the connection, and waits for the reader goroutine to exit, at most
// Config.CloseWait. It is idempotent.
func (h *Hub) Close() error { return h.CloseWithin(h.closeWait) }

// CloseWithin is Close waiting at most d (none when d <= 0) for the
// connection to close: the rest goes on in the background, within go-redis'
// timeouts. The Client's Close gives it what is left of its own budget.
func (h *Hub) CloseWithin(d time.Duration) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	close(h.closing)
	for _, ch := range h.chans {
		if ch.linger != nil {
			ch.linger.Stop()
		}
	}
	for _, w := range h.tickets {
		w.close()
	}
	ps, done, subDone, shard := h.ps, h.readerDone, h.subDone, h.shard
	h.mu.Unlock()
	// PubSub.Close waits for a subscription call in progress, and the
	// sharded subscriber's for its Redis calls, which may be stuck on a
	// server that does not answer; they end within go-redis' timeouts,
	// and CloseWithin does not wait longer than d for them.
	closed := make(chan error, 1)
	switch {
	case shard != nil:
		go func() { closed <- shard.Close() }()
	case ps == nil:
		return nil
	default:
		close(h.opsSignal)
		go func() {
			err := ps.Close()
			<-done
			<-subDone
			closed <- err
		}()
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case err := <-closed:
		return err
	case <-t.C:
		// It goes on closing in the background, within go-redis' timeouts.
		h.log.Warn("dlock: the pub/sub connection is still closing", "after", d)
		return nil
	}
}

// read dispatches messages until the PubSub is closed. After a connection
// error go-redis reconnects and resubscribes on the next Receive; when the
// new subscriptions are confirmed, the waiters re-check the lock, since a
// release may have been published while the connection was down.
//
// A connection whose peer vanished without a FIN or an RST fails no read:
// it is silent. So the reader checks its health: after an interval with
// nothing read it sends a PING, and when nothing at all (no message, no
// pong, no subscription reply) comes within the next interval either, it
// takes the connection for dead and go-redis replaces it, as after any
// connection error; its subscriptions are confirmed again and the waiters
// re-check, as after any reconnect. Until then every message was lost, and
// without the check the reader would wait on the silent connection until
// the kernel's keepalive gave up on it, minutes later. (go-redis'
// PubSub.Channel has a health check, but it redials only when the PING
// cannot be written, and the kernel takes a write to a silent peer.)
func (h *Hub) read(ps *redis.PubSub, done chan struct{}) {
	defer close(done)
	backoff := 10 * time.Millisecond
	broken := false
	for {
		msg, err := h.receive(ps)
		if err != nil {
			h.mu.Lock()
			closed := h.closed
			h.mu.Unlock()
			if closed || errors.Is(err, redis.ErrClosed) {
				return
			}
			var reply redis.Error
			if errors.As(err, &reply) {
				// An error reply (BUSY to the PING from a server in a
				// slow script, an ACL's refusal of a SUBSCRIBE): the
				// connection is alive, and go-redis keeps it. Not a loss,
				// nor a Warn once per interval while a script runs.
				h.log.Debug("dlock: pub/sub error reply", "err", err)
				continue
			}
			if isTimeout(err) {
				err = fmt.Errorf("nothing read for %v, a PING included: %w", 2*h.health, err)
			}
			if !broken {
				h.log.Warn("dlock: pub/sub connection lost; resubscribing", "err", err)
			}
			broken = true
			time.Sleep(backoff)
			backoff = min(backoff*2, time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				h.confirmed(m.Channel, broken)
				if m.Channel == h.clientChannel {
					broken = false
				}
			}
		case *redis.Message:
			h.dispatch(m.Channel, m.Payload)
		case *redis.Pong:
			// The answer to the health check's PING: the connection is
			// alive, and that was all it had to say.
		}
	}
}

// receive reads what comes next on ps, checking the connection's health
// meanwhile: when nothing has come for an interval it sends a PING, and
// when nothing, the PING's answer included, has come for two, the read
// times out. The deadline is the ctx's, with no timeout of ReceiveTimeout's
// own, so that go-redis (v9.22.0's PubSub.releaseConn) takes the timeout
// for a bad connection: it closes it, and on the next read dials a new one
// and subscribes again every channel the PubSub knows of. A read never
// goes on from the middle of a reply that a timeout cut (a connection
// whose read timed out is dropped, never read again), and the PubSub is
// kept, whose subscriptions the subscriber goroutine changes concurrently
// (closing it and subscribing anew on another would race with them).
// TestHubHealthCheck fails if a go-redis upgrade changes this.
func (h *Hub) receive(ps *redis.PubSub) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*h.health)
	defer cancel()
	// The PING goes out beside the read: go-redis serializes it with the
	// subscriber's commands, and its answer is this read's. Bounded by
	// the read's ctx, so it ends with it.
	ping := time.AfterFunc(h.health, func() { _ = ps.Ping(ctx) })
	defer ping.Stop()
	return ps.ReceiveTimeout(ctx, 0)
}

// isTimeout reports whether err is a read's timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func (h *Hub) confirmed(name string, again bool) {
	if name == h.clientChannel && h.heard != nil {
		h.heard()
	}
	h.mu.Lock()
	restored := false
	if name == h.clientChannel {
		if !h.clientOK {
			h.clientOK = true
			close(h.clientReady)
		}
		if again {
			// A hand-off may have been lost while the connection was down:
			// every waiter re-checks.
			for _, w := range h.tickets {
				w.wake()
			}
			restored = true
		}
	} else if ch := h.chans[name]; ch != nil {
		// Resubscribed: every waiter re-checks. Subscribed for the first
		// time: those that hear every message do.
		if ch.confirmed || again {
			h.wakeChannel(name, ch)
		} else {
			// One of them reads for all (scout.go): they all read the
			// same key.
			ch.broadcast(every)
		}
		ch.confirmed = true
		if ch.ready != nil {
			select {
			case <-ch.ready:
			default:
				close(ch.ready)
			}
		}
	}
	h.mu.Unlock()
	if restored {
		h.log.Info("dlock: pub/sub connection restored")
	}
}

func (h *Hub) dispatch(name, payload string) {
	client := name == h.clientChannel || h.sharded != nil && h.space.IsClientChannel(name, h.clientID)
	if client && h.forced != nil {
		if key, ok := keys.ParseForcedMessage(payload); ok {
			// Forced away, or so it claims: the holders of key ask Redis.
			h.forced(key)
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if client {
		// A hand-off to one of our tickets, or so it claims: the waiter
		// confirms it in Redis with its next attempt. A forged message
		// costs that waiter one attempt, and grants nothing.
		if ticket, ok := keys.HandoffTicket(payload); ok {
			if w := h.tickets[ticket]; w != nil {
				if Tracing {
					Trace(h.clientID, HopHub)
				}
				w.wakeFor(true)
			}
		}
		return
	}
	if ch := h.chans[name]; ch != nil {
		ch.dispatch(payload)
	}
}

// dispatch wakes ch's waiters for a message: those that hear all messages
// (JoinAll), and the others as the payload says. Where a message may let
// several waiters through, it wakes one of them, the scout, and the others
// only once the scout's attempt shows the message was true (scout.go): a
// message costs a process one attempt per mode of waiter, not one per
// waiter, whoever sent it. The caller holds the Hub's mu.
func (ch *channel) dispatch(payload string) {
	ch.broadcast(every)
	switch payload {
	case "0": // one holder released: one local waiter may proceed
		if ch.wakeOne(exclusive) {
			return
		}
		// Only waiters that share: they may all proceed together.
		ch.broadcast(shared)
	case "1":
		// Read holds released, or a writer's lock: on a read-write lock's
		// channel every local reader may proceed, and one writer. Elsewhere
		// nothing real sends "1", and it wakes one waiter, as "0" does.
		ch.wakeOne(exclusive)
		ch.broadcast(shared)
	}
}

// wakeOne wakes the first waiter of mode m that is not already woken, and
// reports whether there was a waiter of mode m at all. The caller holds the
// Hub's mu.
func (ch *channel) wakeOne(m mode) bool {
	found := false
	for _, w := range ch.waiters {
		if w.mode != m {
			continue
		}
		found = true
		if w.wake() {
			return true
		}
	}
	return found
}
