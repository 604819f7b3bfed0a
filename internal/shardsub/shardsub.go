package shardsub

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
)

// ErrClosed is returned by Subscribe after Close.
var ErrClosed = errors.New("shardsub: subscriber closed")

// Kind tells what an Event reports.
type Kind uint8

const (
	// Message is a message published (SPUBLISH) on a subscribed channel.
	Message Kind = iota + 1
	// Subscribed reports that a channel's first SSUBSCRIBE is confirmed:
	// from now on every message published on it is delivered.
	Subscribed
	// Resubscribed reports that a channel whose subscription was lost (its
	// slot moved, its master failed over, its connection dropped) is
	// subscribed again where its slot now lives. Messages published in
	// between were lost: the caller re-checks whatever they were about.
	Resubscribed
)

func (k Kind) String() string {
	switch k {
	case Message:
		return "message"
	case Subscribed:
		return "subscribed"
	case Resubscribed:
		return "resubscribed"
	}
	return "unknown"
}

// Event is what the Handler receives.
type Event struct {
	Kind    Kind
	Channel string
	Payload string // Message only
}

// Config is what a Subscriber is built with. Zero durations take the
// defaults.
type Config struct {
	// Handler receives every event. It is never called concurrently with
	// itself, nor after Close returns. It must not block (it holds up the
	// connection's reader) and must not call Close; it may call Subscribe
	// and Unsubscribe. Required.
	Handler func(Event)
	// Log receives connection losses (Warn) and retries (Debug); nil
	// discards.
	Log *slog.Logger
	// MinBackoff and MaxBackoff bound the delay between attempts to
	// subscribe a channel again while the cluster is not stable (default
	// 25ms and 2s; the delay doubles from one to the other, with jitter).
	MinBackoff, MaxBackoff time.Duration
	// PingInterval: a node connection silent that long is sent a PING
	// (default 5s). PingTimeout: a PING unanswered that long drops the
	// connection, as a connection error would (default 5s).
	PingInterval, PingTimeout time.Duration
	// RefreshInterval is how often the cluster's slot map is read while
	// channels are subscribed, to move any channel whose slot changed
	// owner without the server saying so (default 15s; negative: only when
	// something happened).
	RefreshInterval time.Duration
	// Timeout bounds each read of the slot map (default 3s).
	Timeout time.Duration
}

// Subscriber subscribes shard channels on a Redis Cluster, each on the
// master that serves its slot, over one connection per master in use. Its
// methods are safe for concurrent use.
type Subscriber struct {
	cc     *redis.ClusterClient
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	deliverMu sync.Mutex // serializes Handler calls

	mu       sync.Mutex
	closed   bool
	started  bool
	chans    map[string]*channel
	todo     map[*channel]struct{} // wanted and not placed on a node
	nodes    map[string]*node      // by address, live ones only
	unsubs   []unsub               // SUNSUBSCRIBEs to send
	slots    slotMap
	template *redis.Options // a node's options, the model of our node clients

	refresh      bool      // a slot map read is wanted
	refreshAt    time.Time // not before
	refreshFails int
	lastRefresh  time.Time // the last successful read

	signal  chan struct{}
	done    chan struct{} // the manager exited
	readers sync.WaitGroup
}

// channel is one shard channel the caller wants.
type channel struct {
	name      string
	slot      uint16
	node      *node // where SSUBSCRIBE was sent; nil when not placed
	live      bool  // confirmed on node
	confirmed bool  // confirmed once, anywhere
	lost      bool  // confirmed once and lost since: the next confirmation is a Resubscribed
	dropped   bool  // unsubscribed by the caller
	attempts  int   // failures since the last confirmation
	retryAt   time.Time
}

type unsub struct {
	n     *node
	names []string
}

