package pollfile

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockingPipe is a pipe as a client hands it to physmcpd's stdin: both
// ends blocking, so os.NewFile leaves them off the poller (os.Pipe would
// put them on it).
func blockingPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	var ferr error
	if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
		t.Fatal(err, ferr)
	}
	return flags&unix.O_NONBLOCK != 0
}

func TestPipeIsReadOnThePoller(t *testing.T) {
	r, w := blockingPipe(t)
	if err := r.SetReadDeadline(time.Time{}); !errors.Is(err, os.ErrNoDeadline) {
		t.Fatalf("the pipe is on the poller before Reader (%v): the test proves nothing", err)
	}
	pf, restore, err := Reader(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.SetReadDeadline(time.Time{}); err != nil {
		t.Fatalf("the file Reader returns is not on the poller: %v", err)
	}
	if !nonblocking(t, r) {
		t.Error("the pipe is not O_NONBLOCK while read")
	}
	if _, err := w.WriteString("hello\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(pf).ReadString('\n'); err != nil || line != "hello\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	// A read parked on the poller ends when restore closes the file.
	parked := make(chan error, 1)
	go func() {
		_, err := pf.Read(make([]byte, 1))
		parked <- err
	}()
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if err := <-parked; !errors.Is(err, os.ErrClosed) {
		t.Errorf("parked read: %v, want os.ErrClosed", err)
	}
	if nonblocking(t, r) {
		t.Error("restore left the pipe O_NONBLOCK")
	}
	// The original descriptor still reads, blocking as before.
	if _, err := w.WriteString("again\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(r).ReadString('\n'); err != nil || line != "again\n" {
		t.Errorf("read after restore %q, %v", line, err)
	}
}

// socketPair is a connected pair of blocking Unix stream sockets, off the
// poller as a socket handed to physmcpd is.
func socketPair(t *testing.T) (s, peer *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, peer = os.NewFile(uintptr(fds[0]), "s"), os.NewFile(uintptr(fds[1]), "peer")
	t.Cleanup(func() { s.Close(); peer.Close() })
	return s, peer
}

func TestSocketIsReadOnThePoller(t *testing.T) {
	s, _ := socketPair(t)
	pf, restore, err := Reader(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.SetReadDeadline(time.Time{}); err != nil {
		t.Errorf("the socket is not on the poller: %v", err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if nonblocking(t, s) {
		t.Error("restore left the socket O_NONBLOCK")
	}
}

func TestRegularFileIsLeftAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(path, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pf, restore, err := Reader(f)
	if err != nil || pf != f {
		t.Fatalf("Reader(regular file) = %v, %v; want the file itself", pf, err)
	}
	if nonblocking(t, f) {
		t.Error("a regular file was made O_NONBLOCK")
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
}

func TestFileOnThePollerIsLeftAlone(t *testing.T) {
	r, w, err := os.Pipe() // os.Pipe puts both ends on the poller
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pf, restore, err := Reader(r)
	if err != nil || pf != r {
		t.Fatalf("Reader(file on the poller) = %v, %v; want the file itself", pf, err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if !nonblocking(t, r) {
		t.Error("restore made a file that was non-blocking from the start blocking")
	}
}

// A socket that is stdin and stdout at once (socat EXEC, inetd-style socket
// activation) is left blocking: O_NONBLOCK belongs to its one open file, and
// stdout, written off the poller, would then fail with EAGAIN when its
// buffer is full (a large tools/list) instead of waiting.
func TestSocketAlsoWrittenIsLeftAlone(t *testing.T) {
	s, peer := socketPair(t)
	dup, err := unix.FcntlInt(s.Fd(), unix.F_DUPFD_CLOEXEC, 0) // as fd 1 is fd 0's dup
	if err != nil {
		t.Fatal(err)
	}
	out := os.NewFile(uintptr(dup), "out")
	defer out.Close()
	pf, restore, err := Reader(s, peer, out)
	if err != nil || pf != s {
		t.Fatalf("Reader(socket also written) = %v, %v; want the socket itself", pf, err)
	}
	if nonblocking(t, s) || nonblocking(t, out) {
		t.Error("a socket also written was made O_NONBLOCK")
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	// Written files of their own leave the socket to the poller.
	pf, restore, err = Reader(s, peer)
	if err != nil || pf == s {
		t.Fatalf("Reader(socket, its peer) = %v, %v; want a file on the poller", pf, err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
}
