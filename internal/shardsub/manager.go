package shardsub

import (
	"context"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The manager goroutine is the only one that writes to Redis: it reads the
// slot map, sends SSUBSCRIBE, SUNSUBSCRIBE and PING, and drops silent
// connections. Readers and callers only change state under s.mu and wake
// it.

// run is the manager's loop, until Close.
func (s *Subscriber) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := s.step()
		timer.Reset(max(time.Until(next), 0))
		select {
		case <-s.ctx.Done():
			return
		case <-s.signal:
		case <-timer.C:
		}
	}
}

// write is one command to send on a node's connection.
type write struct {
	n     *node
	kind  cmdKind
	names []string
}

// step does whatever is due and returns when it next has to.
func (s *Subscriber) step() time.Time {
	now := time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return now.Add(time.Hour)
	}
	read := !now.Before(s.refreshAt) && (s.refresh ||
		s.cfg.RefreshInterval > 0 && len(s.chans) > 0 && now.Sub(s.lastRefresh) >= s.cfg.RefreshInterval)
	s.mu.Unlock()
	if read {
		s.readSlots()
	}

	now = time.Now()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return now.Add(time.Hour)
	}
	var writes []write
	var drop, idle []*node
	// Unsubscriptions first: a channel unsubscribed and subscribed again
	// on the same node must reach it in that order.
	for _, u := range s.unsubs {
		if !u.n.dead {
			writes = append(writes, s.queue(u.n, cmdUnsub, u.names, nil))
		}
	}
	s.unsubs = nil
	writes = s.placements(now, writes)
	writes, drop, idle = s.health(now, writes)
	s.mu.Unlock()

	for _, n := range drop {
		s.drop(n, errSilent)
	}
	for _, n := range idle {
		// The reader sees the connection end and exits.
		_ = n.ps.Close()
	}
	for _, w := range writes {
		var err error
		switch w.kind {
		case cmdSub:
			err = w.n.ps.SSubscribe(s.ctx, w.names...)
		case cmdUnsub:
			err = w.n.ps.SUnsubscribe(s.ctx, w.names...)
		case cmdPing:
			err = w.n.ps.Ping(s.ctx)
		}
		if err != nil {
			s.drop(w.n, err)
		}
	}
	return s.nextWake()
}

// queue records a command about to be sent on n, whose replies the reader
// will match in order. The caller holds s.mu.
func (s *Subscriber) queue(n *node, kind cmdKind, names []string, chans []*channel) write {
	n.sent = append(n.sent, &cmd{kind: kind, names: names, chans: chans, answered: make([]bool, len(names)), left: max(len(names), 1)})
	return write{n: n, kind: kind, names: names}
}

// placements sends SSUBSCRIBE for the channels due, one command per slot
// (a command's channels must share a slot), on the connection to the
// slot's master. The caller holds s.mu.
func (s *Subscriber) placements(now time.Time, writes []write) []write {
	type group struct {
		n    *node
		slot uint16
	}
	var order []group
	groups := make(map[group][]*channel)
	for c := range s.todo {
		if c.retryAt.After(now) {
			continue
		}
		addr, ok := s.slots.owner(c.slot)
		if !ok || s.template == nil {
			// Waits for the next read of the slot map.
			s.refresh = true
			c.retryAt = maxTime(c.retryAt, s.refreshAt)
			continue
		}
		n := s.nodes[addr]
		if n == nil {
			n = s.newNode(addr)
		}
		delete(s.todo, c)
		c.node = n
		n.count++
		g := group{n, c.slot}
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], c)
	}
	for _, g := range order {
		chans := groups[g]
		names := make([]string, len(chans))
		for i, c := range chans {
			names[i] = c.name
		}
		writes = append(writes, s.queue(g.n, cmdSub, names, chans))
	}
	return writes
}

// health pings silent connections, and returns those whose ping went
// unanswered, to be dropped, and those no channel used for a while, to be
// closed. The caller holds s.mu.
func (s *Subscriber) health(now time.Time, writes []write) (_ []write, drop, idle []*node) {
	for addr, n := range s.nodes {
		switch {
		case !n.pingSent.IsZero():
			if now.Sub(n.pingSent) >= s.cfg.PingTimeout {
				drop = append(drop, n)
			}
		case now.Sub(n.lastRead) >= s.cfg.PingInterval:
			n.pingSent = now
			writes = append(writes, s.queue(n, cmdPing, nil, nil))
		}
		if n.count > 0 {
			n.idleSince = time.Time{}
			continue
		}
		if n.idleSince.IsZero() {
			n.idleSince = now
		} else if now.Sub(n.idleSince) >= s.cfg.PingInterval && len(n.sent) == 0 {
			n.dead = true
			delete(s.nodes, addr)
			idle = append(idle, n)
		}
	}
	return writes, drop, idle
}

