package dlockprom_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/dlockprom"
)

func ExampleNew() {
	// Your own registry (or your service's): dlockprom never uses the global one.
	reg := prometheus.NewRegistry()
	metrics, err := dlockprom.New(reg)
	if err != nil {
		panic(err)
	}
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	rdb := redis.NewClient(&redis.Options{Addr: shared.Addr()})
	defer rdb.Close()
	c, err := dlock.New(rdb, dlock.WithObserver(metrics))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	err = c.WithLock(context.Background(), "example:prom", func(context.Context) error {
		return nil // the protected work
	})
	fmt.Println(err)
	n, _ := testutil.GatherAndCount(reg, "dlock_acquired_total")
	fmt.Println("series:", n)
	// Output:
	// <nil>
	// series: 1
}
