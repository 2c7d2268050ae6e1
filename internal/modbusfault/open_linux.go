package modbusfault

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// clientOpen reports whether the client has not closed c, as the kernel
// sees it: a FIN (recv returns 0) or a RST (recv fails) waits to be read.
// It peeks without the connection's read lock, which a serving goroutine
// may hold, and without consuming anything.
func clientOpen(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	var buf [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = n > 0 || errors.Is(err, unix.EAGAIN)
	}); err != nil {
		return false
	}
	return open
}
