package modbusfault

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal's master side and returns it with the path
// of its slave side. grantpt is a no-op with devpts; unlockpt is TIOCSPTLCK.
func openPTY() (*os.File, string, error) {
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, "", err
	}
	rc, err := ptm.SyscallConn()
	if err != nil {
		ptm.Close()
		return nil, "", err
	}
	var n uint32
	var ioctlErr error
	// Control, not Fd: Fd would put the descriptor back into blocking mode,
	// and Close could then not interrupt a Read.
	err = rc.Control(func(fd uintptr) {
		if ioctlErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioctlErr != nil {
			ioctlErr = fmt.Errorf("unlocking the pty (TIOCSPTLCK): %w", ioctlErr)
			return
		}
		if n, ioctlErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN); ioctlErr != nil {
			ioctlErr = fmt.Errorf("pty number (TIOCGPTN): %w", ioctlErr)
		}
	})
	if err == nil {
		err = ioctlErr
	}
	if err != nil {
		ptm.Close()
		return nil, "", err
	}
	return ptm, fmt.Sprintf("/dev/pts/%d", n), nil
}
