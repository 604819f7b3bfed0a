//go:build !unix

package wire

import (
	"net"
	"syscall"
)

// rawSocket returns nil where dlock does not write sockets itself: every
// call on the pipe is written by its writer.
func rawSocket(net.Conn) syscall.RawConn { return nil }

// writeOnce is never called where rawSocket returns nil.
func (c *pconn) writeOnce(uintptr) bool { return true }
