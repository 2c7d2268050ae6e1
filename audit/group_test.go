package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Lines appended while others are being written queue, and are written
// next, together, in one chain.
func TestConcurrentAppendsShareAWrite(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	l, err := Open(dir, 0, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 64
	l.mu.Lock() // the first caller's write waits here; the others queue behind it
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = l.Append(map[string]any{"tool": "do_fan", "i": i}) })
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.qmu.Lock()
		queued := len(l.queue)
		l.qmu.Unlock()
		if queued == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d appends queued, want %d", queued, n-1)
		}
	}
	l.mu.Unlock()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, dir, n)
	if got := l.Written(); got != n {
		t.Fatalf("Written = %d, want %d", got, n)
	}
}

// A crash between a write of several lines and its HEAD update leaves HEAD
// behind: that is no tampering as long as HEAD still names its line as it was.
func TestHeadBehindAWrite(t *testing.T) {
	for _, tc := range []struct {
		name     string
		behind   int
		tampered bool
	}{
		{"one write behind", 10, false},
		{"the line HEAD names was edited", 10, true},
		{"further behind than a write can be", maxBatch + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := &clock{t0}
			fill(t, dir, c, 0, 1, 3)
			head, err := os.ReadFile(filepath.Join(dir, headFile))
			if err != nil {
				t.Fatal(err)
			}
			c.t = t0
			fill(t, dir, c, 0, 1, tc.behind)
			os.WriteFile(filepath.Join(dir, headFile), head, 0o600) // as if the last HEAD update never happened
			p := filepath.Join(dir, day(t0, 0))
			if tc.name == "the line HEAD names was edited" {
				ls := lines(t, p)
				ls[2] = []byte(strings.Replace(string(ls[2]), `"i":2`, `"i":9`, 1))
				rewrite(t, p, ls)
			}
			_, verr := Verify(dir)
			c.t = t0
			fill(t, dir, c, 0, 1, 1)
			b, _ := os.ReadFile(p)
			if got := strings.Contains(string(b), EventHeadMismatch); got != tc.tampered {
				t.Fatalf("a %s line written at Open: %v, want %v", EventHeadMismatch, got, tc.tampered)
			}
			if (verr != nil) != tc.tampered {
				t.Fatalf("Verify before the restart = %v; want a break: %v", verr, tc.tampered)
			}
			if !tc.tampered {
				mustVerify(t, dir, 3+tc.behind+1)
			}
		})
	}
}
