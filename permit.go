package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock/internal/renew"
)

// Permit is one permit of a Semaphore, held from Acquire until Release or
// its loss. Like a lock's hold it is leased: renewed by the Client's
// watchdog when acquired with lease <= 0, fixed otherwise, and it ends with
// its holder (a crashed or cut-off holder's permit returns to the semaphore
// when its TTL runs out). Done and Err tell the holder that its permit ended
// without Release, by the same rules as a lock's loss (see the package doc).
//
// A Permit is safe for concurrent use; Release takes effect once.
type Permit struct {
	s     *Semaphore
	c     *Client
	id    string // "<client id>:<n>", never reused
	lease time.Duration
	done  chan struct{}

	renewal renew.Entry

	mu         sync.Mutex
	renewing   bool
	ended      bool  // done is closed
	released   bool  // the release was started
	err        error // the loss (a *LossError); nil when released
	validUntil time.Time
	until      time.Time // a fixed lease's end
	timer      *time.Timer
	renewErr   error
}

func newPermit(s *Semaphore, lease time.Duration) *Permit {
	c := s.c
	id := c.id + ":" + fmt.Sprint(c.owners.Add(1))
	return &Permit{s: s, c: c, id: id, lease: max(lease, 0), done: make(chan struct{})}
}

// ID returns the permit's id, "<client id>:<n>", as the semaphore's sorted
// set has it.
func (p *Permit) ID() string { return p.id }

// Done returns a channel that is closed when the permit ends: by Release, or
// by its loss (see Err).
func (p *Permit) Done() <-chan struct{} { return p.done }

// Err returns why the permit ended without Release (a *LossError wrapping
// ErrLockLost and the reason: ErrUnconfirmed, ErrTakenOver, ErrRenewRefused,
// ErrClosed or ErrLeaseEnded), or nil while it is held and after Release.
func (p *Permit) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Release gives the permit back; a waiter queued for one gets it at once.
// The release is sent even when ctx is already done (detached, bounded by
// the cleanup timeout): Release then returns at once with an error wrapping
// ctx's cause while the release goes on. It returns ErrNotHeld when the
// permit was already released, and an error wrapping ErrLockLost when the
// permit had been lost (the work it guarded may have overlapped another
// holder's). Safe for concurrent use: the first call releases.
func (p *Permit) Release(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", ErrInvalidArgument)
	}
	if ctx.Done() == nil {
		return p.release(ctx)
	}
	out := make(chan error, 1)
	p.c.detach(func(dctx context.Context) { out <- p.release(dctx) })
	select {
	case err := <-out:
		return err
	case <-ctx.Done():
		select {
		case err := <-out:
			return err
		default:
		}
		return &pendingRelease{name: p.s.name, cause: context.Cause(ctx)}
	}
}

// granted starts the permit's bookkeeping: sent is when the granting call
// was sent. Every grant is the reply to the holder's own attempt (a hand-off
// message only wakes it), which gave the permit its whole TTL. It reports
// false when the client is closing.
func (p *Permit) granted(sent time.Time) bool {
	c := p.c
	ks := &p.s.ks
	p.mu.Lock()
	defer p.mu.Unlock()
	period := c.cfg.watchdog / 3
	if p.lease <= 0 {
		ttl := c.cfg.watchdog
		p.validUntil = sent.Add(ttl - driftMargin(ttl))
		p.renewal = renew.Entry{Key: ks.Permits, Set: ks.Size, Field: p.id, Kind: 's', TTL: ttl, Holder: p}
	} else {
		p.until = sent.Add(p.lease)
		p.validUntil = p.until.Add(-driftMargin(p.lease))
	}
	if !c.trackOther(p) {
		return false
	}
	if p.renewal.Holder != nil {
		p.renewing = true
		c.renewer.Add(&p.renewal, sent.Add(period))
	}
	p.timer = time.AfterFunc(time.Until(p.validUntil), p.checkDeadline)
	return true
}

