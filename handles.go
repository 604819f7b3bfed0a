package dlock

import (
	"maps"
	"runtime"
	"sync"
	"weak"
)

// A Client's handles are looked up by kind and name: Client.Mutex(name)
// returns the same *Mutex for the same name for as long as anything refers
// to it, so Redisson's habit of asking for the lock wherever it is needed
// (getLock(name).lock() here, getLock(name).unlock() there) takes and
// releases one lock.
//
// The registry refers to its handles weakly: a handle that nothing refers
// to (no variable of the caller's, no hold, no waiter: a hold refers to its
// handle until its final Unlock) is collected, and its entry with it, so a
// Client that looks up millions of distinct names keeps only the handles in
// use. A handle collected had no hold and no waiter, so the next lookup's
// new handle is the same lock in the same state.
type handles struct {
	mu   sync.Mutex
	m    map[handleKey]any // a weak.Pointer of the key's handle type
	peak int               // len(m) since it was last rebuilt
}

// handleKind is the kind of handle a key names: one name has a handle of
// each kind, which are different locks (a Mutex and an RWMutex of one name
// are not meant to be mixed; a FairMutex queues where a Mutex does not).
type handleKind uint8

const (
	handleMutex handleKind = iota
	handleFair
	handleRW
)

type handleKey struct {
	kind handleKind
	name string
}

// forgotten is what a handle's cleanup needs to drop its entry: the key,
// and the weak pointer that must still be the entry's (a new handle may
// have replaced a collected one before the cleanup ran).
type forgotten struct {
	key handleKey
	wp  any
}

// lookup returns the handle of key, made by mk when there is none alive.
// mk's ok false (an invalid name) keeps the handle out of the registry: it
// only reports its error. Safe for concurrent use.
func lookup[T any](hs *handles, key handleKey, c *Client, mk func(*Client, string) (h *T, ok bool)) *T {
	hs.mu.Lock()
	if v, found := hs.m[key]; found {
		if h := v.(weak.Pointer[T]).Value(); h != nil {
			hs.mu.Unlock()
			return h
		}
	}
	h, ok := mk(c, key.name)
	if !ok {
		hs.mu.Unlock()
		return h
	}
	wp := weak.Make(h)
	if hs.m == nil {
		hs.m = make(map[handleKey]any)
	}
	hs.m[key] = wp
	hs.peak = max(hs.peak, len(hs.m))
	hs.mu.Unlock()
	runtime.AddCleanup(h, hs.forget, forgotten{key, wp})
	return h
}

// forget drops a collected handle's entry, unless a new handle has taken
// its place. A map does not give back the room its deleted entries took:
// once it holds a quarter of what it once held, it is copied into a map of
// its present size.
func (hs *handles) forget(f forgotten) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if v, ok := hs.m[f.key]; !ok || v != f.wp {
		return
	}
	delete(hs.m, f.key)
	if hs.peak >= 1024 && len(hs.m) < hs.peak/4 {
		m := make(map[handleKey]any, len(hs.m))
		maps.Copy(m, hs.m)
		hs.m, hs.peak = m, len(m)
	}
}

// len is how many handles the registry refers to (for tests).
func (hs *handles) len() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return len(hs.m)
}
