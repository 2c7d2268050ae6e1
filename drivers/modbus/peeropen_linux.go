package modbus

import (
	"errors"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// peerOpen reports whether the peer has not closed conn, without sending: a
// peer that closed it left a FIN (recv returns 0) or a RST (recv fails) to
// read. Bytes waiting that nobody asked for also count as closed: the stream
// is out of step and the connection must be replaced.
func peerOpen(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	// The last exchange's deadline has passed; with it set, Read would
	// report a timeout without calling recv.
	if err != nil || conn.SetReadDeadline(time.Time{}) != nil {
		return false
	}
	var recvErr error
	var buf [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, recvErr = unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		return false
	}
	return errors.Is(recvErr, unix.EAGAIN)
}
