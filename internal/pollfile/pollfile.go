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
// the returned file). Anything else (a terminal, a regular file) is returned
// as it is, with a restore that does nothing.
func Reader(f *os.File) (*os.File, func() error, error) {
	return reader(f)
}
