package dlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-dev/dlock/internal/keys"
	"github.com/dlock-dev/dlock/internal/lockcheck"
	"github.com/dlock-dev/dlock/internal/testenv"
)

// Three Clients campaign in turns, with campaigns cancelled at random: the
// recorded terms never overlap and their tokens increase.
func TestElectionOneLeaderAtATime(t *testing.T) {
	ctx := ctxT(t)
	var hist lockcheck.History
	var wg sync.WaitGroup
	// Campaigns run for 1.5 s, and on until 20 terms have been seen (a loaded
	// machine may need longer), for 15 s at most.
	start, stop, give := time.Now(), time.Now().Add(1500*time.Millisecond), time.Now().Add(15*time.Second)
	more := func() bool {
		now := time.Now()
		return now.Before(give) && (now.Before(stop) || hist.Len() < 20)
	}
	for i := range 3 {
		c := newClient(t, shared)
		for j := range 2 {
			e := c.Election("el:exclusive")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for more() {
					cctx, cancel := context.WithTimeout(ctx, time.Duration(5+rand.IntN(30))*time.Millisecond)
					lead, err := e.Campaign(cctx, fmt.Sprintf("c%d/%d", i, j))
					cancel()
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("Campaign: %v", err)
							return
						}
						continue
					}
					start := time.Now()
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					if lead.Err() != nil {
						t.Errorf("leadership ended while leading: %v", context.Cause(lead))
					}
					hist.Add(lockcheck.Hold{Owner: fmt.Sprint(i, "/", j), Token: TokenFrom(lead), Start: start, End: time.Now()})
					if err := e.Resign(ctx); err != nil {
						t.Errorf("Resign: %v", err)
						return
					}
					if !errors.Is(context.Cause(lead), ErrResigned) {
						t.Errorf("after Resign the leadership's cause is %v", context.Cause(lead))
					}
				}
			}()
		}
	}
	wg.Wait()
	if hist.Len() < 20 {
		t.Fatalf("only %d terms in %v: the test proves little", hist.Len(), time.Since(start))
	}
	if err := hist.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d terms", hist.Len())
}

