package shardsub

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	errSilent   = errors.New("shardsub: no answer to PING")
	errConfused = errors.New("shardsub: a reply that matches no command sent")
)

// node is our connection to one master: a go-redis Client of our own for
// that address (cc's options) and one PubSub on it, read by one goroutine.
//
// go-redis' PubSub reconnects by itself after a connection error, sending
// every shard channel it knows in one SSUBSCRIBE, which Redis refuses with
// CROSSSLOT unless they share a slot. A node is therefore never reused
// after a connection error: it is dropped, and its channels are placed
// again, on whichever master serves their slot by then, on a fresh node.
type node struct {
	addr string
	rdb  *redis.Client
	ps   *redis.PubSub

	// Guarded by Subscriber.mu:
	dead      bool
	count     int    // channels placed here
	sent      []*cmd // commands sent whose replies are not all in
	lastRead  time.Time
	pingSent  time.Time // zero unless a PING awaits its answer
	idleSince time.Time // zero while count > 0
}

type cmdKind uint8

const (
	cmdSub cmdKind = iota + 1
	cmdUnsub
	cmdPing
)

// cmd is a command sent on a node's connection. SSUBSCRIBE and
// SUNSUBSCRIBE get one reply per channel (or one error), PING one.
type cmd struct {
	kind     cmdKind
	names    []string
	chans    []*channel // cmdSub: the channels placed by it, as names
	answered []bool     // per name
	left     int        // replies still to come
}

// newNode opens (lazily: the first command dials) a connection to addr and
// starts its reader. The caller holds s.mu.
func (s *Subscriber) newNode(addr string) *node {
	o := *s.template
	o.Addr = addr
	o.NodeAddress = addr
	// Only the pub/sub connection is used.
	o.PoolSize = 1
	o.MinIdleConns = 0
	n := &node{addr: addr, lastRead: time.Now()}
	n.rdb = s.cc.Options().NewClient(&o)
	n.ps = n.rdb.Subscribe(s.ctx)
	s.nodes[addr] = n
	s.readers.Add(1)
	go s.read(n)
	return n
}

// read dispatches what n's connection receives until it fails or is
// closed.
func (s *Subscriber) read(n *node) {
	defer s.readers.Done()
	var evs []Event
	for {
		msg, err := n.ps.Receive(s.ctx)
		if err != nil {
			var rerr redis.Error
			if errors.As(err, &rerr) && !s.connLevel(n, err) && s.failed(n, err) {
				continue
			}
			s.drop(n, err)
			_ = n.ps.Close()
			_ = n.rdb.Close()
			return
		}
		var alive bool
		evs, alive = s.received(n, msg, evs[:0])
		s.deliver(evs)
		if !alive {
			_ = n.ps.Close()
			_ = n.rdb.Close()
			return
		}
	}
}

// connLevel tells whether a Redis error reply made go-redis replace the
// PubSub's connection under us (it does on READONLY and on a MOVED to the
// connection's own address): the node must then be dropped.
func (s *Subscriber) connLevel(n *node, err error) bool {
	msg := err.Error()
	if strings.HasPrefix(msg, "READONLY") {
		return true
	}
	_, addr, ok := parseMoved(msg)
	return ok && addr == n.addr
}

// received handles one reply or push, appends the events it causes, and
// reports whether n is still in use.
func (s *Subscriber) received(n *node, msg any, evs []Event) ([]Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !n.dead {
		n.lastRead = time.Now()
		evs = s.handle(n, msg, evs)
	}
	return evs, !n.dead
}

// handle is received's body. The caller holds s.mu.
func (s *Subscriber) handle(n *node, msg any, evs []Event) []Event {
	switch m := msg.(type) {
	case *redis.Message:
		if c := s.chans[m.Channel]; c != nil && c.node == n && c.live {
			evs = append(evs, Event{Kind: Message, Channel: m.Channel, Payload: m.Payload})
		}
	case *redis.Subscription:
		switch m.Kind {
		case "ssubscribe":
			return s.confirmed(n, m.Channel, evs)
		case "sunsubscribe":
			if head := n.head(); head != nil && head.kind == cmdUnsub && head.take(m.Channel) >= 0 {
				n.pop()
				return evs
			}
			// Pushed by the server: the channel's slot is not served here
			// any more (migrated, or this master became a replica).
			if c := s.chans[m.Channel]; c != nil && c.node == n {
				s.log.Debug("dlock: shard channel unsubscribed by the server; resubscribing", "channel", m.Channel, "node", n.addr)
				s.unplace(c)
				s.retry(c, n.lastRead, true)
				s.refresh = true
				s.wake()
			}
		default:
			s.confused(n)
		}
	case *redis.Pong:
		if head := n.head(); head != nil && head.kind == cmdPing {
			n.popHead()
			n.pingSent = time.Time{}
			return evs
		}
		s.confused(n)
	}
	return evs
}

