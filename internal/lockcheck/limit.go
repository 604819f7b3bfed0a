package lockcheck

import (
	"fmt"
	"sort"
)

// CheckLimit verifies that at no instant more than n of holds overlap (a
// semaphore of n permits; Shared and Token are ignored). Holds are recorded
// as for Check: Start after the grant returned, End before the release was
// sent, so recorded intervals lie inside the real ones and an excess is a
// real violation. It returns the first excess found, or nil.
func CheckLimit(holds []Hold, n int) error {
	type edge struct {
		i     int
		start bool
		h     *Hold
	}
	edges := make([]edge, 0, 2*len(holds))
	for i := range holds {
		x := &holds[i]
		if x.End.Before(x.Start) {
			return fmt.Errorf("hold %d by %s ends before it starts", i, x.Owner)
		}
		edges = append(edges, edge{i, true, x}, edge{i, false, x})
	}
	at := func(e edge) int64 {
		if e.start {
			return e.h.Start.UnixNano()
		}
		return e.h.End.UnixNano()
	}
	// Ends before starts at the same instant: touching holds do not overlap.
	sort.Slice(edges, func(a, b int) bool {
		ta, tb := at(edges[a]), at(edges[b])
		if ta != tb {
			return ta < tb
		}
		return !edges[a].start && edges[b].start
	})
	open := map[int]*Hold{}
	for _, e := range edges {
		if !e.start {
			delete(open, e.i)
			continue
		}
		open[e.i] = e.h
		if len(open) > n {
			var owners []string
			for _, h := range open {
				owners = append(owners, h.Owner)
			}
			sort.Strings(owners)
			return fmt.Errorf("%d holders at once, the limit is %d: %v", len(open), n, owners)
		}
	}
	return nil
}

// CheckLimit is CheckLimit over the recorded history.
func (h *History) CheckLimit(n int) error {
	h.mu.Lock()
	holds := append([]Hold(nil), h.holds...)
	h.mu.Unlock()
	return CheckLimit(holds, n)
}
