package dlockotel_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockotel"
)

func ExampleNew() {
	// Any TracerProvider: here the SDK's with an in-memory exporter.
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithObserver(dlockotel.New(tp)))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	_ = c.WithLock(context.Background(), "example:otel", func(context.Context) error {
		return nil // the protected work
	})
	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name)
	}
	// Output:
	// dlock.acquire
	// dlock.release
}
