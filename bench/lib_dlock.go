//go:build !nodlock

// Built by default; -tags nodlock leaves dlock out (for when the parent
// module does not compile mid-change: the peers still run).

package main

import (
	"time"

	"context"

	"github.com/dlock-dev/dlock"
	"github.com/redis/go-redis/v9"
)

// dlockVariant is one configuration of the library under development. Each
// variant is registered as its own Lib and shows up as its own row in every
// table and in the chart.
type dlockVariant struct {
	name     string // row label, must be unique among all Libs
	settings string // shown in RESULTS.md
	opts     func() []dlock.Option
	// handle returns the lock handle for one acquisition; nil = c.Mutex.
	handle func(c *dlock.Client, name string) dlock.Locker
}

// dlockVariants is the hook for dlock's modes (scenario e).
//
// To benchmark another mode, append an entry; nothing else needs changing
// (scenarios iterate the registry, -libs selects rows by name, the tables
// and the chart grow a row). For example, with the options and lock kinds
// the library has today:
//
//	{name: "dlock-fair", settings: "FairMutex: FIFO hand-off, no barging",
//		opts: func() []dlock.Option { return nil },
//		handle: func(c *dlock.Client, name string) dlock.Locker { return c.FairMutex(name) }},
//	{name: "dlock-spin", settings: "WithSpin(1ms, 128ms): polling instead of pub/sub",
//		opts: func() []dlock.Option { return []dlock.Option{dlock.WithSpin(time.Millisecond, 128*time.Millisecond)} }},
//
// Each extra row adds about 30 s to the default quick set.
var dlockVariants = []dlockVariant{
	{name: "dlock", settings: "dlock.New(go-redis client with defaults) with no options (pub/sub wake-ups, watchdog mode, concurrent calls of the Client pipelined); Mutex(name) per acquisition, Lock/Unlock",
		opts: func() []dlock.Option { return nil }},
	{name: "dlock-fair", settings: "as dlock, FairMutex(name): FIFO hand-off, no barging",
		opts:   func() []dlock.Option { return nil },
		handle: func(c *dlock.Client, name string) dlock.Locker { return c.FairMutex(name) }},
	{name: "dlock-spin", settings: "as dlock, WithSpin(1ms, 128ms): jittered exponential backoff instead of pub/sub",
		opts: func() []dlock.Option { return []dlock.Option{dlock.WithSpin(time.Millisecond, 128*time.Millisecond)} }},
}

func init() {
	dlockBuilt = true
	for _, v := range dlockVariants {
		register(dlockLib{v})
	}
}

type dlockLib struct{ v dlockVariant }

func (l dlockLib) Name() string     { return l.v.name }
func (l dlockLib) Module() string   { return "github.com/dlock-dev/dlock" }
func (l dlockLib) Settings() string { return l.v.settings }

func (l dlockLib) NewClient(addr string) (Client, error) {
	c, err := newDlockClient(addr, l.v.opts()...)
	if err != nil {
		return nil, err
	}
	c.handle = l.v.handle
	return c, nil
}

// NewRenewingClient implements renewingLib: the variant's options plus
// WithWatchdogTimeout(ttl); dlock renews watchdog-mode holds every third of
// it, in batched script calls.
func (l dlockLib) NewRenewingClient(addr string, ttl time.Duration) (Client, time.Duration, error) {
	c, err := newDlockClient(addr, append(l.v.opts(), dlock.WithWatchdogTimeout(ttl))...)
	if err != nil {
		return nil, 0, err
	}
	c.handle = l.v.handle
	return c, ttl / 3, nil
}

func newDlockClient(addr string, opts ...dlock.Option) (*dlockClient, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return &dlockClient{rdb: rdb, c: c}, nil
}

type dlockClient struct {
	rdb    *redis.Client
	c      *dlock.Client
	handle func(c *dlock.Client, name string) dlock.Locker
}

func (c *dlockClient) Acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	// One handle per acquisition: a dlock handle is one (reentrant) owner,
	// so goroutines that must exclude each other need handles of their own.
	var m dlock.Locker
	if c.handle != nil {
		m = c.handle(c.c, key)
	} else {
		m = c.c.Mutex(key)
	}
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return m.Unlock, nil
}

func (c *dlockClient) Close() error {
	err := c.c.Close()
	if e := c.rdb.Close(); err == nil {
		err = e
	}
	return err
}

// Ping implements Pinger, through the client the locks use.
func (c *dlockClient) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }
