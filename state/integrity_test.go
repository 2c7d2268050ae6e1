package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// record is a realistic do_* outcome (about 400 bytes of JSON, 190 encoded).
func record(i int) engine.Record {
	hint := fmt.Sprintf("do_fan_speed value=%d", i%100)
	return engine.Record{Fingerprint: fmt.Sprintf("fp-%06d-%s", i, strings.Repeat("f", 48)), Tool: "do_fan_speed", At: t0, Seq: uint64(i), SentAt: t0,
		Response: promcp.DoResponse{Status: promcp.StatusSuccess, IdempotencyKey: fmt.Sprintf("key-%06d", i), AppliedValue: float64(i % 100),
			PreviousValue: 40.0, SideEffects: []string{"airflow changes within 2 s"}, Compensable: true, CompensationHint: &hint,
			Timestamp: t0.Format(time.RFC3339Nano), DeviceID: "greenhouse_north_01"}}
}

// fill creates a store in dir holding n records and n/100 write histories,
// written in one transaction (n fsync'd Saves would take minutes).
func fill(t testing.TB, dir string, n int) {
	t.Helper()
	s, err := Open(dir, func() time.Time { return t0 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			key := fmt.Sprintf("key-%06d", i)
			v, err := engine.EncodeRecord(key, record(i))
			if err != nil {
				return err
			}
			if err := put(tx, key, v, t0); err != nil {
				return err
			}
		}
		for i := range n / 100 {
			v, _ := json.Marshal(history{Writes: []time.Time{t0}, Last: t0, LastValue: 1.0})
			if err := tx.Bucket(bucketWrites).Put(fmt.Appendf(nil, "do_point_%04d", i), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func openAt(dir string) (*Store, error) { return Open(dir, func() time.Time { return t0 }, nil) }

// wantBroken asserts a *BrokenError about file whose problem contains want.
func wantBroken(t *testing.T, err error, file, want string) {
	t.Helper()
	var b *BrokenError
	if !errors.As(err, &b) || b.File != file || !strings.Contains(b.Problem, want) {
		t.Fatalf("got %v; want a BrokenError about %s containing %q", err, file, want)
	}
	for _, advice := range []string{"state check --state-dir", "state reset --state-dir", "refuses to start"} {
		if !strings.Contains(err.Error(), advice) {
			t.Errorf("the error does not say %q: %v", advice, err)
		}
	}
}

// pageOf returns the offset of the page of path holding needle, and the page size.
func pageOf(t *testing.T, path string, needle string) (int64, int) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	size := db.Info().PageSize
	db.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte(needle))
	if i < 0 {
		t.Fatalf("%q is not in %s", needle, path)
	}
	return int64(i / size * size), size
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestNewStoreRecordsItsID(t *testing.T) {
	dir := t.TempDir()
	s, err := openAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	id, err := pathsIn(dir).readID()
	if err != nil || len(id) != 32 {
		t.Fatalf("state.id holds %q, %v", id, err)
	}
	rep, err := Check(dir)
	if err != nil || rep.StoreID != id || len(rep.Notes) != 0 {
		t.Fatalf("Check = %+v, %v; want store %s", rep, err, id)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Fatalf("the directory holds %v; want state.db, state.id and state.log only (no temporary files)", entries)
	}
}

// TestStoreLostIsRefused: a state.db truncated, deleted or swapped for
// another store's is refused, and never replaced by an empty store.
func TestStoreLostIsRefused(t *testing.T) {
	other := t.TempDir()
	fill(t, other, 10)
	for _, tc := range []struct {
		name, want string
		damage     func(db string)
	}{
		{"truncated to zero", "is empty (0 bytes)", func(db string) { os.Truncate(db, 0) }},
		{"truncated to one page", "is not a readable bbolt database", func(db string) { os.Truncate(db, 4096) }},
		{"deleted", "is missing, but", func(db string) { os.Remove(db) }},
		{"replaced by another store", "the database was replaced by another store's", func(db string) {
			data, _ := os.ReadFile(filepath.Join(other, FileName))
			os.WriteFile(db, data, 0o600)
		}},
		{"replaced by a store without an id", "has no store id", func(db string) {
			os.Remove(db)
			legacy, _ := bolt.Open(db, 0o600, nil)
			legacy.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(legacyKeys); return err })
			legacy.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fill(t, dir, 10)
			db := filepath.Join(dir, FileName)
			tc.damage(db)
			before, _ := os.ReadFile(db)
			_, err := openAt(dir)
			wantBroken(t, err, db, tc.want)
			if after, _ := os.ReadFile(db); !bytes.Equal(before, after) {
				t.Fatal("Open changed the refused state.db")
			}
			if _, err := Check(dir); !errors.As(err, new(*BrokenError)) {
				t.Fatalf("Check = %v; want the same refusal", err)
			}
		})
	}
}

// TestCorruptedPageIsRefused: a damaged page is found when the store is
// opened, as an error rather than a bbolt panic later.
func TestCorruptedPageIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		damage     func(t *testing.T, db string)
	}{
		{"leaf page garbled", "is corrupted", func(t *testing.T, db string) {
			off, size := pageOf(t, db, "fp-000500-")
			overwrite(t, db, off, bytes.Repeat([]byte{0xa5}, size))
		}},
		{"a page points past the end of the mapping", "index out of range", func(t *testing.T, db string) {
			pointAt(t, db, 1<<40)
		}},
		{"a page points past the end of the file", "invalid memory address", func(t *testing.T, db string) {
			// beyond the file but inside bbolt's mapping: a memory fault, fatal to the
			// whole process unless SetPanicOnFault is on. bbolt maps the next power of
			// two above the file's size, so shrink the file to the pages in use first.
			data, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			_, size := pageOf(t, db, "fp-000500-")
			used := int64(binary.LittleEndian.Uint64(currentMeta(data, size)[40:])) * int64(size)
			mapped := int64(32 << 10)
			for mapped < used {
				mapped *= 2
			}
			if mapped == used {
				t.Fatalf("%d bytes in use fill bbolt's mapping: no page lies beyond the file", used)
			}
			if err := os.Truncate(db, used); err != nil {
				t.Fatal(err)
			}
			pointAt(t, db, uint64(mapped/int64(size))-1)
		}},
		{"the freelist page garbled", "is not a readable bbolt database (bbolt: ", func(t *testing.T, db string) {
			data, err := os.ReadFile(db)
			if err != nil {
				t.Fatal(err)
			}
			_, size := pageOf(t, db, "fp-000500-")
			freelist := int64(binary.LittleEndian.Uint64(currentMeta(data, size)[32:])) * int64(size)
			overwrite(t, db, freelist, bytes.Repeat([]byte{0xa5}, size))
		}},
		{"both meta pages garbled", "is not a readable bbolt database", func(t *testing.T, db string) {
			overwrite(t, db, 0, bytes.Repeat([]byte{0xff}, 8192))
		}},
		{"a page in use is also listed as free", "reachable freed", func(t *testing.T, db string) {
			// only bbolt's check finds this: every page still reads well
			markFree(t, db, "fp-000500-")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fill(t, dir, 2000)
			db := filepath.Join(dir, FileName)
			tc.damage(t, db)
			_, err := openAt(dir)
			wantBroken(t, err, db, tc.want)
		})
	}
}

