package dlock

import (
	"context"
	"errors"

	"github.com/dlock-dev/dlock/internal/notify"
)

var errHubClosed = notify.ErrClosed

func (c *Client) observeAcquire(ctx context.Context, kind Kind, name string) func(Acquisition) {
	var fs []func(Acquisition)
	for _, o := range c.cfg.observers {
		if f := o.AcquireStarted(ctx, kind, name); f != nil {
			fs = append(fs, f)
		}
	}
	return func(a Acquisition) {
		for _, f := range fs {
			f(a)
		}
	}
}

func (c *Client) observeRelease(ctx context.Context, kind Kind, name string) func(Release) {
	var fs []func(Release)
	for _, o := range c.cfg.observers {
		if f := o.ReleaseStarted(ctx, kind, name); f != nil {
			fs = append(fs, f)
		}
	}
	return func(r Release) {
		for _, f := range fs {
			f(r)
		}
	}
}

func (c *Client) wrapClosed(err error) error {
	if errors.Is(err, errHubClosed) {
		return ErrClosed
	}
	return err
}

func (c *Client) observeFallback(kind Kind, name string, reason error) {
	c.cfg.logger.Warn("dlock: falling back", "name", name, "backend", c.fallback.f.Backend(), "reason", reason)
	for _, o := range c.cfg.observers {
		o.FellBack(kind, name, c.fallback.f.Backend(), reason)
	}
}

func (c *Client) observeBreaker(state string) {
	c.cfg.logger.Warn("dlock: circuit breaker", "state", state)
	for _, o := range c.cfg.observers {
		o.BreakerChanged(state)
	}
}
