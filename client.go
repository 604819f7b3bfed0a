package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/notify"
	"github.com/dlock-dev/dlock/internal/renew"
)

// Client hands out lock handles that share one Redis client, one pub/sub
// connection and one watchdog. A Client is safe for concurrent use; create one
// per process (per Redis deployment) and Close it on shutdown.
type Client struct {
	rdb     redis.UniversalClient
	cfg     config
	id      string
	hub     *notify.Hub
	renewer *renew.Renewer
	owners  atomic.Uint64
	reqs    atomic.Uint64
	closed  atomic.Bool

	args boxedArgs

	mu    sync.Mutex
	holds map[*hold]struct{} // every live hold, for Close
}

// boxedArgs are script arguments that never change for a Client, converted
// to interfaces once rather than on every call.
type boxedArgs struct {
	watchdogMs, queueTTLMs, fenceTTLMs, claimMs, latchTTLMs any
	writerWaitMs                                            any // how long a waiting writer holds readers back unless it re-checks
}

// New returns a Client that locks through rdb (a *redis.Client, a Sentinel
// failover client or a *redis.ClusterClient). It makes no network call; rdb
// stays owned by the caller and is not closed by Close.
func New(rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidArgument)
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
	if cfg.clientID == "" {
		cfg.clientID = defaultClientID()
	}
	c := &Client{
		rdb:   rdb,
		cfg:   cfg,
		id:    cfg.clientID,
		holds: make(map[*hold]struct{}),
	}
	c.args = boxedArgs{
		watchdogMs: ms(cfg.watchdog),
		queueTTLMs: ms(4 * cfg.recheck),
		fenceTTLMs: ms(cfg.fenceTTL),
		claimMs:    ms(cfg.claim),
		latchTTLMs: ms(cfg.latchTTL),

		writerWaitMs: ms(cfg.recheck + cfg.claim),
	}
	c.hub = notify.New(rdb, keys.ClientChannel(c.id), cfg.linger, cfg.logger)
	c.hub.ReadyTimeout = cfg.recheck
	var slot func(string) uint16
	if _, ok := rdb.(*redis.ClusterClient); ok {
		slot = keys.Slot
	}
	c.renewer = renew.New(cfg.watchdog/3, c.renewBatch, slot)
	c.renewer.Failed = func(n int, err error) {
		cfg.logger.Warn("dlock: renewal failed; will retry", "locks", n, "err", err)
		for _, o := range cfg.observers {
			o.Renewed(n, err)
		}
	}
	c.renewer.Batched = func(n int) {
		for _, o := range cfg.observers {
			o.Renewed(n, nil)
		}
	}
	return c, nil
}

// ID returns the client id that prefixes this client's owner fields.
func (c *Client) ID() string { return c.id }

// Mutex returns a handle on the reentrant lock name. Each call returns a new
// handle, and each handle is one owner: locking the same handle again
// re-enters, two handles on one name exclude each other. A handle is safe for
// concurrent use, but goroutines sharing it share its ownership. An invalid
// name is reported by the handle's first method call.
func (c *Client) Mutex(name string) *Mutex {
	return newMutex(c, name)
}

// Close stops the watchdog and the pub/sub connection, wakes every waiter
// with ErrClosed, tells every holder that its hold ended (Done closes, Err
// and the WithLock context's cause wrap ErrLockLost and ErrClosed), and then
// releases the locks the client still holds, spending at most the close
// timeout (WithCloseTimeout, default 5s) on the releases; go-redis may add up
// to its own dial and read timeouts to a call against a server that does
// not answer. Locks it could not release expire by their TTL. Close is
// idempotent and safe to call concurrently with lock operations, which then
// fail with ErrClosed.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.renewer.Stop()
	hubErr := c.hub.Close()

	c.mu.Lock()
	holds := make([]*hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.closeBudget)
	defer cancel()
	var errs []error
	for _, h := range holds {
		if err := h.mu.closeRelease(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if hubErr != nil && !errors.Is(hubErr, redis.ErrClosed) {
		errs = append(errs, hubErr)
	}
	return errors.Join(errs...)
}

// track registers a live hold for Close; it refuses (false) once Close has
// begun, so that no hold escapes Close's release.
func (c *Client) track(h *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	c.holds[h] = struct{}{}
	return true
}

func (c *Client) untrack(h *hold) {
	c.mu.Lock()
	delete(c.holds, h)
	c.mu.Unlock()
}

// nextRequest numbers a release call; with the owner field it makes the
// request id the unlock latch remembers.
func (c *Client) nextRequest() uint64 { return c.reqs.Add(1) }

func (c *Client) renewBatch(ctx context.Context, ks, fields []string, ttls []int64) ([]bool, error) {
	boxedKeys := make([]any, 0, 2*len(ks))
	args := make([]any, 3*len(ks))
	for i, k := range ks {
		kind, field, set := parseRenewField(fields[i])
		if set == "" {
			set = k
		}
		boxedKeys = append(boxedKeys, k, set)
		args[i], args[len(ks)+i], args[2*len(ks)+i] = field, ttls[i], kind
	}
	res, err := scriptRenew.run(ctx, c.rdb, boxedKeys, args...).Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(ks) {
		return nil, fmt.Errorf("dlock: renew returned %d results for %d locks", len(res), len(ks))
	}
	out := make([]bool, len(res))
	for i, v := range res {
		out[i] = v == int64(1)
	}
	return out, nil
}

// renewField encodes a hold's renewal for renewBatch in renew.Entry's Field:
// a Mutex's is its owner field ("<client id>:<owner id>", without a space);
// a read-write lock's is "<kind> <field> <read-deadline set key>", kind 'r'
// or 'w' (owner fields have no space; the key may).
func renewField(kind byte, field, set string) string {
	return string(kind) + " " + field + " " + set
}

func parseRenewField(f string) (kind, field, set string) {
	if len(f) > 2 && f[1] == ' ' {
		if rest := f[2:]; strings.IndexByte(rest, ' ') > 0 {
			i := strings.IndexByte(rest, ' ')
			return f[:1], rest[:i], rest[i+1:]
		}
	}
	return "m", f, ""
}

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// defaultClientID returns "<host>/<pid>/<16 hex digits>": unique among live
// clients (64 random bits on top of host and process), and telling an
// operator who inspects a lock which host and process holds it (see
// ParseClientID). Redisson uses a random UUID for the same purpose.
func defaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r == ':' || r == '/' || r == 0x7f {
			return '_'
		}
		return r
	}, host)
	if len(host) > 64 {
		host = host[:64]
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}

// ParseClientID splits a client id made by New's default,
// "<host>/<pid>/<random>", into its host and process id; ok is false for an
// id set with WithClientID in another form (a Redisson UUID, say). An owner
// field "<client id>:<n>" (Holder.Owner) is accepted as well. Safe for
// concurrent use.
func ParseClientID(id string) (host string, pid int, ok bool) {
	if i := strings.LastIndexByte(id, ':'); i >= 0 {
		id = id[:i]
	}
	parts := strings.Split(id, "/")
	if len(parts) != 3 || parts[0] == "" || len(parts[2]) != 16 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return "", 0, false
	}
	return parts[0], pid, true
}