// confirmed handles an ssubscribe reply. The caller holds s.mu.
func (s *Subscriber) confirmed(n *node, name string, evs []Event) []Event {
	head := n.head()
	if head == nil || head.kind != cmdSub {
		s.confused(n)
		return evs
	}
	i := head.take(name)
	if i < 0 {
		s.confused(n)
		return evs
	}
	c := head.chans[i]
	n.pop()
	if c.node != n {
		// Unplaced since it was sent, yet subscribed here. Unless an
		// SUNSUBSCRIBE follows already (Unsubscribe sent one), one is
		// sent now, so that the connection carries no stray channel.
		if cur := s.chans[name]; !c.dropped && (cur == nil || cur.node != n) {
			s.unsubs = append(s.unsubs, unsub{n: n, names: []string{name}})
			s.wake()
		}
		return evs
	}
	c.live = true
	c.attempts = 0
	kind := Subscribed
	if c.lost {
		kind = Resubscribed
	}
	c.confirmed = true
	c.lost = false
	return append(evs, Event{Kind: kind, Channel: name})
}

// failed handles an error reply, the failure of the command at the head of
// n's queue as a whole, and reports whether n is still in use.
func (s *Subscriber) failed(n *node, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n.dead {
		return false
	}
	n.lastRead = time.Now()
	head := n.head()
	if head == nil {
		s.confused(n)
		return false
	}
	n.popHead()
	if head.kind == cmdPing {
		n.pingSent = time.Time{}
	}
	if head.kind != cmdSub {
		return true
	}
	slot, addr, moved := parseMoved(err.Error())
	for _, c := range head.chans {
		if c.node != n || c.dropped {
			continue
		}
		s.unplace(c)
		if moved && c.slot == slot {
			// Redirected: tried there at once the first time, as the
			// slot map says there from now on.
			s.slots.setMoved(slot, addr)
			s.retry(c, n.lastRead, c.attempts == 0)
		} else {
			// CLUSTERDOWN, TRYAGAIN, ...: the cluster is changing.
			s.retry(c, n.lastRead, false)
			s.refresh = true
		}
		if c.attempts > 1 {
			s.log.Debug("dlock: SSUBSCRIBE refused; retrying", "channel", c.name, "node", n.addr, "err", err, "attempts", c.attempts)
		}
	}
	s.wake()
	return true
}

// confused drops n after a reply that matches no command sent: only a new
// connection can be trusted again. The caller holds s.mu; its reader exits
// on its next turn.
func (s *Subscriber) confused(n *node) {
	s.log.Warn("dlock: unexpected reply on a shard pub/sub connection; reconnecting", "node", n.addr)
	s.dropLocked(n, errConfused)
}

// drop gives n up after err: every channel placed on it is placed again,
// after a fresh read of the slot map. Idempotent.
func (s *Subscriber) drop(n *node, err error) {
	s.mu.Lock()
	dropped := s.dropLocked(n, err)
	s.mu.Unlock()
	if dropped {
		// Unblocks the reader, if it is not the caller.
		_ = n.ps.Close()
	}
}

func (s *Subscriber) dropLocked(n *node, err error) bool {
	if n.dead {
		return false
	}
	n.dead = true
	if s.nodes[n.addr] == n {
		delete(s.nodes, n.addr)
	}
	if s.closed {
		return true
	}
	now := time.Now()
	lost := 0
	for _, c := range s.chans {
		if c.node == n {
			lost++
			s.unplace(c)
			s.retry(c, now, false)
		}
	}
	if lost > 0 {
		s.log.Warn("dlock: shard pub/sub connection lost; resubscribing", "node", n.addr, "channels", lost, "err", err)
	}
	s.refresh = true
	s.wake()
	return true
}

func (n *node) head() *cmd {
	if len(n.sent) == 0 {
		return nil
	}
	return n.sent[0]
}

// pop removes the head command once all its replies are in.
func (n *node) pop() {
	if h := n.head(); h != nil && h.left <= 0 {
		n.popHead()
	}
}

func (n *node) popHead() {
	n.sent[0] = nil
	n.sent = n.sent[1:]
}

// take counts the reply for name against c and returns its index in
// c.names, or -1 when c has no unanswered name.
func (c *cmd) take(name string) int {
	for i, x := range c.names {
		if x == name && !c.answered[i] {
			c.answered[i] = true
			c.left--
			return i
		}
	}
	return -1
}

// parseMoved parses "MOVED <slot> <addr>".
func parseMoved(msg string) (uint16, string, bool) {
	f := strings.Fields(msg)
	if len(f) != 3 || f[0] != "MOVED" {
		return 0, "", false
	}
	slot, err := strconv.ParseUint(f[1], 10, 16)
	if err != nil {
		return 0, "", false
	}
	return uint16(slot), f[2], true
}
