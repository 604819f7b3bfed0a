package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestOwnershipModel drives the public API at random from several Clients
// and goroutines (shared and private handles, Mutex, FairMutex and both
// sides of an RWMutex, re-entry, downgrades, fixed leases, MaxHold, spin
// mode, cancelled and expiring contexts) and checks at every grant that no
// other live hold conflicts with it (a fenced resource: a new exclusive
// grant's token is above every earlier grant's) and that Redis agrees
// (Inspect: the holder, its count, the mode). A hold is live until its
// context ends or its Unlock begins.
//
// DLOCK_MODEL_SEED replays a seed (printed on failure); DLOCK_MODEL_STEPS
// sets the steps per goroutine.
func TestOwnershipModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DLOCK_MODEL_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("DLOCK_MODEL_SEED: %v", err)
		}
		seed = v
	}
	steps := 120
	if s := os.Getenv("DLOCK_MODEL_STEPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("DLOCK_MODEL_STEPS: %v", err)
		}
		steps = v
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with DLOCK_MODEL_SEED=%d DLOCK_MODEL_STEPS=%d", seed, steps)
		}
	})
	wd := 600 * time.Millisecond
	clients := []*Client{
		newClient(t, shared, WithWatchdogTimeout(wd)),
		newClient(t, shared, WithWatchdogTimeout(wd), WithMaxHold(250*time.Millisecond)),
		newClient(t, shared, WithWatchdogTimeout(wd), WithSpin(time.Millisecond, 8*time.Millisecond)),
	}
	prefix := fmt.Sprintf("model:%d:", seed)
	mc := &modelChecker{t: t, max: map[string]uint64{}, live: map[string][]*modelHold{}}
	shareds := make([]map[string]any, len(clients))
	for i := range shareds {
		shareds[i] = map[string]any{}
	}
	var mu sync.Mutex // guards shareds
	handle := func(r *rand.Rand, ci int, name string) any {
		private := r.IntN(3) == 0 // looked up again: the Client returns its one handle of the name (issue 32)
		mu.Lock()
		defer mu.Unlock()
		if h, ok := shareds[ci][name]; ok && !private {
			return h
		}
		c := clients[ci]
		var h any
		switch {
		case strings.HasSuffix(name, "fair"):
			h = c.FairMutex(name)
		case strings.HasSuffix(name, "rw"):
			h = c.RWMutex(name)
		default:
			h = c.Mutex(name)
		}
		if !private {
			shareds[ci][name] = h
		}
		return h
	}
	names := []string{prefix + "m1", prefix + "m2", prefix + "fair", prefix + "rw"}
	const workers = 6
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			wk := &modelWorker{t: t, r: r, mc: mc, clients: clients, handle: handle, names: names, id: w}
			for step := range steps {
				if t.Failed() {
					return
				}
				wk.step(step)
			}
		}()
	}
	wg.Wait()
	t.Logf("seed %d: %d grants checked, %d Inspect checks, %d losses seen", seed, mc.grants, mc.inspected, mc.losses)
}

// modelHold is one live hold the model knows of.
type modelHold struct {
	name    string
	excl    bool
	token   uint64
	ctx     context.Context
	outer   *modelHold // the write hold a downgrade was taken under
	what    string
	removed bool
}

type modelChecker struct {
	t                         *testing.T
	mu                        sync.Mutex
	max                       map[string]uint64 // the highest token granted per name
	live                      map[string][]*modelHold
	grants, inspected, losses int
}

// grant registers h and checks it against every other live hold of its
// name. A hold whose holder is about to be told of its loss may still look
// live for a moment (the loss is declared by a timer): it is given a grace
// before it counts as a conflict.
func (mc *modelChecker) grant(h *modelHold) {
	if h.ctx.Err() != nil {
		return // ended before it could be registered: it guards nothing
	}
	for {
		mc.mu.Lock()
		var conflict *modelHold
		for _, o := range mc.live[h.name] {
			if o.removed || o.ctx.Err() != nil || o == h.outer {
				continue
			}
			if h.excl || o.excl {
				conflict = o
				break
			}
		}
		if conflict == nil {
			if h.excl && h.token <= mc.max[h.name] {
				mc.t.Errorf("fencing: %s got token %d, not above %d granted before", h.what, h.token, mc.max[h.name])
			}
			if !h.excl && h.outer == nil {
				for _, o := range mc.live[h.name] {
					if o.excl && !o.removed && o.ctx.Err() == nil && o.token > h.token {
						mc.t.Errorf("fencing: reader %s token %d below live writer %d", h.what, h.token, o.token)
					}
				}
			}
			mc.max[h.name] = max(mc.max[h.name], h.token)
			mc.live[h.name] = append(mc.live[h.name], h)
			mc.grants++
			mc.mu.Unlock()
			return
		}
		mc.mu.Unlock()
		select {
		case <-conflict.ctx.Done():
			continue
		case <-time.After(500 * time.Millisecond):
		}
		if conflict.ctx.Err() == nil && h.ctx.Err() == nil && !conflict.removed {
			mc.t.Errorf("exclusion: %s (token %d) granted while %s (token %d) is live", h.what, h.token, conflict.what, conflict.token)
			return
		}
	}
}

