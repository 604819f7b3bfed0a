// Package lockcheck checks a recorded history of lock holds for the two
// properties every dlock lock promises: exclusion (no two holds overlap,
// except shared holds with each other) and fencing (tokens strictly increase
// in the order holds were granted, shared holds aside).
//
// Holds are recorded by one test process with its monotonic clock: Start just
// after the grant returned, End just before the release was sent. A correct
// lock can only make those intervals shorter than the real holds, so an
// overlap of recorded intervals is a real violation.
package lockcheck

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// Hold is one recorded possession of a lock.
type Hold struct {
	Owner  string
	Shared bool // a read hold: may overlap other shared holds
	Token  uint64
	Start  time.Time
	End    time.Time
}

// History collects holds from many goroutines. Safe for concurrent use.
type History struct {
	mu    sync.Mutex
	holds []Hold
}

// Add records h.
func (h *History) Add(x Hold) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

// Len returns the number of recorded holds.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.holds)
}

// Check returns the first violation found, or nil.
func (h *History) Check() error {
	h.mu.Lock()
	holds := append([]Hold(nil), h.holds...)
	h.mu.Unlock()
	return Check(holds)
}

// Check verifies exclusion and token order over holds.
func Check(holds []Hold) error {
	sort.Slice(holds, func(i, j int) bool { return holds[i].Start.Before(holds[j].Start) })
	var lastExclusive *Hold
	var lastExclusiveToken uint64
	// openShared are shared holds that may still be running.
	var openShared []Hold
	for i := range holds {
		x := &holds[i]
		if x.End.Before(x.Start) {
			return fmt.Errorf("hold %d by %s ends before it starts", i, x.Owner)
		}
		if lastExclusive != nil && x.Start.Before(lastExclusive.End) {
			return fmt.Errorf("overlap: %s was granted %v before %s released",
				x.Owner, lastExclusive.End.Sub(x.Start), lastExclusive.Owner)
		}
		kept := openShared[:0]
		for _, s := range openShared {
			if s.End.After(x.Start) {
				kept = append(kept, s)
			}
		}
		openShared = kept
		if x.Shared {
			openShared = append(openShared, *x)
			continue
		}
		if len(openShared) > 0 {
			return fmt.Errorf("overlap: exclusive hold by %s granted while %d shared holds were open (first by %s)",
				x.Owner, len(openShared), openShared[0].Owner)
		}
		if x.Token != 0 && x.Token <= lastExclusiveToken {
			return fmt.Errorf("token order: %s got token %d after an earlier hold had %d", x.Owner, x.Token, lastExclusiveToken)
		}
		if x.Token != 0 {
			lastExclusiveToken = x.Token
		}
		lastExclusive = x
	}
	return nil
}
