package audit

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A trail checked while physmcpd appends to it: Verify read HEAD, then the
// lines written after it. They chain, so the trail holds; a torn last line
// after HEAD is a write in progress. A torn line HEAD names does not hold.
func TestVerifyWhileAppending(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 1, 3)
	headPath := filepath.Join(dir, headFile)
	seen, err := os.ReadFile(headPath) // what Verify read before the appends
	if err != nil {
		t.Fatal(err)
	}
	c.t = t0
	fill(t, dir, c, 0, 1, 3)
	if err := os.WriteFile(headPath, seen, 0o600); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, dir, 6)

	p := filepath.Join(dir, day(t0, 0))
	whole, _ := os.ReadFile(p)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"prev":"0123","tool":"do_`) // the next line, half written
	f.Close()
	mustVerify(t, dir, 6)

	// HEAD at the last whole line, which has lost its newline
	c.t = t0
	fill(t, dir, c, 0, 1, 0) // brings HEAD to the end (and drops the torn line)
	rewrite(t, p, [][]byte{whole[:len(whole)-1]})
	wantBreak(t, dir, day(t0, 0), 6)
}

// The line HEAD names is checked even when lines follow it.
func TestVerifyChecksTheLineHeadNames(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 1, 3)
	headPath := filepath.Join(dir, headFile)
	seen, _ := os.ReadFile(headPath)
	c.t = t0
	fill(t, dir, c, 0, 1, 1)
	if err := os.WriteFile(headPath, seen, 0o600); err != nil {
		t.Fatal(err)
	}
	// HEAD's hash rewritten, as if line 3 had been altered and HEAD not
	h, err := readHead(headPath)
	if err != nil {
		t.Fatal(err)
	}
	h.Hash = hashLine([]byte("another line 3"))
	if err := writeHeadFile(headPath, *h); err != nil {
		t.Fatal(err)
	}
	wantBreak(t, dir, day(t0, 0), 3)
}

// Verify runs beside writers, as `audit verify` beside serve with
// defaults.audit_all: every check passes and counts whole lines only.
func TestVerifyBesideWriters(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// serve's trail has HEAD before anyone can call: Open writes the keyed line
	if err := l.Append(map[string]any{"event": "start"}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := l.Append(map[string]any{"tool": "read_air_temperature", "writer": w, "i": i, "pad": strings.Repeat("x", 200)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	checks, last := 0, 0
	for ; checks < 100 || last < 1000; checks++ {
		rep, err := Verify(dir)
		if err != nil {
			t.Errorf("check %d (%d lines before): %v", checks+1, last, err)
			break
		}
		if rep.Lines < last {
			t.Errorf("check %d counted %d lines, the one before %d", checks+1, rep.Lines, last)
		}
		last = rep.Lines
	}
	close(stop)
	wg.Wait()
	t.Logf("%d checks beside 4 writers, the last of %d lines", checks, last)
}
