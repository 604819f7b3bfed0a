//go:build unix

package wire

import (
	"net"
	"syscall"
)

// rawSocket returns the socket of a plain TCP or Unix connection, which a
// caller may write without blocking (pipe.combine), or nil for any other
// (TLS, a custom Dialer's wrapper), whose calls only the writer writes.
func rawSocket(nc net.Conn) syscall.RawConn {
	var sc interface {
		SyscallConn() (syscall.RawConn, error)
	}
	switch nc := nc.(type) {
	case *net.TCPConn:
		sc = nc
	case *net.UnixConn:
		sc = nc
	default:
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// writeOnce is writeNow's work on the socket fd: it writes c.buf from
// c.wn until the socket takes no more (EAGAIN: the rest is the writer's),
// and returns true (done) whatever happened, so that RawConn.Write never
// waits. Any other error is left in c.werr.
func (c *pconn) writeOnce(fd uintptr) bool {
	for c.wn < len(c.buf) {
		m, err := syscall.Write(int(fd), c.buf[c.wn:])
		if m > 0 {
			c.wn += m
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil:
			c.werr = err
			return true
		case m <= 0:
			return true
		}
	}
	return true
}
