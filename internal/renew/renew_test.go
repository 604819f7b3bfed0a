package renew

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type holder struct {
	mu      sync.Mutex
	renewed []time.Time
	lost    int
}

func (h *holder) Renewed(t time.Time) { h.mu.Lock(); h.renewed = append(h.renewed, t); h.mu.Unlock() }
func (h *holder) Lost(int64)          { h.mu.Lock(); h.lost++; h.mu.Unlock() }
func (h *holder) Failed(error)        {}

// fake records the batches it is asked to renew and answers from held.
type fake struct {
	mu      sync.Mutex
	calls   [][]string
	held    map[string]bool
	failing bool
}

func (f *fake) run(_ context.Context, batch []*Entry, _ []int64) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, len(batch))
	for i, e := range batch {
		keys[i] = e.Key
	}
	f.calls = append(f.calls, keys)
	if f.failing {
		return nil, errors.New("connection refused")
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		if f.held[k] {
			out[i] = Held
		}
	}
	return out, nil
}

// Locks added at different moments fall into one beat: after the first
// period they are renewed together, one call per period.
func TestBatchesCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{held: map[string]bool{}}
		r := New(Config{Period: time.Second, Run: f.run})
		defer r.Stop()
		hs := make([]*holder, 3)
		for i := range hs {
			hs[i] = &holder{}
			key := string(rune('a' + i))
			f.held[key] = true
			r.Add(&Entry{Key: key, TTL: 3 * time.Second, Holder: hs[i]}, time.Now().Add(time.Second))
			time.Sleep(200 * time.Millisecond)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.calls) < 4 || len(f.calls) > 6 {
			t.Fatalf("%d calls in 5.6s at a 1s period, want about 5", len(f.calls))
		}
		for i, c := range f.calls {
			if len(c) != 3 {
				t.Fatalf("call %d renewed %v, want all three locks together", i, c)
			}
		}
	})
}

func TestBatchSizeAndLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{held: map[string]bool{}}
		r := New(Config{Period: time.Second, Run: f.run})
		defer r.Stop()
		n := 2*MaxBatch + 10
		var gone *holder
		for i := range n {
			h := &holder{}
			key := string(rune(0x4e00 + i))
			f.held[key] = i != 0
			if i == 0 {
				gone = h
			}
			r.Add(&Entry{Key: key, TTL: 3 * time.Second, Holder: h}, time.Now().Add(time.Second))
		}
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		f.mu.Lock()
		// The calls run at once, in any order.
		sizes := map[int]int{}
		for _, c := range f.calls {
			sizes[len(c)]++
		}
		if len(f.calls) != 3 || sizes[MaxBatch] != 2 || sizes[n-2*MaxBatch] != 1 {
			t.Errorf("%d calls of sizes %v for %d locks, want 3: two of %d and the rest", len(f.calls), sizes, n, MaxBatch)
		}
		f.mu.Unlock()
		if gone.lost != 1 || r.Len() != n-1 {
			t.Errorf("lost=%d entries=%d, want the not-held lock reported and dropped", gone.lost, r.Len())
		}
	})
}

// Errors are retried sooner than a period; nothing is declared lost by the
// Renewer itself (the holder's own deadline does that).
func TestErrorsAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{held: map[string]bool{"k": true}, failing: true}
		r := New(Config{Period: 4 * time.Second, Run: f.run})
		defer r.Stop()
		h := &holder{}
		r.Add(&Entry{Key: "k", TTL: 12 * time.Second, Holder: h}, time.Now().Add(4*time.Second))
		time.Sleep(4*time.Second + 3500*time.Millisecond)
		synctest.Wait()
		f.mu.Lock()
		calls := len(f.calls)
		f.failing = false
		f.mu.Unlock()
		if calls < 3 {
			t.Fatalf("%d calls in 3.5s of errors, want retries every second", calls)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if h.lost != 0 || len(h.renewed) != 1 {
			t.Fatalf("lost=%d renewed=%d, want one renewal after recovery", h.lost, len(h.renewed))
		}
	})
}

// Remove stops renewal at once.
func TestRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{held: map[string]bool{"k": true}}
		r := New(Config{Period: time.Second, Run: f.run})
		defer r.Stop()
		e := &Entry{Key: "k", TTL: 3 * time.Second, Holder: &holder{}}
		r.Add(e, time.Now().Add(time.Second))
		time.Sleep(1500 * time.Millisecond)
		r.Remove(e)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.calls) != 1 {
			t.Fatalf("%d calls, want 1 before Remove and none after", len(f.calls))
		}
	})
}

// An entry due before the loop's planned wake-up wakes it; one due later
// does not need to.
func TestEarlierEntryWakesLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{held: map[string]bool{"late": true, "early": true}}
		r := New(Config{Period: 30 * time.Second, Run: f.run})
		defer r.Stop()
		r.Add(&Entry{Key: "late", TTL: time.Minute, Holder: &holder{}}, time.Now().Add(30*time.Second))
		time.Sleep(time.Second)
		early := &holder{}
		r.Add(&Entry{Key: "early", TTL: time.Minute, Holder: early}, time.Now().Add(2*time.Second))
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if len(early.renewed) != 1 {
			t.Fatalf("entry due at 3s renewed %d times by 3.5s", len(early.renewed))
		}
	})
}