// A leader cut off from Redis (its connections blackholed) is told it lost
// the leadership, no later than its lock could have expired, and a waiting
// candidate of another Client takes over within the watchdog timeout. An
// observer sees the new leader.
func TestElectionCutOffLeaderIsReplaced(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	const wd = 600 * time.Millisecond
	proxy := startBlackhole(t, r.Addr())
	old := clientVia(t, proxy, WithWatchdogTimeout(wd), WithCloseTimeout(time.Second))
	next := newClient(t, r, WithWatchdogTimeout(wd))
	watcher := newClient(t, r)
	obs := watcher.Election("el:cut").Observe(ctx)

	lead, err := old.Election("el:cut").Campaign(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	if v := <-obs; v != "old" {
		t.Fatalf("observed %q, want old", v)
	}
	took := make(chan time.Time, 1)
	go func() {
		if _, err := next.Election("el:cut").Campaign(ctx, "next"); err != nil {
			t.Error(err)
		}
		took <- time.Now()
	}()
	waitQueued(t, next, keys.Election("el:cut").Lock, 1)
	cut := time.Now()
	proxy.Cut()
	var lost time.Time
	select {
	case <-lead.Done():
		lost = time.Now()
	case <-time.After(5 * wd):
		t.Fatal("the cut-off leader was never told")
	}
	if cause := context.Cause(lead); !errors.Is(cause, ErrLockLost) || !errors.Is(cause, ErrUnconfirmed) {
		t.Fatalf("cause %v, want ErrLockLost and ErrUnconfirmed", cause)
	}
	var won time.Time
	select {
	case won = <-took:
	case <-time.After(wd + 3*time.Second):
		t.Fatal("no new leader within the watchdog timeout (and a generous margin)")
	}
	if won.Before(lost) {
		t.Fatalf("the new leader took office %v before the old one was told", lost.Sub(won))
	}
	if v := <-obs; v != "next" {
		t.Fatalf("observed %q, want next", v)
	}
	t.Logf("cut at 0; old leader told at %v; new leader at %v (watchdog %v)", lost.Sub(cut), won.Sub(cut), wd)
}

// dataCommands is commands without the CONFIG calls of the test itself.
func dataCommands(t testing.TB, r *testenv.Redis) map[string]int64 {
	t.Helper()
	stats := commands(t, r)
	for k := range stats {
		if strings.HasPrefix(k, "config") {
			delete(stats, k)
		}
	}
	return stats
}

// waitQueued waits until name's wait queue has n entries.
func waitQueued(t *testing.T, c *Client, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		info, err := c.Inspect(ctxT(t), name)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Waiters) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued for %s, want %d", len(info.Waiters), name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Resign hands the leadership straight to the queued candidate: Redis runs
// the release (which hands the lock over) and the new leader's announcement,
// and nothing else: no re-check, no attempt, no TTL to wait for.
func TestElectionResignHandsOff(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	a, b := newClient(t, r), newClient(t, r)
	ea, eb := a.Election("el:handoff"), b.Election("el:handoff")
	for _, e := range []*Election{eb, ea} { // every script loaded once
		if _, err := e.Campaign(ctx, "warm-up"); err != nil {
			t.Fatal(err)
		}
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ea.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	took := make(chan context.Context, 1)
	go func() {
		lead, err := eb.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		took <- lead
	}()
	waitQueued(t, a, keys.Election("el:handoff").Lock, 1)
	resetCounts(t, ctx, r)
	start := time.Now()
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	var lead context.Context
	select {
	case lead = <-took:
	case <-time.After(2 * time.Second): // the re-check interval is 3s, the TTL 30s
		t.Fatal("the waiting candidate did not lead at once")
	}
	elapsed := time.Since(start)
	if lead == nil || lead.Err() != nil {
		t.Fatal("no leadership")
	}
	if v, err := eb.Leader(ctx); err != nil || v != "b" {
		t.Fatalf("Leader = %q, %v", v, err)
	}
	stats := commands(t, r)
	// The release puts the grant in the waiting candidate's box, which it
	// pops (no attempt of its own), and the new leader announces itself.
	if stats["evalsha"] != 2 || stats["rpush"] != 1 || stats["eval"] != 0 {
		t.Fatalf("commands run between Resign and the new leader: %v, want 2 scripts (release with hand-off, announcement) and the grant popped", stats)
	}
	t.Logf("handed over in %v", elapsed)
	if err := eb.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// Observe delivers every change of leader, in order, and sends nothing to
// Redis while nothing changes.
func TestElectionObserveEventDriven(t *testing.T) {
	r := testenvRedis(t)
	ctx := ctxT(t)
	watcher := newClient(t, r)
	obs := watcher.Election("el:observe").Observe(ctx)
	next := func(want string) {
		t.Helper()
		select {
		case v, ok := <-obs:
			if !ok || v != want {
				t.Fatalf("observed %q (open %v), want %q", v, ok, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing observed, want %q", want)
		}
	}
	ac := newClient(t, r)
	a := ac.Election("el:observe")
	if _, err := a.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	next("a")
	// The leader's Client subscribes its client channel in the background
	// after its first grant (for ForceUnlock's news): let it finish.
	waitSubscribed(t, ctx, rdbFor(t, r), ac)

	// Idle: a leader (renewed every 10s by default) and an observer.
	if err := r.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if stats := dataCommands(t, r); len(stats) != 0 {
		t.Fatalf("commands while nothing changed: %v", stats)
	}

	if err := a.Resign(ctx); err != nil { // nobody waits: a vacancy
		t.Fatal(err)
	}
	next("")
	b := newClient(t, r).Election("el:observe")
	c := newClient(t, r).Election("el:observe")
	if _, err := b.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	next("b")
	cLead := make(chan error, 1)
	go func() { _, err := c.Campaign(ctx, "c"); cLead <- err }()
	waitQueued(t, watcher, keys.Election("el:observe").Lock, 1)
	if err := b.Resign(ctx); err != nil { // handed to c: no vacancy between
		t.Fatal(err)
	}
	next("c")
	awaitNil(t, cLead, 5*time.Second, "c never led")
	if v, err := c.Leader(ctx); err != nil || v != "c" {
		t.Fatalf("Leader = %q, %v", v, err)
	}
	if err := c.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next("")
	if _, err := c.Leader(ctx); !errors.Is(err, ErrNoLeader) {
		t.Fatalf("Leader with nobody leading: %v, want ErrNoLeader", err)
	}
}

// The observer's channel closes with its ctx, and with its Client.
func TestElectionObserveEnds(t *testing.T) {
	c, err := New(rdbFor(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	byCtx := c.Election("el:ends").Observe(ctx)
	byClose := c.Election("el:ends").Observe(ctxT(t))
	cancel()
	for range byCtx {
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for range byClose {
	}
	if _, ok := <-c.Election("el:ends").Observe(ctxT(t)); ok {
		t.Fatal("Observe on a closed Client delivered")
	}
}

// The leadership outlives the ctx that bounded the campaign, ends with a
// loss wrapping ErrClosed on Close, and Campaign honours ctx while waiting.
func TestElectionContexts(t *testing.T) {
	c1, c2 := newClient(t, shared), newClient(t, shared)
	cctx, cancel := context.WithCancel(ctxT(t))
	lead, err := c1.Election("el:ctx").Campaign(cctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if lead.Err() != nil {
		t.Fatal("the leadership ended with the campaign's ctx")
	}
	wctx, wcancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	defer wcancel()
	if _, err := c2.Election("el:ctx").Campaign(wctx, "two"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign past its ctx: %v", err)
	}
	if _, err := c1.Election("el:ctx").Campaign(lead, "again"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Campaign with a leadership ctx: %v, want ErrInvalidArgument", err)
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	<-lead.Done()
	if cause := context.Cause(lead); !errors.Is(cause, ErrLockLost) || !errors.Is(cause, ErrClosed) {
		t.Fatalf("cause after Close %v", cause)
	}
	// Close released the lock: the other Client leads at once.
	l2, err := c2.Election("el:ctx").Campaign(ctxT(t), "two")
	if err != nil {
		t.Fatal(err)
	}
	// Without the leadership context, a handle that did not campaign leads
	// nothing; with it, any handle ends that term.
	e2 := c2.Election("el:ctx")
	if err := e2.Resign(ctxT(t)); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Resign without the leadership context through a handle that did not campaign: %v", err)
	}
	if err := e2.Resign(l2); err != nil || !errors.Is(context.Cause(l2), ErrResigned) {
		t.Fatalf("Resign with the leadership context through another handle: %v (%v)", err, context.Cause(l2))
	}
}

func TestElectionBadInput(t *testing.T) {
	c := newClient(t, shared)
	for _, name := range []string{"", "a}b"} {
		e := c.Election(name)
		if _, err := e.Campaign(ctxT(t), "v"); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Campaign(%q): %v", name, err)
		}
		if _, err := e.Leader(ctxT(t)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Leader(%q): %v", name, err)
		}
		if err := e.Resign(ctxT(t)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Resign(%q): %v", name, err)
		}
		if _, ok := <-e.Observe(ctxT(t)); ok {
			t.Errorf("Observe(%q) delivered", name)
		}
	}
	e := c.Election("el:bad")
	//lint:ignore SA1012 nil context on purpose
	if _, err := e.Campaign(nil, "v"); !errors.Is(err, ErrInvalidArgument) { //nolint:staticcheck
		t.Errorf("nil ctx: %v", err)
	}
	if err := e.Resign(ctxT(t)); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Resign without leading: %v", err)
	}
}
