package dlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scriptTouch rewrites the lock's TTL to its current value: a write that
// changes nothing, but enters the replication stream after the grant.
var scriptTouch = newScript(`
local ttl = redis.call('pttl', KEYS[1])
if ttl > 0 then
  redis.call('pexpire', KEYS[1], ttl)
  return 1
end
return 0`)

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
		c.replicas, c.replicaTimeout = n, timeout
		return nil
	}
}

// confirmReplicas waits until the configured number of replicas have the
// hold just granted, or returns an error wrapping ErrNotReplicated. It
// returns as soon as ctx is done.
func (h *hold) confirmReplicas(ctx context.Context) error {
	c := h.c
	cfg := &c.cfg
	ok, _, err := roundTrip(c, ctx, func(ctx context.Context) (error, error) {
		// WAIT counts the writes of its own connection: the touch and the
		// WAIT must share one, on the node that owns the key.
		var node redis.Cmdable = c.rdb
		if cc, ok := c.rdb.(*redis.ClusterClient); ok {
			n, err := cc.MasterForKey(ctx, h.ks.Lock)
			if err != nil {
				return nil, err
			}
			node = n
		}
		var touched, acks *redis.Cmd
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			touched = p.Eval(ctx, scriptTouch.src.(string), []string{h.ks.Lock})
			acks = p.Do(ctx, "wait", cfg.replicas, cfg.replicaTimeout.Milliseconds())
			return nil
		})
		if err != nil {
			return nil, err
		}
		if v, _ := touched.Int64(); v != 1 {
			return fmt.Errorf("%w: the lock was gone before it could be confirmed", ErrNotReplicated), nil
		}
		if got, _ := acks.Int64(); got < int64(cfg.replicas) {
			return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, got, cfg.replicas, cfg.replicaTimeout), nil
		}
		return nil, nil
	}, nil)
	if err != nil {
		return err
	}
	return ok
}