// New returns a Subscriber using cc's slot map and connection options (its
// Dialer, credentials, TLS, timeouts). It opens no connection until the
// first Subscribe. cc must stay open until Close returns.
func New(cc *redis.ClusterClient, cfg Config) *Subscriber {
	if cfg.Handler == nil {
		panic("shardsub: Config.Handler is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.MinBackoff, 25*time.Millisecond)
	def(&cfg.MaxBackoff, 2*time.Second)
	def(&cfg.PingInterval, 5*time.Second)
	def(&cfg.PingTimeout, 5*time.Second)
	def(&cfg.RefreshInterval, 15*time.Second)
	def(&cfg.Timeout, 3*time.Second)
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Subscriber{
		cc:     cc,
		cfg:    cfg,
		log:    log,
		ctx:    ctx,
		cancel: cancel,
		chans:  make(map[string]*channel),
		todo:   make(map[*channel]struct{}),
		nodes:  make(map[string]*node),
		signal: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

// Subscribe subscribes channels not yet subscribed, in the background: it
// never blocks on Redis. The Handler hears Subscribed for each once its
// SSUBSCRIBE is confirmed. A channel's slot is its hash tag's, as a key's.
func (s *Subscriber) Subscribe(channels ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for _, name := range channels {
		if s.chans[name] != nil {
			continue
		}
		c := &channel{name: name, slot: keys.Slot(name)}
		s.chans[name] = c
		s.todo[c] = struct{}{}
	}
	if !s.started {
		s.started = true
		go s.run()
	}
	s.wake()
	return nil
}

// Unsubscribe unsubscribes channels, in the background. Messages already
// on their way may still be delivered shortly after it returns.
func (s *Subscriber) Unsubscribe(channels ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for _, name := range channels {
		c := s.chans[name]
		if c == nil {
			continue
		}
		delete(s.chans, name)
		delete(s.todo, c)
		c.dropped = true
		if n := c.node; n != nil {
			s.unplace(c)
			s.unsubs = append(s.unsubs, unsub{n: n, names: []string{name}})
		}
	}
	s.wake()
}

// Subscribed reports whether channel is subscribed and confirmed now.
func (s *Subscriber) Subscribed(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.chans[channel]
	return c != nil && c.live
}

// Nodes returns the addresses of the masters this Subscriber holds a
// connection to.
func (s *Subscriber) Nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.nodes))
	for addr := range s.nodes {
		out = append(out, addr)
	}
	return out
}

// Close unsubscribes everything by closing every connection, and returns
// once every goroutine of the Subscriber has ended (a Redis call in
// progress ends within cc's timeouts). No Handler call happens after it
// returns. It is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	nodes := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		n.dead = true
		nodes = append(nodes, n)
	}
	clear(s.nodes)
	s.mu.Unlock()
	s.cancel()
	if started {
		<-s.done
	}
	for _, n := range nodes {
		_ = n.ps.Close()
	}
	s.readers.Wait()
	return nil
}

// wake asks the manager for a pass. Any goroutine may call it.
func (s *Subscriber) wake() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// unplace detaches c from its node; the caller holds s.mu.
func (s *Subscriber) unplace(c *channel) {
	c.node.count--
	c.node = nil
	if c.live || c.confirmed {
		c.lost = true
	}
	c.live = false
}

// retry puts a wanted channel that lost its placement back in the queue,
// after a backoff that grows with its consecutive failures. The caller
// holds s.mu.
func (s *Subscriber) retry(c *channel, now time.Time, immediate bool) {
	if c.dropped {
		return
	}
	c.attempts++
	c.retryAt = now
	if !immediate {
		c.retryAt = now.Add(s.backoff(c.attempts))
	}
	s.todo[c] = struct{}{}
}

// backoff returns the delay before attempt n+1 (n ≥ 1), with up to 25%
// jitter.
func (s *Subscriber) backoff(n int) time.Duration {
	d := s.cfg.MinBackoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, s.cfg.MaxBackoff)
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// deliver hands events to the Handler, in order.
func (s *Subscriber) deliver(evs []Event) {
	if len(evs) == 0 {
		return
	}
	s.deliverMu.Lock()
	defer s.deliverMu.Unlock()
	for _, ev := range evs {
		s.cfg.Handler(ev)
	}
}