// release takes h out before its Unlock is sent.
func (mc *modelChecker) release(h *modelHold) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	h.removed = true
	l := mc.live[h.name]
	for i, o := range l {
		if o == h {
			mc.live[h.name] = append(l[:i], l[i+1:]...)
			break
		}
	}
}

type modelWorker struct {
	t       *testing.T
	r       *rand.Rand
	mc      *modelChecker
	clients []*Client
	handle  func(*rand.Rand, int, string) any
	names   []string
	id      int
}

// callCtx is a context for one call: live, already cancelled with a cause,
// or ending within a few milliseconds.
func (w *modelWorker) callCtx(parent context.Context) (context.Context, func(), string) {
	switch w.r.IntN(12) {
	case 0:
		ctx, cancel := context.WithCancelCause(parent)
		cancel(errModelCause)
		return ctx, func() {}, "cancelled"
	case 1:
		ctx, cancel := context.WithTimeout(parent, time.Duration(1+w.r.IntN(5))*time.Millisecond)
		return ctx, cancel, "expiring"
	}
	return parent, func() {}, "live"
}

var errModelCause = errors.New("model: cancelled")

func (w *modelWorker) lease() time.Duration {
	if w.r.IntN(2) == 0 {
		return 0
	}
	return time.Duration(20+w.r.IntN(200)) * time.Millisecond
}

// checkErr checks what a lock call answered for the context it was given.
func (w *modelWorker) checkErr(what, kind string, ctx context.Context, err error) {
	switch {
	case err == nil:
	case kind == "cancelled" && !(errors.Is(err, context.Canceled) && errors.Is(err, errModelCause)):
		w.t.Errorf("%s with a cancelled ctx: %v", what, err)
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		w.t.Errorf("%s: the wait's deadline reported as the ctx's: %v", what, err)
	case ctx.Err() == nil && !errors.Is(err, ErrWaitTimeout) && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrUnavailable):
		w.t.Errorf("%s with a live ctx: %v", what, err)
	}
}

func (w *modelWorker) step(step int) {
	ci := w.r.IntN(len(w.clients))
	name := w.names[w.r.IntN(len(w.names))]
	h := w.handle(w.r, ci, name)
	base, cancelBase := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelBase()
	ctx, cancel, kind := w.callCtx(base)
	defer cancel()
	wait := time.Duration(w.r.IntN(20)) * time.Millisecond
	lease := w.lease()
	what := fmt.Sprintf("w%d/s%d c%d %s", w.id, step, ci, name)
	switch m := h.(type) {
	case *RWMutex:
		if w.r.IntN(2) == 0 {
			rctx, err := m.ReadContext(ctx, wait, lease)
			w.checkErr(what+" read", kind, ctx, err)
			if err == nil {
				w.hold(m.RUnlock, nil, &modelHold{name: name, token: TokenFrom(rctx), ctx: rctx, what: what + " read"}, w.clients[ci], "")
			}
			return
		}
		wctx, err := m.WriteContext(ctx, wait, lease)
		w.checkErr(what+" write", kind, ctx, err)
		if err != nil {
			return
		}
		wh := &modelHold{name: name, excl: true, token: TokenFrom(wctx), ctx: wctx, what: what + " write"}
		w.hold(m.Unlock, func(hctx context.Context) (context.Context, error) { return m.WriteContext(hctx, 0, w.lease()) }, wh, w.clients[ci], ":write")
	case *FairMutex:
		w.mutexStep(&m.Mutex, ctx, kind, wait, lease, what, w.clients[ci])
	case *Mutex:
		w.mutexStep(m, ctx, kind, wait, lease, what, w.clients[ci])
	}
}

func (w *modelWorker) mutexStep(m *Mutex, ctx context.Context, kind string, wait, lease time.Duration, what string, c *Client) {
	if w.r.IntN(4) == 0 {
		// WithLock, nested at times.
		err := c.WithLock(ctx, m.Name(), func(fctx context.Context) error {
			h := &modelHold{name: m.Name(), excl: true, token: TokenFrom(fctx), ctx: fctx, what: what + " WithLock"}
			w.mc.grant(h)
			defer w.mc.release(h)
			if w.r.IntN(2) == 0 {
				_ = c.WithLock(fctx, m.Name(), func(inner context.Context) error {
					if TokenFrom(inner) != h.token {
						w.t.Errorf("%s: nested WithLock carries token %d, want %d", what, TokenFrom(inner), h.token)
					}
					time.Sleep(time.Duration(w.r.IntN(10)) * time.Millisecond)
					return nil
				}, WaitTime(0))
			}
			time.Sleep(time.Duration(w.r.IntN(10)) * time.Millisecond)
			return nil
		}, WaitTime(wait), LeaseTime(lease))
		w.checkErr(what+" WithLock", kind, ctx, err)
		return
	}
	hctx, err := m.TryLockContext(ctx, wait, lease)
	w.checkErr(what+" lock", kind, ctx, err)
	if err != nil {
		return
	}
	h := &modelHold{name: m.Name(), excl: true, token: TokenFrom(hctx), ctx: hctx, what: what + " lock"}
	w.hold(m.Unlock, func(x context.Context) (context.Context, error) { return m.TryLockContext(x, 0, w.lease()) }, h, c, "")
}

