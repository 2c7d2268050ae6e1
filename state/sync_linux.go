package state

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (not its times): the log never changes size,
// so that is all a write needs.
func fdatasync(f *os.File) error {
	for {
		if err := syscall.Fdatasync(int(f.Fd())); err != syscall.EINTR {
			return err
		}
	}
}