// wakeups returns how many times r's loop has woken from its wait.
func (r *Renewer) wakeups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wakes
}

// A Lock and its Unlock, 5 ms apart from the next pair, while nothing else
// is held: the loop has nothing to renew before the entry would fall due,
// so neither Add nor Remove wakes it (a wake-up is a context switch on the
// Lock's path), and once the last entry is gone it sleeps until the next.
func TestIdlePairsDoNotWakeLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fake{held: map[string]bool{"k": true}}
		r := New(Config{Period: 10 * time.Second, Run: f.run})
		defer r.Stop()
		synctest.Wait() // the loop is asleep
		for range 100 {
			e := &Entry{Key: "k", TTL: 30 * time.Second, Holder: &holder{}}
			r.Add(e, time.Now().Add(10*time.Second))
			r.Remove(e)
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := r.wakeups(); n != 0 {
			t.Fatalf("the loop woke %d times for 100 Lock/Unlock pairs with nothing held between them, want 0", n)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.calls) != 0 {
			t.Fatalf("%d renewal calls for locks released before they fell due", len(f.calls))
		}
	})
}

// A batch whose call does not return (a paused Cluster node) holds back no
// other batch: each call waits at most a period, on a goroutine of its own.
// Before, the loop sent batches one after another, so eight slow slots ahead
// of a healthy one delayed its renewal by eight periods.
func TestSlowBatchDelaysNoOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var healthyCalls []time.Time
		run := func(ctx context.Context, batch []*Entry, _ []int64) ([]int64, error) {
			if batch[0].Key != "healthy" {
				<-ctx.Done() // the paused node
				return nil, ctx.Err()
			}
			mu.Lock()
			healthyCalls = append(healthyCalls, time.Now())
			mu.Unlock()
			return []int64{Held}, nil
		}
		slot := func(key string) uint16 {
			if key == "healthy" {
				return 100
			}
			return 200 + uint16(key[0]-'a')
		}
		r := New(Config{Period: time.Second, Run: run, Slot: slot})
		defer r.Stop()
		due := time.Now().Add(time.Second)
		for i := range 8 {
			r.Add(&Entry{Key: string(rune('a' + i)), TTL: 3 * time.Second, Holder: &holder{}}, due)
		}
		h := &holder{}
		r.Add(&Entry{Key: "healthy", TTL: 3 * time.Second, Holder: h}, due)
		time.Sleep(5*time.Second + 500*time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(healthyCalls) < 5 {
			t.Fatalf("the healthy entry was renewed %d times in 5.5 s at a 1 s period, want 5", len(healthyCalls))
		}
		for i := 1; i < len(healthyCalls); i++ {
			if gap := healthyCalls[i].Sub(healthyCalls[i-1]); gap > time.Second {
				t.Fatalf("renewals %v apart, want a period", gap)
			}
		}
	})
}

// Hurry renews every entry at once, and an entry whose call was in flight
// when it came is renewed again as soon as that call returns: the call may
// have been answered before whatever made the caller hurry.
func TestHurry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var calls []time.Time
		release := make(chan struct{})
		run := func(ctx context.Context, batch []*Entry, _ []int64) ([]int64, error) {
			mu.Lock()
			calls = append(calls, time.Now())
			first := len(calls) == 1
			mu.Unlock()
			if first {
				<-release
			}
			return []int64{Held}, nil
		}
		r := New(Config{Period: 10 * time.Second, Run: run})
		defer r.Stop()
		start := time.Now()
		r.Add(&Entry{Key: "a", TTL: 30 * time.Second, Holder: &holder{}}, start)
		synctest.Wait() // the first call is in flight
		r.Hurry()
		time.Sleep(time.Second)
		close(release)
		synctest.Wait()
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		if n != 2 {
			t.Fatalf("%d calls, want the one in flight and one more right after it", n)
		}
		r.Hurry()
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 3 || !calls[2].Equal(calls[1]) {
			t.Fatalf("calls at %v, want a third at once after Hurry", calls)
		}
	})
}

// hurryingHolder calls Hurry from its first Renewed, as a channel
// confirmation may come while a call's holders are being told.
type hurryingHolder struct {
	r    *Renewer
	once sync.Once
}

func (h *hurryingHolder) Renewed(time.Time) { h.once.Do(h.r.Hurry) }
func (h *hurryingHolder) Lost(int64)        {}
func (h *hurryingHolder) Failed(error)      {}

// A Hurry that comes after a call's reply was sorted, while its holders
// are told, still gets a renewal sent after it: the reply may predate it.
func TestHurryWhileHoldersAreTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var calls []time.Time
		run := func(ctx context.Context, batch []*Entry, _ []int64) ([]int64, error) {
			mu.Lock()
			calls = append(calls, time.Now())
			mu.Unlock()
			return []int64{Held}, nil
		}
		r := New(Config{Period: 10 * time.Second, Run: run})
		defer r.Stop()
		r.Add(&Entry{Key: "a", TTL: 30 * time.Second, Holder: &hurryingHolder{r: r}}, time.Now())
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(calls) != 2 {
			t.Fatalf("%d calls in the first second, want the first and the one its Hurry asked for", len(calls))
		}
	})
}
