package serialline

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/internal/testenv"
)

// ptyPair is a socat pseudo-terminal pair; unplug ends it.
func ptyPair(t *testing.T) (a, b string, unplug func()) {
	t.Helper()
	if _, err := exec.LookPath("socat"); err != nil {
		testenv.Missing(t, "socat is missing: apt-get install socat (.ci/run installs it)")
	}
	dir := t.TempDir()
	a, b = filepath.Join(dir, "a"), filepath.Join(dir, "b")
	cmd := exec.Command("socat", "pty,raw,echo=0,link="+a, "pty,raw,echo=0,link="+b)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	unplug = func() {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
			cmd.Process = nil
		}
	}
	t.Cleanup(unplug)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, errA := os.Stat(a)
		_, errB := os.Stat(b)
		if errA == nil && errB == nil {
			return a, b, unplug
		}
		if time.Now().After(end) {
			t.Fatal("socat did not create the pty pair")
		}
	}
}

func openLine(t *testing.T, path string) *Line {
	t.Helper()
	l, err := Open(path, 115200)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// readLine reads one line from r within 5 s.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		s, err := r.ReadString('\n')
		if err != nil {
			s = "error: " + err.Error()
		}
		got <- s
	}()
	select {
	case s := <-got:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("no line within 5 s")
		return ""
	}
}

// Lines cross the pair both ways byte for byte (raw: a carriage return and
// control bytes are not translated, nothing is echoed back).
func TestLinesCrossRaw(t *testing.T) {
	pa, pb, _ := ptyPair(t)
	a, b := openLine(t, pa), openLine(t, pb)
	ra, rb := bufio.NewReader(a), bufio.NewReader(b)
	msg := "{\"jsonrpc\":\"2.0\",\"id\":1}\r\x03\x11\n"
	if _, err := a.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, rb); got != msg {
		t.Errorf("b read %q, a wrote %q", got, msg)
	}
	if _, err := b.Write([]byte("answer\n")); err != nil {
		t.Fatal(err)
	}
	if got := readLine(t, ra); got != "answer\n" {
		t.Errorf("a read %q (an echo of its own line?)", got)
	}
}

// A Read waiting on a line ends when the line is closed, and a peer that
// goes away (an adapter unplugged) ends it with an error.
func TestWaitingReadsEnd(t *testing.T) {
	pa, pb, unplug := ptyPair(t)
	a, b := openLine(t, pa), openLine(t, pb)
	done := make(chan error, 2)
	go func() { _, err := a.Read(make([]byte, 10)); done <- err }()
	go func() { _, err := b.Read(make([]byte, 10)); done <- err }()
	time.Sleep(50 * time.Millisecond) // both waiting
	a.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a Read on a closed line returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the Read waiting on the line")
	}
	unplug()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a Read on an unplugged line returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the end of the pty pair did not end the Read waiting on it")
	}
}

// A Read waiting on the line holds no OS thread in select(2) (the point of
// the package): it waits on Go's poller, with every other descriptor.
func TestWaitingReadsHoldNoThread(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the threads' wait channels in /proc")
	}
	// inSelect counts this process's threads asleep in select(2) or poll(2)
	inSelect := func() (n int, waits []string) {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			w, _ := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "wchan"))
			waits = append(waits, string(w))
			if strings.Contains(string(w), "select") || strings.HasPrefix(string(w), "poll_schedule") {
				n++
			}
		}
		return n, waits
	}
	var lines []*Line
	for range 4 {
		pa, _, _ := ptyPair(t)
		lines = append(lines, openLine(t, pa))
	}
	for _, l := range lines {
		go l.Read(make([]byte, 10))
	}
	time.Sleep(200 * time.Millisecond)
	if n, waits := inSelect(); n > 0 {
		t.Errorf("%d lines waiting: %d threads in select(2) or poll(2); the threads wait in %q", len(lines), n, waits)
	}
}
