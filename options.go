package dlock

import (
	"fmt"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lease"
)

// Option configures a Client. Options are applied by New in order. They are
// plain function values: one may be given to several Clients, concurrently.
type Option func(*config) error

// config is the engine's configuration and what only the public face uses.
type config struct {
	lease.Config
	fallback    Fallback // WithFallback
	fallbackCfg fallbackConfig
	sharded     ShardedMode
}

var reportAtFirstContact = true // the tests that count commands clear it

func defaultConfig() config {
	return config{Config: lease.Config{
		Watchdog:       30 * time.Second,
		Logger:         slog.New(slog.DiscardHandler),
		Claim:          2 * time.Second,
		Recheck:        3 * time.Second,
		Linger:         2 * time.Second,
		FenceTTL:       24 * time.Hour,
		CloseTimeout:   5 * time.Second,
		CleanupTimeout: 5 * time.Second,
		Report:         true,
	}}
}

// WithOwnConnection(false) sends every call through the go-redis client
// given to New, so that its hooks (tracing, metrics) see every one. By
// default, over a plain *redis.Client, a call made while few callers are
// active takes one of the Client's own connections, and the calls of many
// take the Client's pipe, one more connection of its own (see New).
func WithOwnConnection(on bool) Option {
	return func(c *config) error { c.SharedConnOnly = !on; return nil }
}

// WithMaxHold sets how long any lock hold of the Client may last (see
// MaxHold, which overrides it per WithLock call); 0, the default, leaves
// holds unbounded. Elections are not bounded by it: a leader leads until it
// resigns or is lost. d must not be negative.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: max hold %v is negative", ErrInvalidArgument, d)
		}
		c.MaxHold = d
		return nil
	}
}

// WithLongHoldAlert makes the Client report each lock hold, once, when the
// watchdog renews it past d: a Warn log line and, for observers that
// implement LongHoldObserver (dlockprom does), a call. It bounds nothing
// (see WithMaxHold for that); it tells an operator which holders may be
// stuck. 0, the default, reports nothing; d must not be negative. A
// renewed hold also leaves a record (dlock:held:{name}, written only by
// renewals, so a short hold costs nothing) that Inspect shows as
// Holder.HeldFor and Holder.Renewals.
func WithLongHoldAlert(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: long-hold alert %v is negative", ErrInvalidArgument, d)
		}
		c.LongHold = d
		return nil
	}
}

// ShardedMode says whether a Client's pub/sub is sharded (SSUBSCRIBE and
// SPUBLISH, Redis 7.0+), like Redisson's shardedSubscriptionMode. A
// ShardedMode is a plain value; safe to copy and share.
type ShardedMode int

// The sharded pub/sub modes: ShardedAuto (the default) is sharded on a
// *redis.ClusterClient (assumed Redis 7.0+: set ShardedOff for an older
// Cluster) and classic elsewhere; ShardedOn needs a ClusterClient.
const (
	ShardedAuto ShardedMode = iota
	ShardedOn
	ShardedOff
)

// WithShardedPubSub sets the Client's pub/sub mode (default ShardedAuto).
// Sharded, every message stays in the shard of its lock's slot (a hand-off
// on the waiter's client channel of that slot); classic PUBLISH is copied
// to every node of a Cluster. Every process sharing a lock must use the
// same mode (Redisson 3.22+ is sharded on Cluster 7), or its wake-ups fall
// back to re-checks.
func WithShardedPubSub(m ShardedMode) Option {
	return func(c *config) error {
		if m < ShardedAuto || m > ShardedOff {
			return fmt.Errorf("%w: sharded pub/sub mode %d", ErrInvalidArgument, m)
		}
		c.sharded = m
		return nil
	}
}

