package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

// redisAddr is where the examples find Redis; in your code, your own address.
var redisAddr = func() string { return dlock.SharedRedisAddr() }

func ExampleNew() {
	// redisAddr() is the private redis-server the Examples run against;
	// yours is an address such as "localhost:6379".
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()

	// One Client per process: it owns the watchdog and the pub/sub connection.
	locks, err := dlock.New(rdb, dlock.WithWatchdogTimeout(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	fmt.Println(locks.ID() != "")
	// Output: true
}

func ExampleMutex_Lock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	m := locks.Mutex("example:stock:42")
	if err := m.Lock(ctx); err != nil { // waits; renewed by the watchdog
		log.Fatal(err)
	}
	select {
	case <-m.Done(): // closed if the hold is lost: stop writing
		log.Fatal(m.Err())
	default:
	}
	fmt.Println("holding, token > 0:", m.Token() > 0)
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: holding, token > 0: true
}

func ExampleMutex_TryLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// Wait up to 2s; once held, the lock expires after 5s and is not renewed.
	m := locks.Mutex("example:report")
	ok, err := m.TryLock(ctx, 2*time.Second, 5*time.Second)
	fmt.Println(ok, err)
	if ok {
		defer m.Unlock(ctx)
	}
	// Output: true <nil>
}

func ExampleClient_WithLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()

	err := locks.WithLock(context.Background(), "example:coupon:7", func(ctx context.Context) error {
		// ctx is cancelled with cause dlock.ErrLockLost if the lock is lost.
		fmt.Println("issuing one coupon")
		return nil
	}, dlock.WaitTime(2*time.Second))
	switch {
	case errors.Is(err, dlock.ErrWaitTimeout):
		fmt.Println("busy, try later")
	case err != nil:
		log.Fatal(err)
	}
	// Output: issuing one coupon
}

func ExampleFairMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// Waiters in every process are served in the order they queued.
	m := locks.FairMutex("example:settlement")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("held, token > 0:", m.Token() > 0)
	if err := m.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: held, token > 0: true
}

func ExampleRWMutex() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// Many readers at once, in any process. Each unlocks with the context
	// its read lock returned: one Client's read holds are told apart by it.
	a := locks.RWMutex("example:catalog")
	reading, _ := a.ReadContext(ctx, 0, 0)
	other, err := locks.RWMutex("example:catalog").ReadContext(ctx, 0, 0)
	fmt.Println("second reader:", err == nil)
	// ...but no writer while they read. A reader may not upgrade:
	fmt.Println("upgrade refused:", errors.Is(a.Lock(reading), dlock.ErrUpgrade))
	_ = a.RUnlock(reading)
	_ = a.RUnlock(other)

	// The writer excludes everyone, and may downgrade to a read hold: a read
	// lock call with the write hold's context takes the read side as the
	// same owner.
	wctx, err := a.WriteContext(ctx, time.Second, 0)
	if err != nil {
		log.Fatal(err)
	}
	rctx, _ := a.ReadContext(wctx, 0, 0) // downgrade: read while still writing
	_ = a.Unlock(wctx)                   // now only a reader
	_ = a.RUnlock(rctx)                  // free
	fmt.Println("done")
	// Output:
	// second reader: true
	// upgrade refused: true
	// done
}

func ExampleMultiLock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// A transfer locks both accounts. Whatever the argument order, the locks
	// are taken in sorted name order, so a transfer the other way round
	// cannot deadlock with this one. A read lock on the rate table joins in.
	ml := locks.MultiLock(
		locks.Mutex("example:account:B"),
		locks.Mutex("example:account:A"),
		locks.RWMutex("example:rates").RLocker(),
	)
	ok, err := ml.TryLock(ctx, 2*time.Second, 0) // one 2s budget for all three
	if err != nil || !ok {
		log.Fatal("busy or failed: ", err)
	}
	fmt.Println(ml.Names())
	if err := ml.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: [example:account:A example:account:B example:rates]
}

func ExampleRead() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// Readers of a config share the lock; a writer (dlock.Write()) excludes them.
	err := locks.WithLock(ctx, "example:config", func(ctx context.Context) error {
		fmt.Println("reading")
		return nil
	}, dlock.Read(), dlock.WaitTime(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// Output: reading
}

// A handle is shared like a sync.Mutex; re-entry follows the context that
// carries the hold, so nested code can take the same lock again.
func ExampleMutex_LockContext() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()

	stock := locks.Mutex("example:stock:7") // e.g. a field shared by request goroutines
	held, err := stock.LockContext(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	reserve := func(ctx context.Context) error {
		// Called with the hold's context: this Lock re-enters.
		if err := stock.Lock(ctx); err != nil {
			return err
		}
		defer stock.Unlock(ctx)
		n, _ := stock.HoldCount(ctx)
		fmt.Println("hold count inside:", n)
		return nil
	}
	if err := reserve(held); err != nil {
		log.Fatal(err)
	}
	_ = stock.Unlock(held)
	fmt.Println("token was issued:", dlock.TokenFrom(held) > 0)
	// Output:
	// hold count inside: 2
	// token was issued: true
}

// A hold can end without Unlock: here an operator breaks it, as
// "dlock unlock --force" does. The holder is told, by a message at once or
// else at its next renewal: Done closes, and Err, the hold's context's cause
// and Unlock say why.
func ExampleMutex_ForceUnlock() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	ctx := context.Background()
	// A 3s watchdog timeout renews every second: a holder that missed the
	// message (its Client was still subscribing) learns within a second.
	holder, err := dlock.New(rdb, dlock.WithWatchdogTimeout(3*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close()
	operator, err := dlock.New(rdb) // another process, in real life
	if err != nil {
		log.Fatal(err)
	}
	defer operator.Close()

	m := holder.Mutex("example:stuck-job")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	wasHeld, err := operator.Mutex("example:stuck-job").ForceUnlock(ctx)
	fmt.Println("was held:", wasHeld, err)

	<-m.Done() // the holder stops writing here
	var loss *dlock.LossError
	if errors.As(m.Err(), &loss) {
		fmt.Println("lost:", loss.Name, errors.Is(loss, dlock.ErrLockLost), errors.Is(loss, dlock.ErrForced))
	}
	fmt.Println("Unlock reports it:", errors.Is(m.Unlock(ctx), dlock.ErrForced))
	// Output:
	// was held: true <nil>
	// lost: example:stuck-job true true
	// Unlock reports it: true
}
