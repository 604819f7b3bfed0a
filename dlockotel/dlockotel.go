// Package dlockotel traces dlock's lock operations with OpenTelemetry.
//
// New returns a dlock.Observer; give it to dlock.New with dlock.WithObserver:
//
//	c, err := dlock.New(rdb, dlock.WithObserver(dlockotel.New(tp)))
//
// Every acquisition (Lock, TryLock, WithLock's wait) becomes a span named
// "dlock.acquire", a child of the span in the caller's context, lasting from
// the call to its outcome, so the time spent waiting for the lock shows in
// the trace. Its attributes:
//
//	dlock.kind       lock type, e.g. "mutex"
//	dlock.name       lock name
//	dlock.acquired   whether the lock was granted
//	dlock.timed_out  whether the wait ran out (not an error)
//	dlock.reentry    whether it re-entered a lock the handle already held
//	dlock.waited_ms  time from the call to the outcome, in milliseconds
//
// A failure (Redis error, cancelled context, closed client) is recorded on
// the span as an error event and sets its status to Error. A wait that runs
// out is not an error.
//
// Every Unlock becomes a span named "dlock.release" with dlock.kind,
// dlock.name, dlock.final (the hold count reached zero) and, for a final
// release, dlock.held_ms; an error, including a hold found lost at release
// (dlock.ErrLockLost), sets status Error.
//
// Fencing tokens and owner ids are never recorded.
//
// # What is guaranteed, and what is not
//
// Guaranteed: every acquisition and every Unlock a Client reports to its
// observers ends its span exactly once (dlock calls the outcome function
// once); spans are children of the span in the caller's ctx; recording a
// span never calls Redis and never blocks the lock call beyond the tracer's
// own work. The Observer is safe for concurrent use by any number of
// Clients.
//
// Not guaranteed: a hold's life between its acquire and release spans is not
// a span, and a hold lost while held (dlock.ErrLockLost, seen by the holder
// through Done or its context) makes no span of its own: the release span of
// that hold carries the loss. Watchdog renewals, fallbacks, the breaker and
// count-down latches make no spans (dlockprom counts them). The Redis
// commands behind a span are not its children unless the go-redis client is
// instrumented itself, and even then a call dlock sends on a connection of
// its own (dlock.New explains when) is not seen by go-redis's hooks: use
// dlock.WithOwnConnection(false) when every command must show in the trace.
// dlock.name is the lock name as given, which may be high in cardinality or
// confidential: it is recorded on every span.
package dlockotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlock-dev/dlock"
)

// ScopeName is the instrumentation scope of the tracer dlockotel uses (a
// constant, like the names below).
const ScopeName = "github.com/dlock-dev/dlock/dlockotel"

// Span and attribute names.
const (
	SpanAcquire = "dlock.acquire"
	SpanRelease = "dlock.release"

	AttrKind     = attribute.Key("dlock.kind")
	AttrName     = attribute.Key("dlock.name")
	AttrAcquired = attribute.Key("dlock.acquired")
	AttrTimedOut = attribute.Key("dlock.timed_out")
	AttrReentry  = attribute.Key("dlock.reentry")
	AttrWaitedMS = attribute.Key("dlock.waited_ms")
	AttrFinal    = attribute.Key("dlock.final")
	AttrHeldMS   = attribute.Key("dlock.held_ms")
)

type observer struct {
	dlock.NopObserver
	tracer trace.Tracer
}

// New returns an Observer that records spans through tp; a nil tp means the
// global provider (otel.GetTracerProvider) at the time of the call. The
// Observer is safe for concurrent use by any number of Clients.
func New(tp trace.TracerProvider) dlock.Observer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &observer{tracer: tp.Tracer(ScopeName)}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (o *observer) AcquireStarted(ctx context.Context, kind dlock.Kind, name string) func(dlock.Acquisition) {
	_, span := o.tracer.Start(ctx, SpanAcquire, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrKind.String(string(kind)), AttrName.String(name)))
	return func(a dlock.Acquisition) {
		span.SetAttributes(
			AttrAcquired.Bool(a.Acquired),
			AttrTimedOut.Bool(a.TimedOut),
			AttrReentry.Bool(a.Reentry),
			AttrWaitedMS.Float64(ms(a.Waited)),
		)
		if a.Err != nil {
			span.RecordError(a.Err)
			span.SetStatus(codes.Error, a.Err.Error())
		}
		span.End()
	}
}

func (o *observer) ReleaseStarted(ctx context.Context, kind dlock.Kind, name string) func(dlock.Release) {
	_, span := o.tracer.Start(ctx, SpanRelease, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(AttrKind.String(string(kind)), AttrName.String(name)))
	return func(r dlock.Release) {
		span.SetAttributes(AttrFinal.Bool(r.Final))
		if r.Final {
			span.SetAttributes(AttrHeldMS.Float64(ms(r.Held)))
		}
		if r.Err != nil {
			span.RecordError(r.Err)
			span.SetStatus(codes.Error, r.Err.Error())
		}
		span.End()
	}
}
