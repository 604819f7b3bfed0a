package notify

import (
	"github.com/dlock-dev/dlock/internal/shardsub"
)

// Sharded pub/sub (Config.Sharded): every channel is a shard channel,
// subscribed with SSUBSCRIBE on the master of its slot by a
// shardsub.Subscriber, which follows the slot through migrations, failovers
// and dropped connections. A message stays in its shard: a release's "0"
// on the channel keys.ShardChannel names in the lock's slot, and a
// hand-off on the client channel of the lock's slot
// (keys.ShardClientChannel), so a client has a channel per slot it waits
// in. A channel subscribed again after it was lost wakes its waiters
// to re-check, since a message sent in between is lost.

// startSharded starts the sharded subscriber. The caller holds h.mu.
func (h *Hub) startSharded() {
	if h.shard != nil {
		return
	}
	h.listening.Store(true)
	h.shard = shardsub.New(h.sharded, shardsub.Config{Handler: h.onShard, Log: h.log})
}

// onShard is the sharded subscriber's handler: it never blocks.
func (h *Hub) onShard(ev shardsub.Event) {
	switch ev.Kind {
	case shardsub.Message:
		h.dispatch(ev.Channel, ev.Payload)
	case shardsub.Subscribed:
		h.confirmed(ev.Channel, false)
	case shardsub.Resubscribed:
		h.confirmed(ev.Channel, true)
	}
}

// shardOp applies a subscription change at once: the sharded subscriber
// queues it and never blocks. The caller holds h.mu.
func (h *Hub) shardOp(op subOp) {
	if op.unsubscribe {
		h.shard.Unsubscribe(op.channels...)
		return
	}
	if err := h.shard.Subscribe(op.channels...); err != nil {
		h.log.Debug("dlock: sharded subscribe failed", "channels", op.channels, "err", err)
	}
}

// wakeChannel wakes every waiter of the channel name after a subscription
// was lost and restored: the waiters of a lock channel, or those whose
// hand-offs come on a slot's client channel. The caller holds h.mu.
func (h *Hub) wakeChannel(name string, ch *channel) {
	for _, w := range ch.waiters {
		w.wake()
	}
	for _, w := range h.tickets {
		if w.clientCh == name {
			w.wake()
		}
	}
}
