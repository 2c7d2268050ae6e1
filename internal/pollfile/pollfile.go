// Package pollfile reads a pipe or socket that the process was handed as a
// blocking file (stdin, when an MCP client starts physmcpd) through Go's
// poller. A read(2) on a blocking descriptor holds an OS thread in the
// kernel while it waits: the scheduler hands that thread's processor to
// another, and its monitor thread polls every 20 µs while it waits, so each
// message read over stdio costs thread hand-offs and wake-ups. On the poller
// the reading goroutine parks instead, as it does on a socket.
package pollfile

import "os"

// Reader returns a file that reads what f reads, on Go's poller when f is a
// pipe or socket that is not on it already, and a function that gives f's
// open file back its blocking mode: call it when done reading (it closes
// the returned file). Anything else (a terminal, a regular file), and a
// pipe or socket that one of written may be (the same socket as stdin and
// stdout, as socat EXEC and inetd-style socket activation hand it), is
// returned as it is, with a restore that does nothing: written are files
// written blocking, off the poller, and O_NONBLOCK on their open file would
// make a write to a full buffer fail with EAGAIN instead of waiting.
func Reader(f *os.File, written ...*os.File) (*os.File, func() error, error) {
	return reader(f, written)
}
