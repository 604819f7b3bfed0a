package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
	"github.com/dlock-dev/dlock/sqllock"
)

// exampleMySQLDSN and examplePostgresDSN stand for the application's data
// source names; here they point at the tests' private servers.
func exampleMySQLDSN() string    { return sharedMy.DSN() }
func examplePostgresDSN() string { return sharedPG.DSN() }

func ExampleLocker_WithLock() {
	db, err := sql.Open("mysql", exampleMySQLDSN()) // github.com/go-sql-driver/mysql
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := sqllock.MySQL(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	err = locker.WithLock(ctx, "coupon:42", func(ctx context.Context) error {
		// ctx is cancelled with cause dlock.ErrLockLost if the hold is lost.
		g, _ := dlock.GrantFrom(ctx)
		fmt.Println("held through", g.Backend, "with a token:", g.Token > 0)
		return nil
	}, dlock.WaitTime(5*time.Second))
	fmt.Println("err:", err)
	// Output:
	// held through mysql with a token: true
	// err: <nil>
}

func ExampleLocker_Acquire() {
	db, err := sql.Open("pgx", examplePostgresDSN()) // github.com/jackc/pgx/v5/stdlib
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := sqllock.Postgres(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	ctx := context.Background()
	// The floor: the last token another tier granted for this name.
	const lastRedisToken = 1 << 60
	h, err := locker.Acquire(ctx, "report:daily", dlock.FallbackRequest{Wait: 5 * time.Second}, lastRedisToken)
	if err != nil {
		panic(err)
	}
	fmt.Println("token above the floor:", h.Token() > lastRedisToken)
	select {
	case <-h.Done():
		fmt.Println("lost:", h.Err())
	default:
		fmt.Println("still held")
	}
	fmt.Println("release:", h.Release(ctx))
	// Output:
	// token above the floor: true
	// still held
	// release: <nil>
}

// A Client whose Redis cannot be reached runs WithLock on the SQL tier
// instead: here Redis's address refuses every connection, and the lock is
// taken in MySQL. The fallback first waits out a quarantine after Redis was
// last reached, so that every Redis holder has been told of its loss
// (default: the watchdog timeout, 30s); this Client never held anything in
// Redis, so the example shortens it.
func Example_fallback() {
	db, err := sql.Open("mysql", exampleMySQLDSN()) // github.com/go-sql-driver/mysql
	if err != nil {
		panic(err)
	}
	defer db.Close()
	locker, err := sqllock.MySQL(db)
	if err != nil {
		panic(err)
	}
	defer locker.Close()

	// Port 1 on loopback refuses connections: Redis is down.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.WithFallback(locker, dlock.FallbackQuarantine(100*time.Millisecond)))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	err = locks.WithLock(context.Background(), "coupon:42", func(ctx context.Context) error {
		g, _ := dlock.GrantFrom(ctx)
		fmt.Println("held through", g.Backend)
		return nil
	}, dlock.WaitTime(5*time.Second))
	fmt.Println("err:", err)
	// Output:
	// held through mysql
	// err: <nil>
}
