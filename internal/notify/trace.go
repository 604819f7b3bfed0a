package notify

// Hop is one step of a hand-off between two processes, as the dlocktrace
// build tag traces it (trace_on.go): the releasing Client sends its release,
// the waiting Client's hub reads the message that names its waiter, the
// waiter's goroutine runs, sends its claim and reads the claim's reply. The
// steps between them that no Go code marks (a socket write returning, a
// read) are timed by whoever traces, on the connections it dials.
type Hop uint8

// The hops, in the order one hand-off passes them.
const (
	HopRelease Hop = iota // the releasing call is about to go to the wire
	HopHub                // the hub's reader has a message for one of its waiters
	HopWake               // the woken waiter's goroutine runs
	HopClaim              // the waiter's claiming attempt is about to go to the wire
	HopReply              // the claim's reply is decoded
	// A waiter that pops its hand-off (lease/pop.go) passes HopRelease,
	// HopPopped and HopWake instead.
	HopPopped // the waiter's blocking pop has its reply
)