// WithNamespace makes every key and channel of the Client begin with
// "ns:", so that one ACL line per service (~ns:* &ns:* and no @dangerous
// command) keeps the tenants of one Redis off each other's locks: with it,
// one tenant can neither take, break, force nor wake the other's locks, and
// the server's ACL LOG stays empty. The lock named N is the hash at "ns:N",
// as Redisson's NameMapper with prefix "ns:" has it (its channels are not
// prefixed: across the two, wake-ups fall back to re-checks). Names are
// passed and reported without the namespace. What a namespace guarantees:
//
//   - It is data, never code. A namespace is 1 to 64 ASCII letters, digits,
//     '_', '.' and '-' (anything else is ErrInvalidArgument, before any
//     network call; the CLI's --namespace and $DLOCK_NAMESPACE alike). The
//     scripts build their channel names with it, and no such character can
//     end or escape a Lua string, match more than itself in an ACL or SCAN
//     pattern, or move a key's hash tag.
//   - Namespaces never nest. A namespace has no ':', so the first ':' of a
//     key ends it: no two (namespace, name) pairs share a key or a channel
//     ("a" with lock "b:x" is "a:b:x", and "a:b" is no namespace), and a
//     tenant's names may hold any character a lock name may.
//   - A Client without a namespace is not a tenant: its names are the keys
//     themselves (Redisson's layout), so its lock "a:x" has namespace a's
//     lock "x" as its hash, and can read or break it. Give it only to those
//     trusted with every lock. It is not the same lock, though: the fencing
//     counter, queue, forced set and channels differ, so the two must not
//     be mixed (tokens would not be ordered across them), and its
//     ForceUnlock of a tenant's lock (one whose tenant fencing counter
//     exists) is refused: force it with the tenant's namespace.
//   - Lock names that begin with "dlock:" are refused: those are dlock's own
//     keys beside a lock (its fencing counter, queue, ...), and a lock of
//     that name would break the lock it belongs to. So are names holding
//     control characters, which would reach an operator's terminal.
//
// What a namespace does not hide: Redis applies ACL key and channel
// patterns to the keys and channels a command touches, not to the names it
// lists. PUBSUB CHANNELS (and SHARDCHANNELS) and SCAN list every active
// channel and every key name of the server, whatever the caller's
// patterns: a tenant allowed them sees the other tenants' lock names (in
// their release channels and keys) and client ids (host name and process
// id, in their client channels). dlock needs neither on any lock path; deny
// them (-pubsub|channels -pubsub|shardchannels -scan) where names are
// confidential, at the cost of Client.Locks and dlock inspect --all, which
// SCAN. dlock doctor warns when the user may list channels.
func WithNamespace(ns string) Option {
	return func(c *config) error {
		s, err := keys.NewSpace(ns)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		c.Space = s
		return nil
	}
}

// MaxSpinBackoff is the longest backoff WithSpin accepts.
const MaxSpinBackoff = time.Minute

// MinWatchdogTimeout is the shortest watchdog timeout accepted.
const MinWatchdogTimeout = 30 * time.Millisecond

// WithWatchdogTimeout sets the TTL of locks held in watchdog mode (lease <= 0).
// The watchdog renews such locks every third of it, and a holder that cannot
// confirm its hold for a whole timeout declares the lock lost. Default 30s,
// Redisson's lockWatchdogTimeout; at least MinWatchdogTimeout.
func WithWatchdogTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < MinWatchdogTimeout {
			return fmt.Errorf("%w: watchdog timeout %v is shorter than %v", ErrInvalidArgument, d, MinWatchdogTimeout)
		}
		c.Watchdog = d
		return nil
	}
}

// WithLogger sets the logger for renewal trouble, lost holds, pub/sub
// reconnects and the safety checks' warnings (WithSafetyCheck). Fencing
// tokens and owner ids are never logged. Default: the safety warnings go to
// slog.Default(), the rest is discarded.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidArgument)
		}
		c.Logger, c.ReportLogger = l, l
		return nil
	}
}

// WithSafetyCheck(false) turns off the checks a Client runs once, in the
// background, at its first acquisition: those of package doctor (eviction
// policy, persistence, scripting and pub/sub permissions, version,
// replicas), each failed one logged as a warning, on the WithLogger logger
// or else slog.Default(). They are on by default, because a Redis that
// evicts or loses lock keys breaks mutual exclusion without any error.
func WithSafetyCheck(on bool) Option {
	return func(c *config) error { c.Report = on; return nil }
}

// WithObserver adds an Observer that is told about every acquisition,
// release, renewal and loss. It may be given several times.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidArgument)
		}
		c.Observers = append(c.Observers, observe(o))
		return nil
	}
}

// WithClientID sets the id that prefixes this client's owner fields
// ("<id>:<owner>") in the lock hash. Default: "<host>/<pid>/<random>", which
// ParseClientID reads back for operators. Two live clients must never share
// an id. It must be 1 to 128 bytes of valid UTF-8 without spaces, ':' or
// control characters (C0, DEL, C1): operators' tools print it.
func WithClientID(id string) Option {
	return func(c *config) error {
		if id == "" || len(id) > 128 || !utf8.ValidString(id) {
			return fmt.Errorf("%w: client id must be 1 to 128 bytes of UTF-8", ErrInvalidArgument)
		}
		for _, r := range id {
			if r == ' ' || r == ':' || unicode.IsControl(r) {
				return fmt.Errorf("%w: client id %q contains a space, ':' or a control character", ErrInvalidArgument, id)
			}
		}
		c.ClientID = id
		return nil
	}
}

