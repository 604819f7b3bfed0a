package dlockotel_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockotel"
	"github.com/dlock-dev/dlock/internal/testenv"
)

var shared *testenv.Redis

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, "dlockotel", &shared, nil)) }

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	obs := dlockotel.New(tp)
	c1, err := dlock.New(shared.NewClient(t), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := dlock.New(shared.NewClient(t), dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()

	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	a := c1.Mutex("otel-a")
	if err := a.Lock(ctx); err != nil { // 1: acquired
		t.Fatal(err)
	}
	b := c2.Mutex("otel-a")
	if ok, err := b.TryLock(ctx, 30*time.Millisecond, 0); ok || err != nil { // 2: timed out
		t.Fatal(ok, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.TryLock(cctx, time.Second, 0); !errors.Is(err, context.Canceled) { // 3: error
		t.Fatal(err)
	}
	if err := a.Unlock(ctx); err != nil { // 4: release
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) { // 5: a release of nothing
		t.Fatal(err)
	}
	parent.End()

	spans := exp.GetSpans()
	if len(spans) != 6 {
		t.Fatalf("%d spans: %v", len(spans), spans)
	}
	for _, s := range spans[:5] {
		if s.Parent.SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the caller's span", s.Name)
		}
		if s.InstrumentationScope.Name != dlockotel.ScopeName {
			t.Errorf("scope %q", s.InstrumentationScope.Name)
		}
		at := attrs(s)
		if at[dlockotel.AttrKind].AsString() != "mutex" || at[dlockotel.AttrName].AsString() != "otel-a" {
			t.Errorf("%s attributes %v", s.Name, at)
		}
	}
	type want struct {
		name              string
		acquired, timeout bool
		status            codes.Code
		minWaited         float64
	}
	for i, w := range []want{
		{dlockotel.SpanAcquire, true, false, codes.Unset, 0},
		{dlockotel.SpanAcquire, false, true, codes.Unset, 30},
		{dlockotel.SpanAcquire, false, false, codes.Error, 0},
	} {
		s := spans[i]
		at := attrs(s)
		if s.Name != w.name || at[dlockotel.AttrAcquired].AsBool() != w.acquired || at[dlockotel.AttrTimedOut].AsBool() != w.timeout ||
			s.Status.Code != w.status || at[dlockotel.AttrWaitedMS].AsFloat64() < w.minWaited {
			t.Errorf("span %d: %s %v status %v", i, s.Name, at, s.Status)
		}
		if _, ok := at[dlockotel.AttrWaitedMS]; !ok {
			t.Errorf("span %d has no waited_ms", i)
		}
	}
	if len(spans[2].Events) == 0 || spans[2].Events[0].Name != "exception" {
		t.Errorf("the error is not recorded: %v", spans[2].Events)
	}
	if s := spans[1]; s.EndTime.Sub(s.StartTime) < 30*time.Millisecond {
		t.Errorf("the timed-out span lasted %v, less than the wait", s.EndTime.Sub(s.StartTime))
	}
	rel := spans[3]
	at := attrs(rel)
	if rel.Name != dlockotel.SpanRelease || !at[dlockotel.AttrFinal].AsBool() || at[dlockotel.AttrHeldMS].AsFloat64() < 30 || rel.Status.Code != codes.Unset {
		t.Errorf("release span: %s %v %v", rel.Name, at, rel.Status)
	}
	if s := spans[4]; s.Name != dlockotel.SpanRelease || attrs(s)[dlockotel.AttrFinal].AsBool() || s.Status.Code != codes.Error {
		t.Errorf("release of nothing: %s %v %v (every started span must end)", s.Name, attrs(s), s.Status)
	}
	if spans[5].Name != "request" {
		t.Errorf("last span %s", spans[5].Name)
	}
}

func TestLostAtRelease(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	c, err := dlock.New(shared.NewClient(t), dlock.WithObserver(dlockotel.New(tp)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	m := c.Mutex("otel-lost")
	if ok, err := m.TryLock(ctx, 0, 20*time.Millisecond); !ok || err != nil {
		t.Fatal(ok, err)
	}
	<-m.Done()
	if err := m.Unlock(ctx); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[1].Name != dlockotel.SpanRelease || spans[1].Status.Code != codes.Error {
		t.Fatalf("spans %v", spans)
	}
}

func TestNilProviderUsesGlobal(t *testing.T) {
	obs := dlockotel.New(nil) // the global no-op provider: must not panic
	f := obs.AcquireStarted(context.Background(), dlock.KindMutex, "x")
	f(dlock.Acquisition{Kind: dlock.KindMutex, Name: "x", Acquired: true})
	g := obs.ReleaseStarted(context.Background(), dlock.KindMutex, "x")
	g(dlock.Release{Kind: dlock.KindMutex, Name: "x", Final: true})
}
