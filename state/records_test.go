package state

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
)

func TestRecordsListsEveryRecordAndSkipsUnreadable(t *testing.T) {
	c := &clock{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := open(t, t.TempDir(), c)
	defer s.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Save("a", engine.Record{Tool: "do_x", At: c.t, InDoubt: true}))
	must(s.Save("b", engine.Record{Tool: "do_y", At: c.t}))
	must(second(s.checkpoint()))
	must(s.db.Update(func(tx *bolt.Tx) error { return put(tx, "bad", []byte("{"), c.t) }))
	must(s.Save("c", engine.Record{Tool: "do_z", At: c.t}))

	var keys []string
	err := s.Records(func(key string, r engine.Record) error {
		keys = append(keys, key+":"+r.Tool)
		return nil
	})
	if want := []string{"a:do_x", "b:do_y", "c:do_z"}; !slices.Equal(keys, want) {
		t.Fatalf("records %v, want %v", keys, want)
	}
	if err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Fatalf("error %v, want the unreadable record named", err)
	}
}

// A record saved twice before a checkpoint is put once, as its newest
// version: its slot is that version's time, not the first's.
func TestCheckpointPutsOnlyTheNewestVersion(t *testing.T) {
	c := &clock{time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := open(t, t.TempDir(), c)
	defer s.Close()
	noCheckpoints(t)
	intent, outcome := engine.Record{Tool: "do_x", At: c.t, InDoubt: true}, engine.Record{Tool: "do_x", At: c.t.Add(time.Second)}
	for _, r := range []engine.Record{intent, outcome} {
		if err := s.Save("k", r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		if slot := tx.Bucket(bucketIndex).Get([]byte("k")); !bytes.Equal(slot, timeSlot(outcome.At)) {
			t.Errorf("slot %x, want the outcome's %x (the intent's: %x)", slot, timeSlot(outcome.At), timeSlot(intent.At))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Load("k"); !ok || r.InDoubt || !r.At.Equal(outcome.At) {
		t.Fatalf("loaded %+v %v, want the outcome", r, ok)
	}
}