// hold runs a hold's life: registered, checked against Inspect, re-entered
// (and for a writer, downgraded) at random, then unlocked as many times as
// it was entered.
func (w *modelWorker) hold(unlock func(context.Context) error, reenter func(context.Context) (context.Context, error), h *modelHold, c *Client, suffix string) {
	w.mc.grant(h)
	w.inspect(c, h, 1, suffix)
	count := 1
	var downgrades []context.Context
	for reenter != nil && w.r.IntN(3) == 0 {
		x := context.Context(h.ctx)
		if w.r.IntN(4) == 0 {
			x = context.WithoutCancel(h.ctx) // re-entering a hold that may be lost
		}
		rctx, err := reenter(x)
		switch {
		case err == nil && TokenFrom(rctx) != h.token:
			w.t.Errorf("%s: re-entry carries token %d, want %d", h.what, TokenFrom(rctx), h.token)
		case err == nil:
			count++
			w.inspect(c, h, count, suffix)
		case h.ctx.Err() == nil && !errors.Is(err, ErrLockLost):
			w.t.Errorf("%s: re-entry of a live hold: %v", h.what, err)
		}
	}
	if suffix == ":write" && w.r.IntN(2) == 0 {
		rw := c.RWMutex(h.name)
		for range 1 + w.r.IntN(2) {
			rctx, err := rw.ReadContext(h.ctx, 0, w.lease())
			if err != nil {
				if h.ctx.Err() == nil {
					w.t.Errorf("%s: downgrade: %v", h.what, err)
				}
				continue
			}
			w.mc.grant(&modelHold{name: h.name, token: TokenFrom(rctx), ctx: rctx, outer: h, what: h.what + " downgrade"})
			downgrades = append(downgrades, rctx)
		}
		defer func() {
			for _, d := range downgrades {
				time.Sleep(time.Duration(w.r.IntN(20)) * time.Millisecond)
				if err := rw.RUnlock(context.WithoutCancel(d)); err != nil && !errors.Is(err, ErrLockLost) {
					w.t.Errorf("%s: RUnlock of a downgrade: %v", h.what, err)
				}
			}
		}()
	}
	time.Sleep(time.Duration(w.r.IntN(120)) * time.Millisecond)
	// The hold's ctx also ends with the call's ctx (an expiring one): only a
	// loss is a loss.
	lost := errors.Is(context.Cause(h.ctx), ErrLockLost)
	if lost {
		w.mc.mu.Lock()
		w.mc.losses++
		w.mc.mu.Unlock()
	}
	w.mc.release(h)
	for i := range count {
		err := unlock(context.WithoutCancel(h.ctx))
		switch {
		case lost && err == nil:
			w.t.Errorf("%s: Unlock %d/%d of a lost hold answered nil", h.what, i+1, count)
		case !lost && err != nil && !errors.Is(err, ErrLockLost):
			w.t.Errorf("%s: Unlock %d/%d: %v", h.what, i+1, count, err)
		}
	}
}

// inspect checks that Redis has the hold as the model does, when the hold
// was live before and after the look.
func (w *modelWorker) inspect(c *Client, h *modelHold, count int, suffix string) {
	if h.ctx.Err() != nil {
		return
	}
	info, err := c.Inspect(context.Background(), h.name)
	if err != nil {
		w.t.Errorf("Inspect %s: %v", h.name, err)
		return
	}
	if h.ctx.Err() != nil {
		return
	}
	w.mc.mu.Lock()
	w.mc.inspected++
	w.mc.mu.Unlock()
	if !info.Locked || info.Token < h.token {
		w.t.Errorf("%s: Inspect disagrees: %+v", h.what, info)
		return
	}
	if !h.excl {
		if info.Mode == "write" && h.outer == nil {
			w.t.Errorf("%s: a reader's lock is in write mode: %+v", h.what, info)
		}
		return
	}
	var mine []Holder
	for _, ho := range info.Holders {
		if strings.HasSuffix(ho.Owner, ":write") || suffix == "" {
			mine = append(mine, ho)
		}
	}
	if len(mine) != 1 || mine[0].Count != int64(count) || (suffix == ":write" && info.Mode != "write") {
		w.t.Errorf("%s: Redis has %+v; the model has one exclusive holder, count %d", h.what, info, count)
	}
}
