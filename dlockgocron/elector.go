package dlockgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-dev/dlock"
)

// ErrNotLeader is returned by Elector.IsLeader when this instance does not
// lead (yet, any more, or after Close).
var ErrNotLeader = errors.New("dlockgocron: this instance is not the leader")

// Campaign retry delays after a failed Campaign (Redis unreachable, say).
const (
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
	// resignTimeout bounds the Resign sent by Close.
	resignTimeout = 10 * time.Second
)

// ElectorOption configures an Elector (see NewElector). Options are plain
// values, safe for concurrent use.
type ElectorOption func(*electorConfig) error

type electorConfig struct {
	value string
}

// WithValue sets the value this instance announces as the election's leader
// value while it leads (dlock.Election.Leader reads it). It defaults to the
// Client's id. An empty value is refused (dlock.ErrInvalidArgument).
func WithValue(v string) ElectorOption {
	return func(c *electorConfig) error {
		if v == "" {
			return fmt.Errorf("%w: empty leader value (dlock.Election.Observe's \"no leader\")", dlock.ErrInvalidArgument)
		}
		c.value = v
		return nil
	}
}

// Elector implements gocron.Elector with a dlock Election: pass it to
// gocron.WithDistributedElector on every instance, each with its own dlock
// Client and the same election name; only the leader runs jobs.
//
// NewElector starts a goroutine that campaigns for the election and, when
// the leadership is lost, campaigns again (after a short delay when
// Campaign fails, until the Client is closed). IsLeader reads the state
// that goroutine keeps, without a Redis call. Close resigns and stops the
// goroutine.
//
// An Elector is safe for concurrent use.
type Elector struct {
	el    *dlock.Election
	value string

	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	lead  context.Context // the current leadership's context, or nil
	err   error           // why the campaign goroutine stopped, if it did
	close error           // Resign's result, set by the goroutine on Close
}

// NewElector starts campaigning for the election name through c and returns
// the Elector. A nil c, an empty name, or a nil option return an error
// wrapping dlock.ErrInvalidArgument; other invalid names are reported by the
// first Campaign, which stops the Elector (IsLeader then returns that error
// wrapped with ErrNotLeader).
func NewElector(c *dlock.Client, name string, opts ...ElectorOption) (*Elector, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil dlock client", dlock.ErrInvalidArgument)
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty election name", dlock.ErrInvalidArgument)
	}
	cfg := electorConfig{value: c.ID()}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", dlock.ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{el: c.Election(name), value: cfg.value, cancel: cancel, done: make(chan struct{})}
	go e.run(ctx)
	return e, nil
}

// run campaigns until ctx is cancelled (Close) or the campaign cannot work
// again (closed Client, invalid name).
func (e *Elector) run(ctx context.Context) {
	defer close(e.done)
	retry := minRetry
	for {
		lctx, err := e.el.Campaign(ctx, e.value)
		if err != nil {
			if errors.Is(err, dlock.ErrClosed) || errors.Is(err, dlock.ErrInvalidArgument) {
				e.mu.Lock()
				e.err = err
				e.mu.Unlock()
				return
			}
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			retry = min(2*retry, maxRetry)
			continue
		}
		retry = minRetry
		e.mu.Lock()
		e.lead = lctx
		e.mu.Unlock()
		select {
		case <-lctx.Done():
			// Lost (or the Client closed): campaign again.
			e.mu.Lock()
			e.lead = nil
			e.mu.Unlock()
		case <-ctx.Done():
			e.mu.Lock()
			e.lead = nil
			e.mu.Unlock()
			rctx, cancel := context.WithTimeout(context.Background(), resignTimeout)
			err := e.el.Resign(rctx)
			cancel()
			if errors.Is(err, dlock.ErrNotHeld) {
				err = nil
			}
			e.mu.Lock()
			e.close = err
			e.mu.Unlock()
			return
		}
	}
}

// IsLeader implements gocron.Elector: nil while this instance leads, an
// error wrapping ErrNotLeader otherwise. It makes no Redis call: the
// leadership is watchdog-renewed, and its end (loss, Client closed, Close)
// is seen here no later than the election's lock could have expired in
// Redis, so two instances never both get nil for overlapping leaderships
// while Redis keeps its data. A job that IsLeader let start is not stopped
// when the leadership ends during the run: another instance may then be
// elected and start the same job while it still runs. A job that must not
// overlap watches LeaderContext. Safe for concurrent use.
func (e *Elector) IsLeader(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("%w: nil context", dlock.ErrInvalidArgument)
	}
	e.mu.Lock()
	lead, stopped := e.lead, e.err
	e.mu.Unlock()
	if lead != nil && lead.Err() == nil {
		return nil
	}
	if stopped != nil {
		return fmt.Errorf("%w: campaign stopped: %w", ErrNotLeader, stopped)
	}
	return ErrNotLeader
}

// LeaderContext returns the current leadership's context: a job that
// IsLeader let start calls it first and stops its work once the context is
// done, which is no later than the election's lock could have expired in
// Redis (gocron consults no Locker once an Elector is set, so this is the
// job's only news of a lost leadership). When this instance does not lead,
// the context is already cancelled with cause ErrNotLeader. Safe for
// concurrent use.
func (e *Elector) LeaderContext() context.Context {
	e.mu.Lock()
	lead := e.lead
	e.mu.Unlock()
	if lead != nil && lead.Err() == nil {
		return lead
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrNotLeader)
	return ctx
}

// Close stops campaigning: it resigns the leadership if this instance leads
// (handing it at once to another instance's campaign), stops the campaign
// goroutine and waits for it. It returns the Resign error, if any (nil when
// not leading). Close the Elector before its Client, after shutting down the
// scheduler using it. Idempotent; safe for concurrent use.
func (e *Elector) Close() error {
	e.cancel()
	<-e.done
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.close
}
