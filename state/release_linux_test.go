package state

import (
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/internal/pagemap"
)

// Once the store has been idle a while, its mapping of state.db leaves the
// process's page tables, and the store reads and writes as before.
func TestIdleStoreReleasesStateDBPages(t *testing.T) {
	noCheckpoints(t) // the test kicks the only checkpoints
	was := idleRelease
	idleRelease = 10 * time.Millisecond
	t.Cleanup(func() { idleRelease = was })
	dir := t.TempDir()
	c := &clock{t0}
	s := open(t, dir, c)
	const n = 1500
	for i := range n {
		if err := s.Save(fmt.Sprintf("key-%d", i*7919%n), engine.Record{Tool: "do_x", At: c.t, Seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	// Every transaction reads a meta page through the mapping (and with it
	// the 64 KiB around it), so the mapping is found once and its page tables
	// read without one.
	var addr, size uintptr
	if err := s.db.View(func(tx *bolt.Tx) error {
		addr, size = s.db.Info().Data, uintptr(tx.Size())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pages := int(size) / s.db.Info().PageSize
	present := func() int {
		t.Helper()
		resident, err := pagemap.Present(addr, size)
		if err != nil {
			t.Fatal(err)
		}
		return resident
	}
	count := func() int {
		t.Helper()
		got := 0
		if err := s.Records(func(string, engine.Record) error { got++; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := count(); got != n {
		t.Fatalf("%d records in state.db; want %d", got, n)
	}
	// The start-up's release is long past and nothing re-arms it until a
	// checkpoint: the pages the walk touched stay.
	if resident := present(); pages < 20 || resident < pages/2 {
		t.Fatalf("%d of state.db's %d pages mapped after reading every record; want most", resident, pages)
	}
	s.w.kickCheckpoint()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		resident := present()
		if resident == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of state.db's %d pages still mapped 10 s after the last checkpoint", resident, pages)
		}
	}
	if got := count(); got != n {
		t.Fatalf("%d records in state.db after releasing its pages; want %d", got, n)
	}
	if r, ok := s.Load("key-42"); !ok || r.Tool != "do_x" {
		t.Fatalf("Load(key-42) after releasing the pages = %+v, %v", r, ok)
	}
	if err := s.Save("new", engine.Record{Tool: "do_y", At: c.t}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, c)
	defer s.Close()
	if r, ok := s.Load("new"); !ok || r.Tool != "do_y" {
		t.Fatalf("Load(new) after reopening = %+v, %v; want the record saved after the release", r, ok)
	}
	if got := count(); got != n+1 {
		t.Fatalf("%d records after reopening; want %d", got, n+1)
	}
}
