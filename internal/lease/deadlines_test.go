package lease

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// Holds are checked in deadline order, once each, whatever order they were
// scheduled in; a removed hold is not checked at all.
func TestDeadlinesCheckDueHoldsInOrder(t *testing.T) {
	var mu sync.Mutex
	var got []*Lease
	all := make(chan struct{})
	const n, removed = 40, 10
	d := newDeadlines(func(h *Lease) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, h)
		if len(got) == n-removed {
			close(all)
		}
	})
	defer d.stop()
	base := time.Now().Add(500 * time.Millisecond) // far enough that every add and remove comes first, even on a loaded box
	holds := make([]*Lease, n)
	for j := range holds {
		holds[j] = &Lease{dueIndex: -1}
	}
	for _, j := range rand.Perm(n) {
		d.add(holds[j], base.Add(time.Duration(j)*time.Millisecond))
	}
	for j := 0; j < n; j += n / removed {
		d.remove(holds[j])
		d.remove(holds[j]) // twice: a no-op
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("due holds were not all checked")
	}
	time.Sleep(20 * time.Millisecond) // a removed or repeated check would show now
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n-removed {
		t.Fatalf("%d checks, want %d", len(got), n-removed)
	}
	for i := 1; i < len(got); i++ {
		if got[i].dueAt.Before(got[i-1].dueAt) {
			t.Fatalf("check %d (due %v) came after a later one (due %v)", i, got[i].dueAt, got[i-1].dueAt)
		}
	}
	for j := 0; j < n; j += n / removed {
		for _, h := range got {
			if h == holds[j] {
				t.Fatalf("removed hold %d was checked", j)
			}
		}
	}
}
