package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/dlock-dev/dlock"
)

// The bounds of what run does after CMD, stated in run's help: dlock exits
// at most releaseTimeout + closeTimeout after CMD does, whatever Redis does
// (a Redis that hangs would otherwise keep it for go-redis's timeouts and
// retries, 10s and more, with nothing to show).
const (
	// releaseTimeout bounds the release of NAME once CMD has exited. A
	// release Redis has not confirmed by then is left to the lock's TTL,
	// which ends it anyway.
	releaseTimeout = 2 * time.Second
	// closeTimeout bounds the Client's Close that follows
	// (dlock.WithCloseTimeout): calls Redis has not answered are abandoned.
	closeTimeout = time.Second
	// releaseNotice is how long a release may take before dlock says that it
	// waits for Redis: a healthy release is never announced.
	releaseNotice = 300 * time.Millisecond
)

// release releases m's hold of name, within releaseTimeout, once run is
// done with it (after says why: "CMD exited"). Where a person waits it says so: a release Redis has not
// answered after releaseNotice is announced, and its failure is printed with
// what becomes of the lock (it expires by its TTL, at most ttl). A signal
// in sigs gives up the release at once. It returns the release's outcome:
// nil, a *dlock.LossError for a hold lost meanwhile, or the failure (already
// printed).
func (a *app) release(ctx context.Context, m heldLock, name, after, ttl string, sigs <-chan os.Signal) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	out := make(chan error, 1)
	go func() { out <- m.Unlock(rctx) }()
	notice := time.NewTimer(releaseNotice)
	defer notice.Stop()
	var interrupted os.Signal
	for {
		select {
		case <-notice.C:
			fmt.Fprintf(a.stderr, "dlock: %s; releasing %s (up to %v)\n", after, name, releaseTimeout)
		case s := <-sigs:
			interrupted = s
			cancel() // Unlock returns at once
		case err := <-out:
			var why string
			switch {
			case err == nil:
				return nil
			case interrupted != nil:
				why = fmt.Sprintf("interrupted by %v", interrupted)
			case errors.Is(err, context.DeadlineExceeded):
				why = fmt.Sprintf("no answer from Redis within %v", releaseTimeout)
			case errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrReleaseFailed):
				return err // nothing was left to release: the caller reports the loss
			default:
				why = oneLine(err.Error())
			}
			fmt.Fprintf(a.stderr, "dlock: could not release %s: %s; it expires by its TTL in Redis (%s)\n", name, why, ttl)
			return err
		}
	}
}

// lossReason is why a hold was lost, without the "lock NAME lost" that the
// message around it says already.
func lossReason(err error) string {
	var le *dlock.LossError
	if !errors.As(err, &le) {
		return oneLine(err.Error())
	}
	if le.Err != nil {
		return oneLine(fmt.Sprintf("%v: %v", le.Reason, le.Err))
	}
	return oneLine(le.Reason.Error())
}
