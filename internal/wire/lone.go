package wire

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// lone sends a call on its caller's own goroutine when few callers of the
// Client are active (fewer than Lones calls in flight, and fewer than that
// on average as calls arrived: batcher.reserve): such a caller then pays one
// round trip per call and no goroutine hand-off (two scheduler wake-ups per
// call, about a tenth of an uncontended Lock+Unlock pair on two cores).
// Beyond that, calls go through the batcher, whose pipelines are what many
// callers need to keep Redis' cost per call low.
//
// Each lone connection serves one call at a time; a caller takes the first
// that is ready and free, and a connection is dialed only once callers
// found every ready one busy.
//
// The call goes out on a connection of the Wire's own, dialed from the
// go-redis client's options, because ctx is law: to return when its ctx
// ends while Redis says nothing, the caller must be able to interrupt the
// read it is blocked in, and only a connection the Wire dialed itself
// gives it the net.Conn to close. An interrupted call may have
// run, so it is resent through the batcher, abandoned, and its Undo runs
// with the resend's reply (every call sent through Do is safe to resend:
// go-redis resends too).
//
// Only a plain *redis.Client gets the connection: a Cluster's, a Ring's or
// a Sentinel failover client's calls follow topology that a lone connection
// would not, so they always go through the batcher. The connection is used
// only once a background PING on it has been answered, so a caller never
// waits for a dial.
type lone struct {
	rdb *redis.Client // pool of one connection, no retries: a failed call goes through the batcher
	mu  sync.Mutex    // held by the call on the connection, and by redial
	// conn is rdb's one connection, held: unlike a checkout from the pool
	// it costs no health-check syscall per call. Guarded by mu; nil until
	// redial makes it, and again after it failed.
	conn *redis.Conn

	netConn atomic.Pointer[net.Conn] // the connection last dialed
	ready   atomic.Bool              // answered a PING since it was last dialed or failed
	dials   dialGate

	// The caller's ctx may end while its call is on the connection:
	// interrupt then closes it, only while a call of that ctx is in
	// flight. Calls are told apart by their ctx's Done channel. The
	// callback stays registered on a ctx until a call comes with another
	// (or the ctx ends): a Lock and its Unlock, or a loop of them, usually
	// share a ctx, and a registration costs two allocations.
	imu      sync.Mutex
	inflight <-chan struct{} // the Done of the call in flight; nil: none
	watched  <-chan struct{} // the Done the callback is registered for
	unwatch  func() bool     // ends that registration
	// cut is set when interrupt closed the connection under the call in
	// flight: the call's reply, if it came first, stands, but the
	// connection is gone. Guarded by imu.
	cut bool
	// stopped is set by forget (Stop): no registration, no redial after.
	stopped atomic.Bool
}

// Lones is how many callers of one Client send their calls themselves at
// most, each on a connection of its own. A few concurrent callers then pay
// no wake-ups (four goroutines through the batcher made two batches of two
// and two wake-ups per call: 0.67x the pairs per second of a go-redis pool
// on a 2-vCPU AMD EPYC, PING 17 µs);
// beyond them, the batcher's pipelines cost Redis less per call.
const Lones = 4

// newLones returns the lone connections' state for rdb, or nil when rdb is
// not a plain *redis.Client.
func newLones(rdb redis.UniversalClient) []*lone {
	c := ownable(rdb)
	if c == nil {
		return nil
	}
	ls := make([]*lone, Lones)
	for i := range ls {
		ls[i] = newLone(c)
	}
	return ls
}

// newLone returns one lone connection's state, dialed as c dials.
func newLone(c *redis.Client) *lone {
	l := &lone{}
	l.rdb = ownClient(c, func(cn net.Conn) { l.netConn.Store(&cn) })
	return l
}

