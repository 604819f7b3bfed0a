package shardsub

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// waitTimeout bounds every wait for an event: generous, since the machine
// is shared and a failover takes seconds.
const waitTimeout = 20 * time.Second

// recorder is a Handler that keeps every event.
type recorder struct {
	mu     sync.Mutex
	evs    []Event
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) handle(ev Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

// mark returns the number of events so far, for wait and count.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.evs)
}

// count returns how many events since mark match.
func (r *recorder) count(mark int, match func(Event) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ev := range r.evs[mark:] {
		if match(ev) {
			n++
		}
	}
	return n
}

// wait waits for an event since mark that matches.
func (r *recorder) wait(t *testing.T, mark int, what string, match func(Event) bool) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for r.count(mark, match) == 0 {
		select {
		case <-r.notify:
		case <-deadline.C:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("no %s within %v; events since mark: %v", what, waitTimeout, r.evs[mark:])
		}
	}
}

func is(kind Kind, channel string) func(Event) bool {
	return func(ev Event) bool { return ev.Kind == kind && ev.Channel == channel }
}

func msg(channel, payload string) func(Event) bool {
	return func(ev Event) bool {
		return ev.Kind == Message && ev.Channel == channel && ev.Payload == payload
	}
}

// waitSubscribed waits for a Subscribed or Resubscribed of each channel
// since mark.
func (r *recorder) waitSubscribed(t *testing.T, mark int, channels ...string) {
	t.Helper()
	for _, ch := range channels {
		r.wait(t, mark, "subscription of "+ch, func(ev Event) bool {
			return ev.Channel == ch && (ev.Kind == Subscribed || ev.Kind == Resubscribed)
		})
	}
}

// owners returns the master address of every slot, as a node sees it.
func owners(t *testing.T, node *testenv.Redis) map[uint16]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	v, err := node.Do(ctx, "CLUSTER", "SLOTS")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[uint16]string)
	for _, e := range v.([]any) {
		r := e.([]any)
		m := r[2].([]any)
		addr := fmt.Sprintf("%s:%d", m[0], m[1])
		for s := r[0].(int64); s <= r[1].(int64); s++ {
			out[uint16(s)] = addr
		}
	}
	return out
}

// channelOn returns a channel name with prefix whose slot is served by
// addr and is none of avoid's slots.
func channelOn(t *testing.T, own map[uint16]string, addr, prefix string, avoid ...string) string {
	t.Helper()
	for i := 0; i < 100000; i++ {
		ch := prefix + strconv.Itoa(i)
		slot := keys.Slot(ch)
		if own[slot] != addr {
			continue
		}
		clash := false
		for _, a := range avoid {
			clash = clash || keys.Slot(a) == slot
		}
		if !clash {
			return ch
		}
	}
	t.Fatalf("no channel on %s", addr)
	return ""
}

// shardNumSub returns PUBSUB SHARDNUMSUB channel on node: its subscribers
// there.
func shardNumSub(t *testing.T, node *testenv.Redis, channel string) int64 {
	t.Helper()
	v, err := node.Do(context.Background(), "PUBSUB", "SHARDNUMSUB", channel)
	if err != nil {
		t.Fatal(err)
	}
	return v.([]any)[1].(int64)
}

// pubsubClients returns how many pub/sub connections node has.
func pubsubClients(t *testing.T, node *testenv.Redis) int {
	t.Helper()
	v, err := node.Do(context.Background(), "CLIENT", "LIST", "TYPE", "pubsub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(v.(string), "\n")
}

// publish SPUBLISHes payload on channel and waits for r to receive it.
func publish(t *testing.T, cc *redis.ClusterClient, r *recorder, channel, payload string) {
	t.Helper()
	mark := r.mark()
	if err := cc.SPublish(context.Background(), channel, payload).Err(); err != nil {
		t.Fatalf("SPUBLISH %s: %v", channel, err)
	}
	r.wait(t, mark, "message "+payload+" on "+channel, msg(channel, payload))
}

// byAddr returns the node with address addr.
func byAddr(t *testing.T, nodes []*testenv.Redis, addr string) *testenv.Redis {
	t.Helper()
	for _, n := range nodes {
		if n.Addr() == addr {
			return n
		}
	}
	t.Fatalf("no node %s", addr)
	return nil
}

// clusterInfo returns CLUSTER INFO's integer fields on node.
func clusterInfo(t *testing.T, node *testenv.Redis) map[string]int64 {
	t.Helper()
	v, err := node.Do(context.Background(), "CLUSTER", "INFO")
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]int64)
	for _, line := range strings.Split(v.(string), "\n") {
		k, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}