// Renewed implements renew.Holder.
func (p *Permit) Renewed(sent time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.renewErr = nil
	if p.lease > 0 {
		return // a fixed lease is never renewed
	}
	ttl := p.c.cfg.watchdog
	if v := sent.Add(ttl - driftMargin(ttl)); v.After(p.validUntil) {
		p.validUntil = v
	}
}

// Lost implements renew.Holder.
func (p *Permit) Lost(code int64) { p.lose(lossError(p.s.name, goneReason(code), nil)) }

// Failed implements renew.Holder.
func (p *Permit) Failed(err error) {
	p.mu.Lock()
	p.renewErr = err
	p.mu.Unlock()
}

func (p *Permit) checkDeadline() {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	if left := time.Until(p.validUntil); left > 0 {
		p.timer.Reset(left)
		p.mu.Unlock()
		return
	}
	leaseOver := p.lease > 0 && !p.renewing
	renewErr := p.renewErr
	p.mu.Unlock()
	switch {
	case leaseOver:
		p.lose(lossError(p.s.name, ErrLeaseEnded, nil))
	case renewErr != nil && isRedisError(renewErr):
		p.lose(lossError(p.s.name, ErrRenewRefused, renewErr))
	default:
		p.lose(lossError(p.s.name, ErrUnconfirmed, renewErr))
	}
}

func (p *Permit) lose(cause *LossError) {
	if p.end(cause) {
		p.c.cfg.logger.Warn("dlock: semaphore permit lost", "name", p.s.name, "cause", cause)
	}
}

// end marks the permit over (cause nil: released), stops its renewal and
// deadline and closes done. It reports false if it had ended already.
func (p *Permit) end(cause error) bool {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return false
	}
	p.ended = true
	p.err = cause
	if p.timer != nil {
		p.timer.Stop()
	}
	renewing := p.renewing
	p.renewing = false
	p.mu.Unlock()
	if renewing {
		p.c.renewer.Cancel(&p.renewal)
	}
	close(p.done)
	return true
}

// release sends the release once; later calls return the loss or ErrNotHeld.
func (p *Permit) release(ctx context.Context) error {
	c := p.c
	p.mu.Lock()
	if p.released {
		err := p.err
		p.mu.Unlock()
		if err != nil {
			return err
		}
		return ErrNotHeld
	}
	p.released = true
	renewing := p.renewing
	p.renewing = false
	p.mu.Unlock()
	if renewing {
		c.renewer.Remove(&p.renewal) // no renewal may race the release
	}
	defer c.untrackOther(p)
	n, err := scriptSemRelease.run(ctx, c, p.s.keys, p.id, c.arg.claimMs, p.s.ks.Free).Int64Slice()
	if err == nil && len(n) != 1 {
		err = fmt.Errorf("dlock: unexpected semaphore release reply %v", n)
	}
	if err != nil {
		p.end(lossError(p.s.name, ErrUnconfirmed, err))
		return err
	}
	if n[0] == 1 {
		p.end(nil)
		return p.Err()
	}
	// Gone: either our own release resent by go-redis (permit ids are
	// never reused), while the permit was certain, or it had expired.
	p.mu.Lock()
	resent := p.err == nil && time.Now().Before(p.validUntil)
	p.mu.Unlock()
	if resent {
		p.end(nil)
		return nil
	}
	p.lose(lossError(p.s.name, ErrTakenOver, nil))
	return p.Err()
}

// closeWith is Close's end of the permit: the holder learns first, then the
// permit is given back.
func (p *Permit) closeWith(ctx context.Context) error {
	p.lose(lossError(p.s.name, ErrClosed, nil))
	err := p.release(ctx)
	if errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		return nil
	}
	return err
}

// undo gives back what an attempt may have left: a queue entry and a
// permit granted (or handed over) with the reply lost.
func (p *Permit) undo(ctx context.Context, entry string) {
	if err := scriptSemLeave.run(ctx, p.c, p.s.keys, entry, p.id, p.c.arg.claimMs).Err(); err != nil {
		p.c.cfg.logger.Debug("dlock: leaving a semaphore's queue failed; the entry expires", "name", p.s.name, "err", err)
	}
}