// WithHandoffClaim sets how long a lock handed straight to a waiting process
// stays valid before that process confirms it. It bounds how long a waiter
// that crashed while queued can delay the others. Default 2s; at least 10ms.
// The releasing process's setting is the one a hand-off gets, while a
// waiter that cannot pop its hand-offs looks for one four times per its
// own: give every process that shares a lock the same value (a waiter
// whose value is longer than the releaser's may find its hand-off expired
// and lose its turn).
func WithHandoffClaim(d time.Duration) Option {
	return func(c *config) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: hand-off claim %v is shorter than 10ms", ErrInvalidArgument, d)
		}
		c.Claim = d
		return nil
	}
}

// WithCloseTimeout bounds how long Close takes: telling holders, releasing
// the locks the client still holds, closing the pub/sub connection and
// waiting for background cleanups. Default 5s. Locks it could not release
// expire by their TTL.
func WithCloseTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: close timeout must be positive", ErrInvalidArgument)
		}
		c.CloseTimeout = d
		return nil
	}
}

// WithCleanupTimeout bounds the work dlock finishes in the background after
// its caller has gone: a release whose ctx had ended (Unlock still sends it),
// leaving a wait queue, giving back a grant whose caller's ctx ended while
// the reply was on its way. Default 5s. Work it could not finish in time is
// undone by the keys' TTLs.
func WithCleanupTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: cleanup timeout must be positive", ErrInvalidArgument)
		}
		c.CleanupTimeout = d
		return nil
	}
}

// withFenceTTL sets how long a fencing sequence lives (default 24h); tests
// shorten it to see sequences end.
func withFenceTTL(d time.Duration) Option {
	return func(c *config) error {
		c.FenceTTL = d
		return nil
	}
}

// withRecheck sets how often a waiter re-checks a lock on its own (default
// 3s); tests shorten or lengthen it.
func withRecheck(d time.Duration) Option {
	return func(c *config) error {
		c.Recheck = d
		return nil
	}
}

// WithSpin makes the Client's locks wait by polling instead of pub/sub: after
// a failed attempt a waiter sleeps a random time between half and all of a
// backoff that starts at min and doubles up to max (never past the holder's
// TTL or the end of the wait), then tries again. Use it where pub/sub is not
// available (some proxies and managed offerings) or not wanted; it costs a
// script call per waiter per backoff, where pub/sub mode costs about one per
// grant. Typical values: 1ms and 128ms; max is at most MaxSpinBackoff. A
// waiter that queues (a FairMutex's, a Semaphore's) polls at least four
// times per hand-off claim window (WithHandoffClaim) whatever max is: a
// hand-off to it that it does not claim in time goes to the next in line.
// The semantics are otherwise the same. A latch's waiters wait by pub/sub
// even with WithSpin.
func WithSpin(min, max time.Duration) Option {
	return func(c *config) error {
		if min < time.Microsecond*100 || max < min || max > MaxSpinBackoff {
			return fmt.Errorf("%w: spin backoff needs 100µs <= min <= max <= %v, got %v and %v", ErrInvalidArgument, MaxSpinBackoff, min, max)
		}
		c.SpinMin, c.SpinMax = min, max
		return nil
	}
}

// WithReplicaAck makes a grant count only once at least n replicas have it.
// After every new hold (not a re-entry), dlock writes to the lock key once
// more and sends WAIT n timeout on the same connection; Redis replicates in
// order, so a replica that acknowledged that write also has the grant. If
// fewer than n replicas acknowledge within timeout, the hold is released and
// the acquisition fails with an error wrapping ErrNotReplicated.
//
// This narrows, but does not close, the window in which a failover loses a
// lock: a grant acknowledged by n replicas survives the promotion of any of
// them, but Redis replication stays asynchronous (see the package doc). It
// costs one round trip and the replication delay per grant. Default: off.
func WithReplicaAck(n int, timeout time.Duration) Option {
	return func(c *config) error {
		if n < 1 || timeout <= 0 {
			return fmt.Errorf("%w: replica ack needs n >= 1 and a positive timeout, got %d and %v", ErrInvalidArgument, n, timeout)
		}
		c.Replicas, c.ReplicaTimeout = n, timeout
		return nil
	}
}