// ownClient returns a go-redis client of one connection dialed as c dials
// (its address, TLS, AUTH and SELECT), for a connection the Wire holds
// itself; dialed is given each net.Conn it dials, so that the Wire can
// close it under a call (ctx is law) or read and write it itself (pipe.go).
func ownClient(c *redis.Client, dialed func(net.Conn)) *redis.Client {
	opt := *c.Options()
	dial := opt.Dialer
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := dial(ctx, network, addr)
		if err == nil {
			dialed(cn)
		}
		return cn, err
	}
	opt.PoolSize, opt.MinIdleConns, opt.MaxIdleConns, opt.MaxActiveConns = 1, 0, 1, 1
	opt.MaxRetries = -1
	// A call whose ctx never ends must not wait for a silent Redis
	// forever: go-redis sets a deadline before every read and write only
	// when its timeouts are not disabled, and a call that times out is
	// resent through the batcher.
	if opt.ReadTimeout <= 0 {
		opt.ReadTimeout = time.Minute
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = time.Minute
	}
	// Its pushes (maintenance notices) are the go-redis client's to
	// follow: the Wire's connection only fails over to the batcher. RESP2
	// has none, so go-redis does not look for them (a syscall) before
	// each call; the scripts' replies are the same in both.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opt.Protocol = 2
	opt.ContextTimeoutEnabled = true // a dial or a wait for the connection honours ctx
	return redis.NewClient(&opt)
}

// ownable returns rdb as a plain *redis.Client whose connections the Wire
// may dial itself, or nil: a Cluster's, a Ring's or a Sentinel failover
// client's calls follow topology that a connection of its own would not.
func ownable(rdb redis.UniversalClient) *redis.Client {
	c, ok := rdb.(*redis.Client)
	if !ok || c.Options().Addr == "FailoverClient" {
		return nil
	}
	return c
}

// tryLone sends cl on the caller's goroutine if a lone connection is ready
// and free and batcher.reserve allows, and reports false, having done
// nothing, otherwise. When it reports true the call is done with: answered
// on the connection, or resent through the batcher and waited for as any
// call.
func (w *Wire) tryLone(ctx context.Context, cl *Call) (ok, left bool, err error) {
	if ctx.Err() != nil {
		return false, false, nil
	}
	var unready *lone
	for _, l := range w.lones {
		if !l.ready.Load() {
			// Looked past: one dropped by a failed call leaves the others
			// in use.
			if unready == nil {
				unready = l
			}
			continue
		}
		if !l.mu.TryLock() {
			continue
		}
		// ready was read without mu: a call that failed since may have
		// dropped the connection.
		if l.conn == nil {
			l.mu.Unlock()
			continue
		}
		if !w.batch.reserve(Lones) {
			l.mu.Unlock()
			return false, false, nil
		}
		left, err = w.sendLone(ctx, l, cl)
		return true, left, err
	}
	if unready != nil {
		// Every ready one was busy (or none is): the first that is not
		// ready is dialed, so a Client of one caller at a time keeps one.
		w.redial(unready)
	}
	return false, false, nil
}

// sendLone sends cl on l, whose mu the caller holds and which it unlocks,
// and counted by reserve.
func (w *Wire) sendLone(ctx context.Context, l *lone, cl *Call) (left bool, err error) {
	cl.state.Store(sent)
	l.watch(ctx)
	_ = l.conn.Process(ctx, cl.Cmd)
	if cl.Script != nil && isNoScript(cl.Cmd.Err()) {
		cl.Script.evalInstead(ctx, l.conn, cl.Cmd)
	}
	requireReply(cl.Cmd)
	l.imu.Lock()
	l.inflight = nil
	cut := l.cut
	l.cut = false
	l.imu.Unlock()
	replied := isReply(cl.Cmd.Err()) && !isRetryable(cl.Cmd.Err())
	dropped := !replied || cut
	if dropped {
		// The connection is done with: redial makes another once a PING
		// is answered.
		l.ready.Store(false)
		_ = l.conn.Close()
		l.conn = nil
	}
	l.mu.Unlock()
	if dropped {
		w.redial(l)
	}
	if replied {
		cl.state.Store(answered)
		w.batch.delivered(1)
		return false, nil
	}
	// It may have run, so it must not be dropped. The batcher resends it
	// and the caller waits for that as for any call: if its ctx is done,
	// the resend's reply goes to the call's Undo.
	requeue(cl, true)
	w.batch.enqueue(cl, 0)
	return w.wait(ctx, cl)
}

