package lease

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/wire"
)

// confirmReplicas waits until the configured number of replicas have the
// lease just granted, or returns an error wrapping ErrNotReplicated. It
// returns as soon as ctx is done.
func (h *Lease) confirmReplicas(ctx context.Context) error {
	cfg := &h.e.Cfg
	key := h.p.Key()
	ok, _, err := wire.Go(h.e.Wire, ctx, func(ctx context.Context) (error, error) {
		// WAIT counts the writes of its own connection: the touch and the
		// WAIT must share one, on the node that owns the key.
		var node redis.Cmdable = h.e.rdb
		if cc, ok := h.e.rdb.(*redis.ClusterClient); ok {
			n, err := cc.MasterForKey(ctx, key)
			if err != nil {
				return nil, err
			}
			node = n
		}
		var touched, acks *redis.Cmd
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			touched = cfg.Touch.Eval(ctx, p, []string{key}, h.field)
			acks = p.Do(ctx, "wait", cfg.Replicas, cfg.ReplicaTimeout.Milliseconds())
			return nil
		})
		if err != nil {
			return nil, err
		}
		if v, _ := touched.Int64(); v != 1 {
			// Gone already, or (after a failover) this node never had
			// our grant: either way no replica can vouch for it.
			return fmt.Errorf("%w: the hold was not on the primary when it was confirmed", ErrNotReplicated), nil
		}
		if got, _ := acks.Int64(); got < int64(cfg.Replicas) {
			return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, got, cfg.Replicas, cfg.ReplicaTimeout), nil
		}
		return nil, nil
	}, nil)
	if err != nil {
		return err
	}
	return ok
}
