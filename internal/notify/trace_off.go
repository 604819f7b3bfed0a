//go:build !dlocktrace

package notify

// Tracing is false without the dlocktrace build tag: calls to Trace
// guarded by it compile away (trace_on.go has the traced build).
const Tracing = false

// Trace does nothing without the dlocktrace build tag.
func Trace(string, Hop) {}
