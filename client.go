package dlock

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/kind"
	"github.com/dlock-dev/dlock/internal/lease"
	"github.com/dlock-dev/dlock/internal/tier"
)

// Client hands out lock handles that share one Redis client, one pub/sub
// connection and one watchdog. A Client is safe for concurrent use; create one
// per process (per Redis deployment) and Close it on shutdown.
//
// A message on that connection only wakes: the woken waiter's next attempt
// asks Redis (see "Whom it trusts" in the package doc), and what a forged
// message can cost is bounded. A waiter makes at most one attempt per
// message; repeated wake-ups coalesce until it has tried. A message that
// could let many goroutines of the process through at once (a latch's
// waiters, an RWMutex's readers) wakes one of them, and the others follow
// only if its attempt got through, so a forged message costs the process
// one Redis call per kind of waiter, however many wait. A forged "forced"
// message makes each hold of its lock in the process ask Redis whether it
// still holds, no more than once per 100ms per hold however many messages
// come.
//
// A pub/sub connection that goes silent (its peer gone without a reset: a
// partition, a frozen host) is sent a PING after 5s of silence and replaced
// when the PING is not answered within 5s more; every waiter then
// re-checks. An idle Client's pub/sub connection costs Redis that one PING
// every 5s.
type Client struct {
	e        *lease.Engine
	cfg      config
	fallback *tier.Tiers // WithFallback; nil without
	handles  handles     // the handles of Mutex, FairMutex and RWMutex, by name
}

// New returns a Client that locks through rdb (a *redis.Client, a Sentinel
// failover client or a *redis.ClusterClient; a *redis.Ring is refused with
// ErrInvalidArgument). It makes no network call; rdb
// stays owned by the caller and is not closed by Close. Over a plain
// *redis.Client, a call made while few callers are active (fewer than four
// calls in flight, and lately) goes out on one of up to four connections of
// the Client's own, and the calls of more callers on one more, the pipe,
// which carries them all at once without waiting for replies; these are
// dialed from rdb's options as they are first needed and unseen by its
// hooks (WithOwnConnection).
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidArgument)
	}
	if _, ok := rdb.(*redis.Ring); ok {
		// A Ring spreads keys and channels over servers that know nothing
		// of each other: one renewal call would carry keys of several
		// shards, and a release's message would reach only the
		// subscribers of its own shard.
		return nil, fmt.Errorf("%w: a *redis.Ring is not supported: use a *redis.Client, a Sentinel failover client or a *redis.ClusterClient", ErrInvalidArgument)
	}
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: option %d is nil", ErrInvalidArgument, i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if cfg.ClientID == "" {
		cfg.ClientID = keys.NewClientID()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok && cfg.sharded != ShardedOff {
		cfg.Sharded = cc
	} else if cfg.sharded == ShardedOn {
		return nil, fmt.Errorf("%w: sharded pub/sub needs a *redis.ClusterClient", ErrInvalidArgument)
	}
	c := &Client{cfg: cfg}
	cfg.Renew, cfg.Touch, cfg.Read = kind.Renewer(cfg.Space, cfg.FenceTTL), kind.Touch, kind.PrimaryRead
	cfg.Report = cfg.Report && reportAtFirstContact
	cfg.RenewFailed = func(_ int, err error) {
		if c.fallback != nil && tier.IsInfrastructure(err) {
			c.fallback.RedisFailed() // holders too must see the outage
		}
	}
	cfg.RenewBatched = func(int) {
		if c.fallback != nil {
			c.fallback.ReachedRedis()
		}
	}
	c.e = lease.New(rdb, cfg.Config)
	if cfg.fallback != nil {
		c.fallback = c.newTiers()
	}
	return c, nil
}

// ID returns the client id that prefixes this client's owner fields
// (WithClientID, or New's default). Safe for concurrent use.
func (c *Client) ID() string { return c.cfg.ClientID }

// Close stops the watchdog, wakes every waiter with ErrClosed, tells every
// holder that its hold ended (Done closes, Err and the hold's context's cause
// wrap ErrLockLost and ErrClosed), releases the locks the client still holds,
// closes the pub/sub connection and waits for background cleanups, all within
// the close timeout (WithCloseTimeout, default 5s) whatever Redis does. Locks
// it could not release expire by their TTL. Close is idempotent and safe to
// call concurrently with lock operations, which then fail with ErrClosed.
// Close of a nil Client (what New returns with its error) does nothing.
func (c *Client) Close() error {
	if c == nil || c.e == nil {
		return nil
	}
	return c.e.Close()
}

// ParseClientID splits a client id made by New's default,
// "<host>/<pid>/<random>", into its host and process id; ok is false for an
// id set with WithClientID in another form (a Redisson UUID, say). An owner
// field "<client id>:<n>" (Holder.Owner) is accepted as well. Safe for
// concurrent use.
func ParseClientID(id string) (host string, pid int, ok bool) { return keys.ParseClientID(id) }
