package dlock_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-dev/dlock"
)

func ExampleElection() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	e := locks.Election("example:report-scheduler")
	lead, err := e.Campaign(ctx, "host-a") // blocks until this process leads
	if err != nil {
		log.Fatal(err)
	}
	// Lead under lead: it is cancelled (cause wrapping dlock.ErrLockLost)
	// if the leadership is lost.
	leader, _ := e.Leader(ctx)
	fmt.Println("leader:", leader, "leading:", lead.Err() == nil)
	if err := e.Resign(lead); err != nil { // ends this term; the next candidate leads at once
		log.Fatal(err)
	}
	fmt.Println("after Resign:", context.Cause(lead))
	// Output:
	// leader: host-a leading: true
	// after Resign: dlock: leadership resigned
}

func ExampleElection_Observe() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	e := locks.Election("example:observed")
	changes := e.Observe(ctx) // each new leader's value, pushed by Redis
	if _, err := e.Campaign(ctx, "host-b"); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", <-changes)
	_ = e.Resign(ctx)
	fmt.Printf("%q\n", <-changes) // "": nobody leads
	// Output:
	// "host-b"
	// ""
}

func ExampleSemaphore() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// At most 3 exports at once across every process.
	exports := locks.Semaphore("example:exports", 3)
	p, err := exports.Acquire(ctx, 5*time.Second, 0) // wait up to 5s; watchdog-renewed
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlock.ErrWaitTimeout) when all stayed taken
	}
	defer p.Release(ctx)
	select {
	case <-p.Done(): // the permit was lost (Redis unreachable past its TTL...)
		log.Fatal(p.Err())
	default:
	}
	fmt.Println("exporting with a permit")
	// Output: exporting with a permit
}

func ExampleSemaphore_AcquireN() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// A budget of 8 GPU slots shared by every process: a large job takes 6
	// of them at once, and is not overtaken by small jobs that come after
	// it.
	gpus := locks.Semaphore("example:gpus", 8)
	job, err := gpus.AcquireN(ctx, 6, 5*time.Second, 10*time.Minute) // a fixed lease of 10 minutes
	if err != nil {
		log.Fatal(err)
	}
	free, _ := gpus.Available(ctx)
	fmt.Println("job holds", job.N(), "slots;", free, "free")

	// More slots while the job runs: queued waiters that now fit are
	// granted at once. Shrinking later takes nothing from the holders.
	if err := gpus.SetPermits(ctx, 12); err != nil {
		log.Fatal(err)
	}
	free, _ = gpus.Available(ctx)
	fmt.Println(free, "free after SetPermits(12)")

	_ = job.Release(ctx) // gives all 6 back at once
	free, _ = gpus.Available(ctx)
	fmt.Println(free, "free after Release")
	_ = gpus.SetPermits(ctx, 8) // back to the usual budget
	// Output:
	// job holds 6 slots; 2 free
	// 6 free after SetPermits(12)
	// 12 free after Release
}

func ExampleCountDownLatch() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// The coordinator arms the latch for three workers; the latch lives at
	// most an hour, whatever happens to them.
	shards := locks.CountDownLatch("example:import-shards")
	if _, err := shards.TrySetCount(ctx, 3, time.Hour); err != nil {
		log.Fatal(err)
	}
	for range 3 {
		go func() { // a worker, in this process or any other
			// ... import one shard ...
			if err := shards.CountDown(ctx); err != nil {
				log.Print(err)
			}
		}()
	}
	if err := shards.Wait(ctx); err != nil { // woken by Redis at zero
		log.Fatal(err)
	}
	n, _ := shards.Count(ctx)
	fmt.Println("all shards imported; count:", n)
	// Output: all shards imported; count: 0
}

func ExampleMutex_Extend() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	// A fixed lease of 30s (no watchdog), extended when the work turns out
	// to need longer: 30s from now, and the holder's loss deadline with it.
	m := locks.Mutex("example:rebuild-index")
	if ok, err := m.TryLock(ctx, 0, 30*time.Second); !ok || err != nil {
		log.Fatal(ok, err)
	}
	// ... the first part of the work ...
	if err := m.Extend(ctx, 30*time.Second); err != nil {
		log.Fatal(err) // ErrLockLost: the lease ran out first; stop
	}
	ttl, _ := m.RemainingTTL(ctx)
	fmt.Println("extended:", ttl > 29*time.Second)
	_ = m.Unlock(ctx)
	// Output: extended: true
}

