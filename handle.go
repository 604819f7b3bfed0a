package dlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
)

// handle is what every lock handle shares: the name, its keys, the protocol
// of its kind, and the state of its holds. An exclusive handle (Mutex,
// FairMutex, an RWMutex's write side) admits one holder at a time through
// its gate, as sync.Mutex does; a shared one (the read side) admits many.
type handle struct {
	c       *Client
	name    string
	p       protocol
	ks      keys.Set // a Mutex's has no Channel until a waiter needs it (channel)
	keys    []any    // the scripts' keys: pointers into ks, boxed without allocating
	keyBuf  [5]any
	nameErr error
	gate    gate // exclusive handles: held while a hold occupies the handle

	mu     sync.Mutex
	cur    []*hold // unfinished holds taken through the handle (at most one when exclusive)
	curBuf [1]*hold
	last   *hold // the most recent hold, for Token, Done and Err after it ended
}

func (hd *handle) init(c *Client, name string, p protocol) {
	hd.c, hd.name, hd.p = c, name, p
	hd.cur = hd.curBuf[:0]
	if err := keys.Validate(name); err != nil {
		hd.nameErr = fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		return
	}
	switch p.(type) {
	case mutexProtocol:
		hd.ks = keys.ForMutex(name)
		hd.keyBuf = [5]any{&hd.ks.Lock, &hd.ks.Fence, &hd.ks.Queue, &hd.ks.Forced}
		hd.keys = hd.keyBuf[:4]
	default:
		hd.ks = keys.For(name)
		hd.keyBuf = [5]any{&hd.ks.Lock, &hd.ks.Fence, &hd.ks.Readers, &hd.ks.Writers, &hd.ks.Forced}
		hd.keys = hd.keyBuf[:5]
	}
}

// channel is Redisson's release channel of a Mutex's name, made the first
// time a waiter needs it.
func (hd *handle) channel() string {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.ks.Channel == "" {
		hd.ks.Channel = keys.LockChannel(hd.name)
	}
	return hd.ks.Channel
}

func (hd *handle) check(ctx context.Context, lease time.Duration) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	case hd.nameErr != nil:
		return hd.nameErr
	case lease > 0 && lease < time.Millisecond:
		return fmt.Errorf("%w: lease %v is below Redis' 1ms resolution", ErrInvalidArgument, lease)
	case hd.c.closed.Load():
		return ErrClosed
	}
	return nil
}

// inherited finds, in the holds ctx carries for this name, the one a lock
// call of this handle's kind re-enters (reenter), or the write hold a reader
// downgrades from (under). It fails for a call that would upgrade a read
// hold, or that mixes a Mutex with an RWMutex on one name.
func (hd *handle) inherited(ctx context.Context) (reenter, under *hold, err error) {
	top := holdFrom(ctx, hd.c, hd.name)
	if top == nil {
		return nil, nil, nil
	}
	_, readCall := hd.p.(readProtocol)
	_, writeCall := hd.p.(writeProtocol)
	var read, write, mutex *hold
	for h := top; h != nil; h = h.outer {
		if h.isFinished() {
			continue // released: its context no longer holds anything
		}
		switch h.p.(type) {
		case readProtocol:
			read = cmp(read, h)
		case writeProtocol:
			write = cmp(write, h)
		default:
			mutex = cmp(mutex, h)
		}
	}
	switch {
	case readCall && read != nil:
		return read, nil, nil
	case readCall && write != nil:
		return nil, write, nil
	case writeCall && write != nil:
		return write, nil, nil
	case writeCall && read != nil:
		return nil, nil, ErrUpgrade
	case !readCall && !writeCall && mutex != nil:
		return mutex, nil, nil
	}
	return nil, nil, fmt.Errorf("%w: the context holds %q as another kind of lock", ErrInvalidArgument, hd.name)
}

func cmp(found, h *hold) *hold {
	if found != nil {
		return found
	}
	return h
}

// enter takes the handle's gate, waiting until ctx is done; try only tries.
func (hd *handle) enter(ctx context.Context, try bool) (bool, error) {
	switch {
	case hd.p.shared():
		return true, nil
	case try:
		return hd.gate.tryEnter(), nil
	}
	if err := hd.gate.enter(ctx); err != nil {
		return false, err
	}
	return true, nil
}

func (hd *handle) exit() {
	if !hd.p.shared() {
		hd.gate.exit()
	}
}

// occupy records a new hold on the handle.
func (hd *handle) occupy(h *hold) {
	hd.mu.Lock()
	hd.cur = append(hd.cur, h)
	hd.last = h
	hd.mu.Unlock()
}

// vacate removes a finished hold and frees the gate it took.
func (hd *handle) vacate(h *hold) {
	hd.mu.Lock()
	for i, x := range hd.cur {
		if x == h {
			hd.cur = append(hd.cur[:i], hd.cur[i+1:]...)
			break
		}
	}
	hd.mu.Unlock()
	hd.exit()
}

// current is the hold an Unlock with ctx releases: the one ctx carries, or
// else the handle's most recent unfinished one.
func (hd *handle) current(ctx context.Context) *hold {
	for h := holdFrom(ctx, hd.c, hd.name); h != nil; h = h.outer {
		if sameKind(h.p, hd.p) && !h.isFinished() {
			return h
		}
	}
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if n := len(hd.cur); n > 0 {
		return hd.cur[n-1]
	}
	return nil
}

func sameKind(a, b protocol) bool {
	switch a.(type) {
	case readProtocol:
		_, ok := b.(readProtocol)
		return ok
	case writeProtocol:
		_, ok := b.(writeProtocol)
		return ok
	}
	_, ok := b.(mutexProtocol)
	return ok
}

// lastHold is the hold Token, Done and Err describe.
func (hd *handle) lastHold() *hold {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if n := len(hd.cur); n > 0 {
		return hd.cur[n-1]
	}
	return hd.last
}

func (hd *handle) token() uint64 {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if n := len(hd.cur); n > 0 {
		return hd.cur[n-1].token
	}
	return 0
}

func (hd *handle) doneCh() <-chan struct{} {
	if h := hd.lastHold(); h != nil {
		return h.doneCh()
	}
	return closedCh
}

func (hd *handle) err() error {
	if h := hd.lastHold(); h != nil {
		return h.lostErr()
	}
	return nil
}

// unlock releases one hold count of the hold ctx carries or, failing that,
// of the handle's current hold. The release is sent whatever ctx says, on a
// goroutine of its own bounded by the cleanup timeout; unlock returns its
// outcome, or as soon as ctx is done.
func (hd *handle) unlock(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if hd.nameErr != nil {
		return hd.nameErr
	}
	h := hd.current(ctx)
	if h == nil {
		err := ErrNotHeld
		if hd.c.closed.Load() {
			err = ErrClosed
		}
		if len(hd.c.cfg.observers) > 0 {
			hd.c.observeRelease(ctx, hd.p.kind(), hd.name)(Release{Kind: hd.p.kind(), Name: hd.name, Err: err})
		}
		return err
	}
	return hd.c.releaseDetached(ctx, h, false)
}

// idle reports whether the handle has no unfinished hold.
func (hd *handle) idle() bool {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	return len(hd.cur) == 0
}

func (h *hold) isFinished() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.finished
}
