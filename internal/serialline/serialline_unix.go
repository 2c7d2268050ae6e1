//go:build unix

package serialline

import (
	"os"
	"syscall"

	"go.bug.st/serial"
)

func open(path string, mode *serial.Mode) (*Line, error) {
	// This descriptor first: the port takes the line for exclusive use
	// (TIOCEXCL), which refuses any open after it. O_NONBLOCK: on Go's
	// poller, and no wait for a modem's carrier before the port sets CLOCAL.
	f, err := os.OpenFile(path, os.O_RDWR|syscall.O_NOCTTY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	port, err := serial.Open(path, mode)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Line{rw: f, port: port}, nil
}
