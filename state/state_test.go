package state

import (
	"strings"
	"testing"
	"time"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func open(t *testing.T, dir string, c *clock) *Store {
	t.Helper()
	s, err := Open(dir, c.now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRecordsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	c := &clock{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := open(t, dir, c)
	intent := engine.Record{Fingerprint: "fp", Tool: "do_x", At: c.t, InDoubt: true,
		Response: promcp.DoResponse{IdempotencyKey: "k1", AppliedValue: 21.5}}
	if err := s.Save("k1", intent); err != nil {
		t.Fatal(err)
	}
	done := intent
	done.InDoubt = false
	done.Response.Status = promcp.StatusSuccess
	if err := s.Save("k2", done); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir, c)
	defer s.Close()
	got, ok := s.Load("k1")
	if !ok || !got.InDoubt || got.Tool != "do_x" || got.Fingerprint != "fp" || got.Response.AppliedValue != 21.5 || !got.At.Equal(c.t) {
		t.Fatalf("k1 after reopen: %+v %v", got, ok)
	}
	if got, ok := s.Load("k2"); !ok || got.InDoubt || got.Response.Status != promcp.StatusSuccess {
		t.Fatalf("k2 after reopen: %+v %v", got, ok)
	}
	doubt, err := s.InDoubt()
	if err != nil || len(doubt) != 1 || doubt["k1"].Tool != "do_x" {
		t.Fatalf("InDoubt = %v, %v; want only k1", doubt, err)
	}
	// the outcome replaces the intent
	if err := s.Save("k1", done); err != nil {
		t.Fatal(err)
	}
	if doubt, _ := s.InDoubt(); len(doubt) != 0 {
		t.Fatalf("InDoubt after the outcome = %v", doubt)
	}
	if _, ok := s.Load("missing"); ok {
		t.Fatal("a key never saved was found")
	}
}

func TestExpiredRecordsArePruned(t *testing.T) {
	dir := t.TempDir()
	c := &clock{time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	s := open(t, dir, c)
	for _, k := range []string{"old1", "old2"} {
		if err := s.Save(k, engine.Record{At: c.t}); err != nil {
			t.Fatal(err)
		}
	}
	// resaving moves a key in the time index: old2 is young again
	c.t = c.t.Add(engine.KeyRetention - time.Hour)
	if err := s.Save("old2", engine.Record{At: c.t}); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(2 * time.Hour) // old1 is now past retention, old2 is not
	if _, ok := s.Load("old1"); ok {
		t.Fatal("an expired record was served")
	}
	n, err := s.Prune()
	if err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if _, ok := s.Load("old2"); !ok {
		t.Fatal("a live record was pruned")
	}
	s.Close()
	// Open prunes too
	c.t = c.t.Add(engine.KeyRetention)
	s = open(t, dir, c)
	defer s.Close()
	if n, _ := s.Prune(); n != 0 {
		t.Fatalf("Open left %d expired records", n)
	}
}

func TestWriteHistory(t *testing.T) {
	dir := t.TempDir()
	c := &clock{time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)}
	s := open(t, dir, c)
	t0 := c.t
	for i, v := range []any{1.0, 2.0, 3.0} {
		if err := s.RecordWrite("do_fan", engine.Write{At: t0.Add(time.Duration(i) * time.Minute), Value: v, Seq: uint64(i + 1)}, 90*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// a confirmed in-doubt write older than the latest does not become "last"
	if err := s.RecordWrite("do_fan", engine.Write{At: t0.Add(90 * time.Second), Value: 9.0, Seq: 9, Key: "k9"}, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir, c)
	defer s.Close()
	h, err := s.LoadWrites()
	if err != nil {
		t.Fatal(err)
	}
	got := h["do_fan"]
	want := []time.Time{t0.Add(time.Minute), t0.Add(90 * time.Second), t0.Add(2 * time.Minute)}
	if len(got.Writes) != len(want) {
		t.Fatalf("writes %v, want %v", got.Writes, want)
	}
	for i := range want {
		if !got.Writes[i].Equal(want[i]) {
			t.Fatalf("writes %v, want %v", got.Writes, want)
		}
	}
	if !got.Last.Equal(t0.Add(2*time.Minute)) || got.LastValue != 3.0 {
		t.Fatalf("last %v = %v, want the 3.0 at +2m", got.Last, got.LastValue)
	}
	// the write numbered last is the one a superseded in-doubt key is told of
	if got.Seq != 9 || got.Key != "k9" {
		t.Fatalf("seq %d key %q, want 9 k9", got.Seq, got.Key)
	}
	// keep 0: only the latest write stays (the cooldown runs from it)
	if err := s.RecordWrite("do_fan", engine.Write{At: t0.Add(3 * time.Minute), Value: 4.0, Seq: 10}, 0); err != nil {
		t.Fatal(err)
	}
	if h, _ := s.LoadWrites(); len(h["do_fan"].Writes) != 1 {
		t.Fatalf("keep 0 left %v", h["do_fan"].Writes)
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	c := &clock{time.Now()}
	s := open(t, dir, c)
	defer s.Close()
	lockWaitLimit = 50 * time.Millisecond
	defer func() { lockWaitLimit = 2 * time.Second }()
	if _, err := Open(dir, c.now, nil); err == nil || !strings.Contains(err.Error(), "another physmcpd") {
		t.Fatalf("second Open: %v", err)
	}
}
