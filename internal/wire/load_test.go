package wire

import "testing"

// After a burst of many concurrent callers, a lull in pending (a batch's
// replies just went out) does not send calls alone: the batcher's load
// remembers the burst for a few calls. Once callers stay few, lone sends
// resume within about a dozen calls.
func TestLoadKeepsBurstsBatched(t *testing.T) {
	var b batcher
	// Sixteen callers: each call arrives with about twelve in flight.
	for range 64 {
		b.pending = 12
		b.arrive()
	}
	b.pending = 0
	if b.reserve(Lones) {
		t.Fatalf("load %d/%d right after a burst of 16 callers: a call was sent alone", b.load, loadUnit)
	}
	// One caller at a time from now on: enqueue counts each arrival.
	lone := -1
	for i := range 64 {
		b.pending = 0
		if b.reserve(Lones) {
			lone = i
			break
		}
		b.arrive()
	}
	if lone < 0 || lone > 16 {
		t.Fatalf("a lone caller after a burst sent alone only at its call %d (load %d/%d), want within 16", lone, b.load, loadUnit)
	}
	// Few callers never reach the threshold.
	for range 256 {
		b.pending = Lones - 1
		b.arrive()
	}
	b.pending = Lones - 1
	if !b.reserve(Lones) {
		t.Fatalf("load %d/%d with %d calls always in flight: want lone sends", b.load, loadUnit, Lones-1)
	}
}