// LoneReady reports whether the first lone connection is ready: a caller of
// a Client with no other call in flight, and none lately, sends its call
// itself now.
func (w *Wire) LoneReady() bool { return w.lones != nil && w.lones[0].ready.Load() }

// LonesReady reports how many lone connections are ready: as many callers
// as that send their calls themselves at once.
func (w *Wire) LonesReady() int {
	n := 0
	for _, l := range w.lones {
		if l.ready.Load() {
			n++
		}
	}
	return n
}

// isReply reports whether err is a reply of Redis (or none): the call ran
// and its reply is in.
func isReply(err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		return true
	}
	var re redis.Error
	return errors.As(err, &re)
}

// isRetryable reports whether err is a reply that says the command did not
// run and may run if sent again (a loading or read-only server, a failover
// under way): go-redis retries those with backoff, so the batcher, which
// sends through the go-redis client, does.
func isRetryable(err error) bool {
	return err != nil && (redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsClusterDownError(err))
}

// watch marks a call of ctx in flight, registering interrupt on ctx unless
// it already is (or the Wire is stopped: the call then fails on the closed
// connection and is resent).
func (l *lone) watch(ctx context.Context) {
	done := ctx.Done()
	l.imu.Lock()
	defer l.imu.Unlock()
	l.inflight = done
	if done == nil || done == l.watched || l.stopped.Load() {
		return
	}
	if l.unwatch != nil {
		l.unwatch()
	}
	l.watched = done
	l.unwatch = context.AfterFunc(ctx, func() { l.interrupt(done) })
}

// forget ends the registration on the last ctx seen, so that the Wire
// keeps no ctx of a caller once it is stopped.
func (l *lone) forget() {
	l.imu.Lock()
	defer l.imu.Unlock()
	l.stopped.Store(true)
	if l.unwatch != nil {
		l.unwatch()
	}
	l.watched, l.unwatch = nil, nil
}

// interrupt ends the call in flight if it is done's, and forgets the
// registration for done. It closes the connection: a past deadline alone
// would be undone by the deadline go-redis sets before its write and its
// read, and the callback runs only once.
func (l *lone) interrupt(done <-chan struct{}) {
	l.imu.Lock()
	defer l.imu.Unlock()
	if l.watched == done {
		l.watched, l.unwatch = nil, nil
	}
	if l.inflight != done {
		return
	}
	if cn := l.netConn.Load(); cn != nil {
		_ = (*cn).Close()
		l.cut = true
	}
}

// dialGate lets a connection of the Wire's own be dialed once a second at
// most. Safe for concurrent use.
type dialGate struct{ last atomic.Int64 } // when the last dial started, Unix ns

// allow reports whether a dial may start now, and if so counts it started.
func (g *dialGate) allow() bool {
	now := time.Now().UnixNano()
	last := g.last.Load()
	return now-last >= int64(time.Second) && g.last.CompareAndSwap(last, now)
}

// redial makes the connection ready in the background: a PING, bounded by
// the cleanup timeout, dials it if it must. One at a time, at most one a
// second: a Redis that refuses costs a lone caller nothing.
func (w *Wire) redial(l *lone) {
	if l.stopped.Load() {
		return
	}
	if !l.dials.allow() {
		return
	}
	w.Detach(func(ctx context.Context) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.conn == nil {
			l.conn = l.rdb.Conn()
		}
		if err := l.conn.Ping(ctx).Err(); err != nil {
			_ = l.conn.Close()
			l.conn = nil
			return
		}
		l.ready.Store(true)
	})
}
