//go:build unix && !aix

package pollfile

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// reader reads f through a second descriptor of the same open file, set
// O_NONBLOCK, which os.NewFile puts on the poller. O_NONBLOCK belongs to the
// open file, so whoever else holds it sees it too: an MCP client keeps the
// other end of the pipe or socket (a file of its own, unaffected), and a
// process that shares this end (a shell that started physmcpd with its own
// stdin) reads it again only once physmcpd is done, when restore has
// cleared the flag. Only stdin is moved: writing stdout on the poller would
// make the same flag visible to whatever shares stdout, such as stderr
// after 2>&1, whose blocking writes would then fail with EAGAIN when the
// pipe is full, while a write to a pipe with room does not block anyway.
func reader(f *os.File, written []*os.File) (*os.File, func() error, error) {
	nothing := func() error { return nil }
	if f.SetReadDeadline(time.Time{}) == nil {
		return f, nothing, nil // already on the poller: it was non-blocking when opened
	}
	rc, err := f.SyscallConn() // not f.Fd(), which makes a file on the poller blocking
	if err != nil {
		return f, nothing, err
	}
	dup, flags := -1, 0
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if opErr = unix.Fstat(int(fd), &st); opErr != nil {
			return
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFIFO && t != unix.S_IFSOCK || sharesFile(st, written) {
			return
		}
		if flags, opErr = unix.FcntlInt(fd, unix.F_GETFL, 0); opErr != nil {
			return
		}
		dup, opErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return f, nothing, err
	}
	if opErr != nil {
		return f, nothing, fmt.Errorf("%s: %w", f.Name(), opErr)
	}
	if dup < 0 {
		return f, nothing, nil
	}
	restoreFlags := func() error {
		if flags&unix.O_NONBLOCK != 0 {
			return nil
		}
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = unix.SetNonblock(int(fd), false) }); cerr != nil {
			return cerr
		}
		if err != nil {
			return fmt.Errorf("%s: clearing O_NONBLOCK: %w", f.Name(), err)
		}
		return nil
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return f, nothing, fmt.Errorf("%s: setting O_NONBLOCK: %w", f.Name(), err)
	}
	// NewFile puts a non-blocking descriptor on the poller.
	pf := os.NewFile(uintptr(dup), f.Name())
	if pf.SetReadDeadline(time.Time{}) != nil {
		// The poller refused it: a blocking read is still better than
		// EAGAIN from a non-blocking one that nothing waits on.
		pf.Close()
		return f, nothing, restoreFlags()
	}
	return pf, func() error {
		// Closing first wakes a read still parked on the poller, which
		// would otherwise go on in blocking mode.
		pf.Close()
		return restoreFlags()
	}, nil
}

// sharesFile says whether one of files is, or may be, the pipe or socket
// whose status is st: the same inode (the other end of the same pipe too,
// which is only as cautious).
func sharesFile(st unix.Stat_t, files []*os.File) bool {
	for _, f := range files {
		if f == nil {
			continue
		}
		rc, err := f.SyscallConn()
		if err != nil {
			continue // closed: nothing is written to it
		}
		var other unix.Stat_t
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &other) }); err == nil && serr == nil && other.Dev == st.Dev && other.Ino == st.Ino {
			return true
		}
	}
	return false
}