// nextWake returns when a channel's retry, a slot map read or a
// connection's health check is next due.
func (s *Subscriber) nextWake() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := time.Now().Add(time.Hour)
	if s.refresh {
		next = s.refreshAt
	} else if s.cfg.RefreshInterval > 0 && len(s.chans) > 0 {
		next = maxTime(s.refreshAt, s.lastRefresh.Add(s.cfg.RefreshInterval))
	}
	for c := range s.todo {
		next = minTime(next, c.retryAt)
	}
	for _, n := range s.nodes {
		if !n.pingSent.IsZero() {
			next = minTime(next, n.pingSent.Add(s.cfg.PingTimeout))
		} else {
			next = minTime(next, n.lastRead.Add(s.cfg.PingInterval))
		}
		if n.count == 0 {
			if n.idleSince.IsZero() {
				next = time.Now()
			} else {
				next = minTime(next, n.idleSince.Add(s.cfg.PingInterval))
			}
		}
	}
	return next
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// readSlots reads the slot map through cc (CLUSTER SHARDS, from one of its
// masters), and
// moves every subscribed channel whose slot is now served by another
// master than the one it is subscribed on.
func (s *Subscriber) readSlots() {
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.Timeout)
	defer cancel()
	shards, err := s.cc.ClusterShards(ctx).Result()
	var tmpl *redis.Options
	if err == nil && s.template == nil {
		// The options of cc's node clients (unexported in go-redis),
		// taken from one of them: our node clients dial, authenticate
		// and time out as cc's do.
		var rdb *redis.Client
		if rdb, err = s.cc.MasterForKey(ctx, "shardsub"); err == nil {
			o := *rdb.Options()
			tmpl = &o
		}
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Reads are spaced by MinBackoff at least, more after failures.
	s.refreshAt = now.Add(s.cfg.MinBackoff)
	if err != nil {
		s.refreshFails++
		s.refresh = true
		s.refreshAt = now.Add(s.backoff(s.refreshFails))
		if s.ctx.Err() == nil {
			s.log.Debug("dlock: reading the cluster slot map failed", "err", err)
		}
		return
	}
	if tmpl != nil {
		s.template = tmpl
	}
	s.refreshFails = 0
	s.refresh = false
	s.lastRefresh = now
	s.slots = newSlotMap(shards)
	for _, c := range s.chans {
		n := c.node
		if n == nil || !c.live {
			continue
		}
		if addr, ok := s.slots.owner(c.slot); ok && addr != n.addr {
			// Served elsewhere now (a failover or a migration the
			// server did not announce to us): unsubscribed here,
			// subscribed there.
			s.unplace(c)
			s.unsubs = append(s.unsubs, unsub{n: n, names: []string{c.name}})
			s.retry(c, now, true)
		}
	}
}

// slotMap maps slots to the address of their master.
type slotMap struct {
	ranges []slotRange       // sorted by lo
	moved  map[uint16]string // learnt from MOVED since the last read
}

type slotRange struct {
	lo, hi uint16
	addr   string
}

// newSlotMap reads CLUSTER SHARDS: each shard's slot ranges, served by its
// node whose role is master, at its preferred endpoint.
func newSlotMap(shards []redis.ClusterShard) slotMap {
	m := slotMap{}
	for _, sh := range shards {
		addr := ""
		for _, n := range sh.Nodes {
			port := n.Port
			if port == 0 {
				port = n.TLSPort
			}
			if n.Role == "master" && n.Endpoint != "" && n.Endpoint != "?" && port != 0 {
				addr = net.JoinHostPort(n.Endpoint, strconv.FormatInt(port, 10))
			}
		}
		if addr == "" {
			continue
		}
		for _, r := range sh.Slots {
			m.ranges = append(m.ranges, slotRange{lo: uint16(r.Start), hi: uint16(r.End), addr: addr})
		}
	}
	slices.SortFunc(m.ranges, func(a, b slotRange) int { return int(a.lo) - int(b.lo) })
	return m
}

func (m *slotMap) owner(slot uint16) (string, bool) {
	if addr, ok := m.moved[slot]; ok {
		return addr, true
	}
	i, _ := slices.BinarySearchFunc(m.ranges, slot, func(r slotRange, s uint16) int {
		switch {
		case r.hi < s:
			return -1
		case r.lo > s:
			return 1
		}
		return 0
	})
	if i < len(m.ranges) && m.ranges[i].lo <= slot && slot <= m.ranges[i].hi {
		return m.ranges[i].addr, true
	}
	return "", false
}

func (m *slotMap) setMoved(slot uint16, addr string) {
	if m.moved == nil {
		m.moved = make(map[uint16]string)
	}
	m.moved[slot] = addr
}
