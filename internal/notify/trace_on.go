//go:build dlocktrace

package notify

import (
	"sync/atomic"
	"time"
)

// Tracing is true in a build with the dlocktrace tag: the engine then calls
// Trace at each hop of a hand-off. Without the tag it is a false constant,
// and the calls compile away.
const Tracing = true

// tracer is the function SetTrace installed, or nil.
var tracer atomic.Pointer[func(client string, hop Hop, at time.Time)]

// SetTrace installs f, called at each hop with the Client's id and the
// time; nil removes it. f runs on the engine's goroutines (the hub's reader
// among them) and must not block. Only in a dlocktrace build.
func SetTrace(f func(client string, hop Hop, at time.Time)) {
	if f == nil {
		tracer.Store(nil)
		return
	}
	tracer.Store(&f)
}

// Trace reports that client passed hop now.
func Trace(client string, hop Hop) {
	if f := tracer.Load(); f != nil {
		(*f)(client, hop, time.Now())
	}
}
