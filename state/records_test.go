package state

import (
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
