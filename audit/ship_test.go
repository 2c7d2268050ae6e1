package audit

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stuckSender never answers, like a sink that accepts connections and hangs.
type stuckSender struct{ calls chan struct{} }

func (s stuckSender) Send(ctx context.Context, _ [][]byte) error {
	s.calls <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func (stuckSender) Close() error { return nil }

func TestShipNeverBlocksAppend(t *testing.T) {
	l, err := Open(t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := stuckSender{calls: make(chan struct{}, 1)}
	sh, err := Ship(l, s, ShipOptions{Sink: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(map[string]any{"n": 0}); err != nil {
		t.Fatal(err)
	}
	<-s.calls // the shipper is inside Send now
	start := time.Now()
	for i := range 200 {
		if err := l.Append(map[string]any{"n": i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("200 appends took %v with the sink hanging", d)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Written() != 201 || sh.Shipped() != 0 {
		t.Errorf("written %d, shipped %d; want 201 and 0", l.Written(), sh.Shipped())
	}
	if _, err := os.Stat(filepath.Join(l.dir, cursorFile)); !os.IsNotExist(err) {
		t.Errorf("a position was saved though the sink took nothing: %v", err)
	}
}

// recorder takes every batch.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) Send(_ context.Context, lines [][]byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range lines {
		r.lines = append(r.lines, string(l))
	}
	return nil
}

func (r *recorder) Close() error { return nil }

func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		got := len(r.lines)
		r.mu.Unlock()
		if got >= n {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// Files past retention go whether shipped or not (the queue is bounded by
// the trail): the shipper resumes at the oldest file kept; and a cursor
// saved for another sink is not used.
func TestShipAcrossDaysAndRetention(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	fill(t, dir, c, 2, 3, 2) // days 0..2, two lines each
	l, err := Open(dir, 2, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	first := &recorder{}
	sh, err := Ship(l, first, ShipOptions{Sink: "a", MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := first.wait(t, 4) // day 0 is past retention already
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("shipped %d lines, want the 4 kept", len(got))
	}
	var cur cursor
	b, err := os.ReadFile(filepath.Join(dir, cursorFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cur); err != nil {
		t.Fatal(err)
	}
	if want := day(time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC), 0); cur.File != want || cur.Line != 2 {
		t.Errorf("position %+v, want %s line 2", cur, want)
	}

	// the position names a file that retention removes before it is shipped
	if err := writeCursor(filepath.Join(dir, cursorFile), cursor{Sink: "a", File: day(c.t, -2), Line: 1}); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.AddDate(0, 0, 1)
	if err := l.Append(map[string]any{"n": "new"}); err != nil { // rotates and prunes
		t.Fatal(err)
	}
	again := &recorder{}
	if sh, err = Ship(l, again, ShipOptions{Sink: "a"}); err != nil {
		t.Fatal(err)
	}
	if got := again.wait(t, 3); len(got) != 3 {
		t.Errorf("after the removal, shipped %d lines, want 3 (two of the oldest day kept, one new)", len(got))
	}
	sh.Close()

	other := &recorder{}
	if sh, err = Ship(l, other, ShipOptions{Sink: "b"}); err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if got := other.wait(t, 3); len(got) != 3 {
		t.Errorf("a new sink got %d lines, want the 3 kept", len(got))
	}
}

// flaky fails every send until healed.
type flaky struct {
	recorder
	healed atomic.Bool
	failed chan struct{}
}

func (f *flaky) Send(ctx context.Context, lines [][]byte) error {
	if !f.healed.Load() {
		select {
		case f.failed <- struct{}{}:
		default:
		}
		return errors.New("sink down")
	}
	return f.recorder.Send(ctx, lines)
}

// Shipped and Failing follow the sink through an outage.
func TestShipperCountsAndFailing(t *testing.T) {
	l, err := Open(t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := &flaky{failed: make(chan struct{}, 1)}
	sh, err := Ship(l, s, ShipOptions{Sink: "flaky", MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	for i := range 3 {
		if err := l.Append(map[string]any{"n": i}); err != nil {
			t.Fatal(err)
		}
	}
	<-s.failed
	<-s.failed // the flag is set between the first failure and the second send
	if !sh.Failing() || sh.Shipped() != 0 {
		t.Fatalf("sink down: failing %v, shipped %d", sh.Failing(), sh.Shipped())
	}
	s.healed.Store(true)
	s.wait(t, 3)
	for deadline := time.Now().Add(10 * time.Second); sh.Shipped() < 3 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	if sh.Failing() || sh.Shipped() != 3 || l.Written() != 3 {
		t.Fatalf("sink back: failing %v, shipped %d, written %d", sh.Failing(), sh.Shipped(), l.Written())
	}
}
