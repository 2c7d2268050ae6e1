// Package serialline opens a serial line for a newline-delimited JSON-RPC
// session (serve --serial, and a proxy's mcp bus on a Lite node's line).
// go.bug.st/serial sets the line up (raw 8N1 at the baud rate, no flow
// control, exclusive use), but its reads block an OS thread in select(2):
// the Go scheduler then hands the thread's processor over on every read,
// and its monitor thread polls every 20 µs while one is blocked, which cost
// a Lite node and a proxy a third of their CPU time per read. So on Unix
// the line is read and written through a second descriptor on Go's poller,
// as a socket is, and go.bug.st/serial's port only holds the settings.
package serialline

import (
	"errors"
	"io"

	"go.bug.st/serial"
)

// Line is an open serial line.
type Line struct {
	rw   io.ReadWriteCloser // the port itself, or a descriptor on Go's poller
	port serial.Port
}

// Open opens the line at path, raw 8N1 at baud.
func Open(path string, baud int) (*Line, error) {
	return open(path, &serial.Mode{BaudRate: baud, DataBits: 8, Parity: serial.NoParity, StopBits: serial.OneStopBit})
}

func (l *Line) Read(p []byte) (int, error)  { return l.rw.Read(p) }
func (l *Line) Write(p []byte) (int, error) { return l.rw.Write(p) }

// ResetInputBuffer discards what the line received and nobody read.
func (l *Line) ResetInputBuffer() error { return l.port.ResetInputBuffer() }

// Close closes the line; a Read or Write waiting on it returns an error.
func (l *Line) Close() error {
	if l.rw == l.port {
		return l.port.Close()
	}
	return errors.Join(l.rw.Close(), l.port.Close())
}