// markFree adds the page holding needle to the freelist of the current meta
// page, as a torn or misdirected write could: bbolt would later hand the page
// out again and overwrite records still in use.
func markFree(t *testing.T, path, needle string) {
	off, size := pageOf(t, path, needle)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fl := int(binary.LittleEndian.Uint64(currentMeta(data, size)[32:])) * size
	count := int(binary.LittleEndian.Uint16(data[fl+10:])) // page header: id (8), flags (2), count (2), overflow (4)
	if count >= 0xffff || 16+(count+1)*8 > size {
		t.Fatalf("freelist of %d pages: too long for this test", count)
	}
	ids := []uint64{uint64(off) / uint64(size)}
	for i := range count {
		ids = append(ids, binary.LittleEndian.Uint64(data[fl+16+i*8:]))
	}
	slices.Sort(ids)
	page := binary.LittleEndian.AppendUint16(nil, uint16(count+1))
	page = append(page, 0, 0, 0, 0)
	for _, id := range ids {
		page = binary.LittleEndian.AppendUint64(page, id)
	}
	overwrite(t, path, int64(fl+10), page)
}

// pointAt turns the page holding "fp-000500-" into a branch page whose one
// element points at page to.
func pointAt(t *testing.T, path string, to uint64) {
	t.Helper()
	off, _ := pageOf(t, path, "fp-000500-")
	// after the page id: flags (branch), count 1, overflow 0; then the element: pos 16, key size 0, page id
	b := []byte{0x01, 0, 1, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0}
	overwrite(t, path, off+8, binary.LittleEndian.AppendUint64(b, to))
}