func ExampleElection_Proclaim() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, _ := dlock.New(rdb)
	defer locks.Close()
	ctx := context.Background()

	e := locks.Election("example:primary")
	lead, err := e.Campaign(ctx, "10.0.0.5:5432 (starting)")
	if err != nil {
		log.Fatal(err)
	}
	// Ready: tell the followers, without a new election.
	if err := e.Proclaim(lead, "10.0.0.5:5432"); err != nil {
		log.Fatal(err)
	}
	v, _ := e.Leader(ctx)
	fmt.Println("leader:", v)
	_ = e.Resign(lead)
	// Output: leader: 10.0.0.5:5432
}

// SyncLocker adapts a lock to sync.Locker for code that takes one; its
// errors go to the callback, since sync.Locker's methods return none.
func ExampleSyncLocker() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	var mu sync.Locker = dlock.SyncLocker(locks.Mutex("example:legacy"), func(err error) {
		log.Print("example:legacy: ", err) // a retry of Lock, or a failed Unlock
	})
	mu.Lock() // retries until held: it never returns without the lock
	fmt.Println("in the critical section")
	mu.Unlock()
	// Output: in the critical section
}

// Inspect reads a lock's state from Redis for operators and tools (dlock
// inspect prints the same); it changes nothing.
func ExampleClient_Inspect() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	m := locks.Mutex("example:inspected")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	info, err := locks.Inspect(ctx, "example:inspected")
	if err != nil {
		log.Fatal(err)
	}
	h := info.Holders[0] // host and process id come from the default client id
	fmt.Println("locked:", info.Locked, "holders:", len(info.Holders), "this process:", h.PID == os.Getpid(),
		"token:", info.Token == m.Token())
	_ = m.Unlock(ctx)
	info, _ = locks.Inspect(ctx, "example:inspected")
	fmt.Println("locked:", info.Locked)
	// Output:
	// locked: true holders: 1 this process: true token: true
	// locked: false
}

func ExampleClient_Locks() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	m := locks.Mutex("example:listed:report")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	exports := locks.Semaphore("example:listed:exports", 3)
	p, err := exports.Acquire(ctx, time.Second, 0)
	if err != nil {
		log.Fatal(err)
	}
	// Everything in use whose name matches, by SCAN: an operator's view.
	in, err := locks.Locks(ctx, "example:listed:*")
	if err != nil {
		log.Fatal(err)
	}
	for _, li := range in {
		fmt.Println(li.Type, li.Name, "holders:", len(li.Holders))
	}
	_ = p.Release(ctx)
	_ = m.Unlock(ctx)
	// Output:
	// lock example:listed:report holders: 1
	// semaphore example:listed:exports holders: 1
}

func ExampleWithNamespace() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	// Every key and channel of this Client begins with "billing:", so that
	// an ACL (~billing:* &billing:*) can give the service its own prefix.
	locks, err := dlock.New(rdb, dlock.WithNamespace("billing"))
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	ctx := context.Background()

	m := locks.Mutex("example:invoice:7") // the name, without the namespace
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("the lock's hash:", rdb.Exists(ctx, "billing:example:invoice:7").Val() == 1)
	_ = m.Unlock(ctx)
	// Output: the lock's hash: true
}

func ExampleTokenFrom() {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer rdb.Close()
	locks, err := dlock.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	// A storage that accepts a write only with a token at least as high as
	// any it has seen, so a holder that lost the lock cannot write late.
	var highest uint64
	write := func(token uint64) error {
		if token < highest {
			return fmt.Errorf("stale token %d < %d", token, highest)
		}
		highest = token
		return nil
	}
	var first uint64
	for range 2 {
		err = locks.WithLock(context.Background(), "example:ledger", func(ctx context.Context) error {
			tok := dlock.TokenFrom(ctx) // the hold's fencing token
			if first == 0 {
				first = tok
			}
			return write(tok)
		})
		fmt.Println("write:", err)
	}
	fmt.Println("a late writer with the first token:", write(first) != nil)
	// Output:
	// write: <nil>
	// write: <nil>
	// a late writer with the first token: true
}
