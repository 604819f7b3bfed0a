package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock/internal/notify"
)

var (
	redisNil     = redis.Nil
	errHubClosed = notify.ErrClosed
)

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

func (c *Client) observeRelease(kind Kind, name string, h *hold, err error) {
	held := time.Since(h.start)
	for _, o := range c.cfg.observers {
		o.Released(kind, name, held, err)
	}
}

func (c *Client) wrapClosed(err error) error {
	if errors.Is(err, errHubClosed) {
		return ErrClosed
	}
	return err
}