// TestMissingIDIsRestored: state.id alone lost (or never written, by a crash
// after the store was created, or by an older physmcpd) loses no records, so
// Open writes it again.
func TestMissingIDIsRestored(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 10)
	p := pathsIn(dir)
	id, _ := p.readID()
	os.Remove(p.id)
	if rep, err := Check(dir); err != nil || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "state.id is missing") {
		t.Fatalf("Check = %+v, %v; want a note that state.id is missing", rep, err)
	}
	s, err := openAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Load("key-000003"); !ok {
		t.Fatal("a record was lost")
	}
	s.Close()
	if got, _ := p.readID(); got != id {
		t.Fatalf("state.id holds %q, want the id inside state.db %q", got, id)
	}

	// a store made before state.id existed is given an id
	legacy := t.TempDir()
	db, _ := bolt.Open(filepath.Join(legacy, FileName), 0o600, nil)
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket(legacyKeys); return err })
	db.Close()
	if rep, err := Check(legacy); err != nil || len(rep.Notes) != 2 || !strings.Contains(rep.Notes[0], "no id yet") || !strings.Contains(rep.Notes[1], "format 1") {
		t.Fatalf("Check = %+v, %v; want notes that the store has no id and is of format 1", rep, err)
	}
	if s, err = openAt(legacy); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if rep, err := Check(legacy); err != nil || rep.StoreID == "" || len(rep.Notes) != 0 {
		t.Fatalf("Check after Open = %+v, %v; want an id", rep, err)
	}
}

func TestBadIDFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 1)
	p := pathsIn(dir)
	for _, content := range []string{"", "not an id\n", "# comment only\n", strings.Repeat("ab", 16) + "\n" + strings.Repeat("cd", 16) + "\n"} {
		os.WriteFile(p.id, []byte(content), 0o600)
		_, err := openAt(dir)
		wantBroken(t, err, p.id, "is not a store id file")
	}
}

func TestCheckAndResetRefuseWhatTheyShould(t *testing.T) {
	dir := t.TempDir()
	if _, err := Check(filepath.Join(dir, "none")); err == nil || errors.Is(err, ErrNoStore) {
		t.Fatalf("Check of a missing directory = %v", err)
	}
	if _, err := Check(dir); !errors.Is(err, ErrNoStore) {
		t.Fatalf("Check of an empty directory = %v; want ErrNoStore", err)
	}
	if _, err := Reset(dir, t0); !errors.Is(err, ErrNoStore) {
		t.Fatalf("Reset of an empty directory = %v; want ErrNoStore", err)
	}
	fill(t, dir, 100)
	rep, err := Check(dir)
	if err != nil || rep.Records != 100 || rep.Histories != 1 || rep.Bytes == 0 {
		t.Fatalf("Check = %+v, %v; want 100 records, 1 history", rep, err)
	}
	if _, err := Reset(dir, t0); !errors.Is(err, ErrIntact) {
		t.Fatalf("Reset of a sound store = %v; want ErrIntact", err)
	}
	// a running physmcpd holds the store: neither may touch it
	s, err := openAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lockWaitLimit = 50 * time.Millisecond
	defer func() { lockWaitLimit = 2 * time.Second }()
	os.Remove(filepath.Join(dir, IDFileName)) // would make it resettable if it were not held
	for name, err := range map[string]error{"Check": second(Check(dir)), "Reset": second(Reset(dir, t0))} {
		if err == nil || !strings.Contains(err.Error(), "another physmcpd holds it") {
			t.Errorf("%s of a store in use = %v", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestResetKeepsWhatCanBeRead: reset moves a corrupted store aside and
// copies every record it can still read into the new one.
func TestResetKeepsWhatCanBeRead(t *testing.T) {
	dir := t.TempDir()
	const n = 2000
	fill(t, dir, n)
	db := filepath.Join(dir, FileName)
	off, size := pageOf(t, db, "fp-001000-")
	overwrite(t, db, off, bytes.Repeat([]byte{0xa5}, size))
	damaged, _ := os.ReadFile(db)
	oldID, _ := pathsIn(dir).readID()

	rep, err := Reset(dir, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if moved, _ := os.ReadFile(rep.MovedTo); !bytes.Equal(moved, damaged) || filepath.Base(rep.MovedTo) != "state.db.broken-20260304T060607Z" {
		t.Fatalf("the damaged store was not moved intact to state.db.broken-<time>: %s", rep.MovedTo)
	}
	// one leaf page holds a few dozen records: those are lost, the rest kept
	if rep.Records < n-100 || rep.Records >= n || rep.Histories != n/100 || rep.Lost == nil || rep.StoreID == oldID {
		t.Fatalf("Reset = %+v; want most of %d records, %d histories, a reason for the loss, a new id", rep, n, n/100)
	}
	if got, _ := pathsIn(dir).readID(); got != rep.StoreID {
		t.Fatalf("state.id holds %s, want the new store %s", got, rep.StoreID)
	}
	s, err := Open(dir, func() time.Time { return t0.Add(time.Hour) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Load("key-000001"); !ok || r.Response.IdempotencyKey != "key-000001" {
		t.Fatalf("a salvaged record: %+v, %v", r, ok)
	}
	if _, ok := s.Load("key-001000"); ok {
		t.Fatal("a record from the damaged page came back")
	}
	if h, err := s.LoadWrites(); err != nil || len(h) != n/100 {
		t.Fatalf("histories %d, %v", len(h), err)
	}

	s.Close()

	// a store truncated to nothing has nothing to salvage; the new one is empty
	os.Truncate(filepath.Join(dir, FileName), 0)
	rep, err = Reset(dir, t0.Add(2*time.Hour))
	if err != nil || rep.Records != 0 || rep.Lost == nil {
		t.Fatalf("Reset of an empty file = %+v, %v", rep, err)
	}
	if _, err := Check(dir); err != nil {
		t.Fatalf("Check after Reset: %v", err)
	}
}

// BenchmarkVerify measures what the start-up check costs on a store of
// 50,000 idempotency records (about a day of a busy device's do_* calls):
// go test -run X -bench Verify ./state
func BenchmarkVerify(b *testing.B) {
	dir := b.TempDir()
	fill(b, dir, 50_000)
	for b.Loop() {
		db, err := openVerified(pathsIn(dir), true)
		if err != nil {
			b.Fatal(err)
		}
		db.Close()
	}
	rep, err := Check(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rep.Bytes)/1e6, "MB")
}

// currentMeta returns the newer of the file's two meta pages, past its page
// header: magic, version, page size, flags (4 bytes each), root bucket (16),
// freelist, pages in use, txid (8 each).
func currentMeta(data []byte, size int) []byte {
	meta := data[16:]
	if m1 := data[size+16:]; binary.LittleEndian.Uint64(m1[48:]) > binary.LittleEndian.Uint64(meta[48:]) {
		meta = m1
	}
	return meta
}
