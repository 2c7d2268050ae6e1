package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/promcp"
)

// noCheckpoints keeps changes in the log only, for the rest of the test.
func noCheckpoints(t *testing.T) {
	at, idle := checkpointAt, idleApply
	checkpointAt, idleApply = 1<<40, time.Hour
	t.Cleanup(func() { checkpointAt, idleApply = at, idle })
}

// crashCopy copies the store's files as they are now into a new directory:
// what a crash at this instant would leave (nothing is written meanwhile).
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	for _, name := range []string{FileName, IDFileName, logFileName} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// Every change returned from is in the log, and a crash before it reached
// state.db loses none of them.
func TestLogRecoversUnappliedChanges(t *testing.T) {
	noCheckpoints(t)
	dir := t.TempDir()
	c := &clock{t0}
	s := open(t, dir, c)
	defer s.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Save("k1", engine.Record{Tool: "do_x", At: c.t, InDoubt: true, Seq: 4, SentAt: c.t}))
	// answered once written, before its sync: a crash of the process keeps it too
	must(s.SaveOutcome("k2", engine.Record{Tool: "do_x", At: c.t, Response: promcp.DoResponse{Status: promcp.StatusSuccess, IdempotencyKey: "k2", AppliedValue: 3.0}},
		"do_x", &engine.Write{At: c.t, Value: 3.0, Seq: 5, Key: "k2"}, time.Minute, true))
	must(s.RecordWrite("do_y", engine.Write{At: c.t, Value: true, Seq: 1, Key: "k3"}, 0))
	must(s.SaveOperation(engine.OperationRecord{ID: "op1", Tool: "start_ramp", Key: "k4", State: promcp.OpRunning, Started: c.t}))
	must(s.SaveOperation(engine.OperationRecord{ID: "op2", Tool: "start_ramp", Key: "k5", State: promcp.OpRunning, Started: c.t}))
	must(s.DeleteOperations("op2"))
	// the records are served before they reach state.db
	if r, ok := s.Load("k2"); !ok || r.Response.AppliedValue != 3.0 {
		t.Fatalf("k2 before a checkpoint: %+v %v", r, ok)
	}

	crashed := crashCopy(t, dir)
	rep, err := Check(crashed)
	if err != nil || rep.Records != 0 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "7 changes in state.log are not in state.db yet") {
		t.Fatalf("Check = %+v, %v; want the log's 7 changes noted", rep, err)
	}
	r := open(t, crashed, c)
	defer r.Close()
	if got, ok := r.Load("k1"); !ok || !got.InDoubt || got.Seq != 4 {
		t.Fatalf("k1 after the crash: %+v %v", got, ok)
	}
	if got, ok := r.Load("k2"); !ok || got.InDoubt || got.Response.AppliedValue != 3.0 {
		t.Fatalf("k2 after the crash: %+v %v", got, ok)
	}
	h, err := r.LoadWrites()
	if err != nil || h["do_x"].Seq != 5 || h["do_y"].LastValue != true {
		t.Fatalf("histories after the crash: %+v %v", h, err)
	}
	ops, err := r.LoadOperations()
	if err != nil || len(ops) != 1 || ops[0].ID != "op1" {
		t.Fatalf("operations after the crash: %+v %v", ops, err)
	}
	if rep, err := Check(crashed); err == nil {
		t.Fatalf("Check of a store in use = %+v", rep)
	}
}

// lastEntry returns the offset in state.log of the entry written last and its length.
func lastEntry(t *testing.T, dir string) (int64, int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, logFileName))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var applied int64
	db.View(func(tx *bolt.Tx) error {
		applied = int64(binary.BigEndian.Uint64(tx.Bucket(bucketMeta).Get(keyLogApplied)))
		return nil
	})
	db.Close()
	entries, end, err := readLog(f, logRing, applied)
	if err != nil || len(entries) == 0 {
		t.Fatalf("log: %d entries, %v", len(entries), err)
	}
	n := len(entries[len(entries)-1]) + entryHeader
	return logHeaderSize + (end-int64(n))%logRing, n
}

// A write torn by the crash (never acknowledged) is not applied, nor are the
// entries after it, and an entry left after the tear is never read as new.
func TestLogTornWrite(t *testing.T) {
	noCheckpoints(t)
	dir := t.TempDir()
	c := &clock{t0}
	s := open(t, dir, c)
	defer s.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := s.Save(k, engine.Record{Tool: "do_x", At: c.t}); err != nil {
			t.Fatal(err)
		}
	}
	crashed := crashCopy(t, dir)
	// tear b: the middle entry, as if a's and c's sectors reached the disk and b's did not
	offC, nC := lastEntry(t, crashed)
	data, _ := os.ReadFile(filepath.Join(crashed, logFileName))
	offB := offC - int64(nC)
	data[offB+entryHeader] ^= 0xff
	os.WriteFile(filepath.Join(crashed, logFileName), data, 0o600)

	r := open(t, crashed, c)
	for k, want := range map[string]bool{"a": true, "b": false, "c": false} {
		if _, ok := r.Load(k); ok != want {
			t.Fatalf("after the torn write, %s found: %v", k, ok)
		}
	}
	if err := r.Save("d", engine.Record{Tool: "do_x", At: c.t}); err != nil {
		t.Fatal(err)
	}
	again := crashCopy(t, crashed)
	r.Close()
	r = open(t, again, c)
	defer r.Close()
	for k, want := range map[string]bool{"a": true, "b": false, "c": false, "d": true} {
		if _, ok := r.Load(k); ok != want {
			t.Fatalf("after a second crash, %s found: %v", k, ok)
		}
	}
}

// The ring wraps many times over, batches crossing its end, and a crash
// finds every record written since the last checkpoint in the log; with
// checkpoints in the background as well, none is lost either.
func TestLogWraps(t *testing.T) {
	ring := logRing
	logRing = 8 << 10
	defer func() { logRing = ring }()
	noCheckpoints(t)
	dir := t.TempDir()
	c := &clock{t0}
	s := open(t, dir, c)
	defer s.Close()
	const round = 12 // about 3 KiB of entries: less than half the ring
	save := func(from, to int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, to)
		for i := from; i < to; i++ {
			wg.Go(func() {
				r := record(i)
				r.Response.Reason = strings.Repeat("x", i%97) // entries of many sizes
				errs[i] = s.Save(fmt.Sprintf("key-%06d", i), r)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	check := func(dir string, from, to int) {
		t.Helper()
		r := open(t, dir, c)
		defer r.Close()
		for i := from; i < to; i++ {
			if got, ok := r.Load(fmt.Sprintf("key-%06d", i)); !ok || len(got.Response.Reason) != i%97 {
				t.Fatalf("record %d after the crash: %v", i, ok)
			}
		}
	}
	for i := 0; i < 40*round; i += round {
		save(i, i+round)
		check(crashCopy(t, dir), i, i+round) // from the log alone
		if _, err := s.checkpoint(); err != nil {
			t.Fatal(err)
		}
	}
	s.w.mu.Lock()
	reached := s.w.next
	s.w.mu.Unlock()
	if reached < 10*logRing {
		t.Fatalf("the log reached LSN %d: it did not wrap many times", reached)
	}

	// more than the ring holds at once, made room for by checkpoints
	checkpointAt = 2 << 10
	save(40*round, 100*round)
	check(crashCopy(t, dir), 0, 100*round)
}

// A change answered once written (an outcome the device showed) is answered
// before its sync, found by Load and by a crash of the process at once, and
// synced on its own when no sync is under way; a change that waits for the
// disk is answered only once its sync returns.
func TestWrittenChangeIsAnsweredBeforeItsSync(t *testing.T) {
	noCheckpoints(t)
	hold, began := make(chan struct{}), make(chan struct{}, 4)
	sync := syncLog
	syncLog = func(f *os.File) error {
		began <- struct{}{}
		<-hold
		return sync(f)
	}
	defer func() { syncLog = sync }()
	dir := t.TempDir()
	c := &clock{t0}
	s := open(t, dir, c)
	before := s.Commits()
	out := engine.Record{Tool: "do_x", At: c.t, Response: promcp.DoResponse{Status: promcp.StatusSuccess, IdempotencyKey: "k1", AppliedValue: 3.0}}
	written := make(chan error, 1)
	go func() {
		written <- s.SaveOutcome("k1", out, "do_x", &engine.Write{At: c.t, Value: 3.0, Seq: 1, Key: "k1"}, time.Minute, true)
	}()
	<-began // its sync, held back
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // it waits for the sync: it would never return
		t.Fatal("an outcome the device showed is not answered before its sync")
	}
	if _, ok := s.Load("k1"); !ok {
		t.Fatal("an outcome answered before its sync is not found")
	}
	r := open(t, crashCopy(t, dir), c)
	if _, ok := r.Load("k1"); !ok {
		t.Fatal("an outcome answered before its sync is lost in a crash of the process")
	}
	r.Close()

	saved := make(chan error, 1)
	go func() { saved <- s.Save("k2", engine.Record{Tool: "do_x", At: c.t, InDoubt: true, Seq: 2}) }()
	select {
	case err := <-saved:
		t.Fatalf("a change that waits for the disk was answered before its sync returned (%v)", err)
	case <-began: // k2's sync, beside k1's
	}
	close(hold)
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	if got := s.Commits() - before; got != 2 {
		t.Errorf("%d syncs, want 2", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A change that waits for the disk while a sync some caller waits for is
// under way is synced after it, with everything written meanwhile, not
// beside it: each sync costs the process far more CPU time than its share of
// the disk.
func TestWaitingChangesShareTheNextSync(t *testing.T) {
	noCheckpoints(t)
	began := make(chan chan struct{}, 4)
	sync := syncLog
	syncLog = func(f *os.File) error {
		release := make(chan struct{})
		began <- release
		<-release
		return sync(f)
	}
	defer func() { syncLog = sync }()
	s := open(t, t.TempDir(), &clock{t0})
	before := s.Commits()
	save := func(key string) chan error {
		saved := make(chan error, 1)
		go func() { saved <- s.Save(key, engine.Record{Tool: "do_x", At: t0, InDoubt: true}) }()
		return saved
	}
	k1 := save("k1")
	first := <-began // k1's sync, held
	k2, k3 := save("k2"), save("k3")
	for { // until k2 and k3 are written: each waits for a sync, or has one begun
		s.w.mu.Lock()
		n := s.w.syncsRun - before + int64(s.w.waiting)
		s.w.mu.Unlock()
		if n >= 3 {
			break
		}
		runtime.Gosched()
	}
	close(first)
	if err := <-k1; err != nil {
		t.Fatal(err)
	}
	second := <-began
	select {
	case err := <-k2:
		t.Fatalf("a change that waits for the disk was answered before its sync returned (%v)", err)
	default:
	}
	close(second)
	go func() { // any sync after (with the rule broken, k3's)
		for release := range began {
			close(release)
		}
	}()
	for _, saved := range []chan error{k2, k3} {
		if err := <-saved; err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Commits() - before; got != 2 {
		t.Errorf("%d syncs, want 2 (k1's, then one for k2 and k3)", got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(began)
}

// Changes queued while a write is under way share the next write.
func TestGroupWrite(t *testing.T) {
	s := open(t, t.TempDir(), &clock{t0})
	defer s.Close()
	w := s.w
	before := s.Commits()
	// queue 16 changes at once, as 16 callers arriving during a write would
	w.mu.Lock()
	var changes []*change
	for i := range 16 {
		o := op{kind: opCharge, key: fmt.Sprintf("do_%d", i), write: engine.Write{At: t0, Value: 1.0, Seq: 1}, keep: time.Minute}
		e, err := encodeOps([]op{o})
		if err != nil {
			t.Fatal(err)
		}
		c := &change{ops: []op{o}, entry: e, done: make(chan error, 1)}
		changes = append(changes, c)
		w.queue = append(w.queue, c)
	}
	s0 := w.pump(nil)
	w.mu.Unlock()
	for _, c := range changes {
		if err := w.wait(c, s0); err != nil {
			t.Fatal(err)
		}
		s0 = nil
	}
	if got := s.Commits() - before; got != 1 {
		t.Errorf("%d writes for 16 queued changes, want 1", got)
	}
	if h, _ := s.LoadWrites(); len(h) != 16 {
		t.Errorf("%d histories stored, want 16", len(h))
	}
	// and concurrent callers all get their change made
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			if err := s.RecordWrite(fmt.Sprintf("do_%d", i), engine.Write{At: t0, Value: 2.0, Seq: 2}, time.Minute); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if h, _ := s.LoadWrites(); len(h) != 32 || h["do_31"].LastValue != 2.0 {
		t.Errorf("%d histories stored, want 32", len(h))
	}
}

// A state.log lost, replaced or damaged is refused: the records written
// since the last checkpoint are only there.
func TestLogLostIsRefused(t *testing.T) {
	other := t.TempDir()
	fill(t, other, 1)
	for _, tc := range []struct {
		name, want string
		damage     func(log string)
	}{
		{"deleted", "is missing, but", func(log string) { os.Remove(log) }},
		{"truncated", "not the 2101248 its header records", func(log string) { os.Truncate(log, 1<<20) }},
		{"header garbled", "is not a physmcpd state log", func(log string) { overwrite(t, log, 0, []byte("garbage")) }},
		{"header damaged", "has a damaged header", func(log string) { overwrite(t, log, int64(len(logMagic)+5), []byte{0xff}) }},
		{"replaced by another store's", "is the log of store", func(log string) {
			data, _ := os.ReadFile(filepath.Join(other, logFileName))
			os.WriteFile(log, data, 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fill(t, dir, 10)
			log := filepath.Join(dir, logFileName)
			tc.damage(log)
			_, err := openAt(dir)
			wantBroken(t, err, log, tc.want)
			if _, err := Check(dir); !errors.As(err, new(*BrokenError)) {
				t.Fatalf("Check = %v; want the same refusal", err)
			}
			// reset keeps state.db's records and moves the log aside
			rep, err := Reset(dir, t0)
			if err != nil || rep.Records != 10 {
				t.Fatalf("Reset = %+v, %v", rep, err)
			}
			if _, err := os.Stat(log + ".broken-20260304T050607Z"); tc.name != "deleted" && err != nil {
				t.Fatalf("the log was not moved aside: %v", err)
			}
			s, err := openAt(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if _, ok := s.Load("key-000009"); !ok {
				t.Fatal("a record was lost")
			}
		})
	}
}

// Reset of a broken state.db copies what its log holds beyond it too.
func TestResetKeepsTheLog(t *testing.T) {
	noCheckpoints(t)
	dir := t.TempDir()
	fill(t, dir, 10)
	s, err := openAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save("logged", engine.Record{Tool: "do_x", At: t0, InDoubt: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordWrite("do_logged", engine.Write{At: t0, Value: 1.0, Seq: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	crashed := crashCopy(t, dir)
	s.Close()
	os.Remove(filepath.Join(crashed, IDFileName))
	os.WriteFile(filepath.Join(crashed, IDFileName), []byte(strings.Repeat("ab", 16)+"\n"), 0o600) // state.db is now another store's
	rep, err := Reset(crashed, t0)
	if err != nil || rep.Records != 11 || rep.Histories != 1 {
		t.Fatalf("Reset = %+v, %v; want 11 records and 1 history", rep, err)
	}
	r, err := openAt(crashed)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, ok := r.Load("logged"); !ok || !got.InDoubt {
		t.Fatalf("the record from the log: %+v %v", got, ok)
	}
	if h, _ := r.LoadWrites(); h["do_logged"].Seq != 1 {
		t.Fatalf("the history from the log: %+v", h)
	}
}

// A store of format 1 is converted at Open without losing a record, and an
// older physmcpd, which reads the id from meta "store_id", no longer finds one.
func TestFormat1StoreIsConverted(t *testing.T) {
	dir := t.TempDir()
	p := pathsIn(dir)
	db, err := bolt.Open(p.db, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	const id = "0123456789abcdef0123456789abcdef"
	intent := record(1)
	intent.InDoubt = true
	err = db.Update(func(tx *bolt.Tx) error {
		keys, _ := tx.CreateBucket(legacyKeys)
		byTime, _ := tx.CreateBucket(legacyByTime)
		writes, _ := tx.CreateBucket(bucketWrites)
		meta, _ := tx.CreateBucket(bucketMeta)
		tx.CreateBucket(bucketOps)
		for i, r := range []engine.Record{record(0), intent, {Tool: "do_old", At: t0.Add(-25 * time.Hour)}} {
			v, _ := json.Marshal(r)
			key := fmt.Sprintf("key-%06d", i)
			keys.Put([]byte(key), v)
			byTime.Put(append(binary.BigEndian.AppendUint64(nil, uint64(r.At.UnixNano())), key...), nil)
		}
		h, _ := json.Marshal(history{Writes: []time.Time{t0}, Last: t0, LastValue: 1.0, Seq: 3, Key: "key-000000"})
		writes.Put([]byte("do_fan_speed"), h)
		return meta.Put(legacyStoreID, []byte(id))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.writeID(id); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(dir)
	if err != nil || rep.Records != 3 || len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "format 1") {
		t.Fatalf("Check = %+v, %v; want 3 records of format 1", rep, err)
	}

	s, err := openAt(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := s.Load("key-000000"); !ok || r.Response.IdempotencyKey != "key-000000" || r.Fingerprint != record(0).Fingerprint {
		t.Fatalf("a converted record: %+v %v", r, ok)
	}
	if doubt, err := s.InDoubt(); err != nil || len(doubt) != 1 || !doubt["key-000001"].InDoubt {
		t.Fatalf("InDoubt = %v, %v", doubt, err)
	}
	if h, err := s.LoadWrites(); err != nil || h["do_fan_speed"].Seq != 3 {
		t.Fatalf("LoadWrites = %v, %v", h, err)
	}
	if _, ok := s.Load("key-000002"); ok {
		t.Fatal("an expired record is served")
	}
	s.Close()

	rep, err = Check(dir)
	if err != nil || rep.StoreID != id || rep.Records != 2 || len(rep.Notes) != 0 {
		t.Fatalf("Check after Open = %+v, %v; want 2 records (the expired one pruned), no notes", rep, err)
	}
	db, _ = bolt.Open(p.db, 0o600, &bolt.Options{ReadOnly: true})
	defer db.Close()
	db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(legacyKeys) != nil || tx.Bucket(legacyByTime) != nil {
			t.Error("the buckets of format 1 are still there")
		}
		if meta := tx.Bucket(bucketMeta); meta.Get(legacyStoreID) != nil || string(meta.Get(keyStoreID)) != id || string(meta.Get(keyFormat)) != format {
			t.Error("meta is not format 2's")
		}
		return nil
	})
}

// A store of a format this physmcpd does not know is refused.
func TestNewerFormatIsRefused(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 1)
	db, _ := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("3")) })
	db.Close()
	if _, err := openAt(dir); err == nil || !strings.Contains(err.Error(), "is of format 3, which this physmcpd does not know") {
		t.Fatalf("Open = %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, FileName)); !bytes.Contains(data, []byte("3")) {
		t.Fatal("the store was changed")
	}
}

// When checkpoints fail, the log fills, and then changes fail with the
// reason instead of waiting, or overwriting what is not yet applied.
func TestLogFullWhenCheckpointsFail(t *testing.T) {
	ring, at := logRing, checkpointAt
	logRing, checkpointAt = 8<<10, 2<<10
	defer func() { logRing, checkpointAt = ring, at }()
	dir := t.TempDir()
	s := open(t, dir, &clock{t0})
	s.db.Close() // every checkpoint now fails
	var err error
	for i := 0; i < 200 && err == nil; i++ {
		err = s.Save(fmt.Sprintf("key-%06d", i), record(i))
	}
	if err == nil || !strings.Contains(err.Error(), "the state log is full") || !strings.Contains(err.Error(), "database not open") {
		t.Fatalf("Save with checkpoints failing: %v; want the log full, saying why", err)
	}
	if r, ok := s.Load("key-000001"); !ok || r.Response.IdempotencyKey != "key-000001" {
		t.Fatalf("a record written before the log filled: %+v %v", r, ok)
	}
	s.Close()
}

// A sync that begins while another caller's write is under way covers only
// what was written before it: the log it says is synced, which a checkpoint
// then marks applied, must not reach into the entries being written, or a
// crash after their caller is answered skips them.
func TestSyncBesideAWriteCoversOnlyWhatWasWritten(t *testing.T) {
	noCheckpoints(t)
	syncs := make(chan chan struct{}, 4)
	sync := syncLog
	syncLog = func(f *os.File) error {
		release := make(chan struct{})
		syncs <- release
		<-release
		return sync(f)
	}
	holding := make(chan chan struct{}, 1) // armed: the next write is held
	write := writeLog
	writeLog = func(f *os.File, b []byte, off int64) (int, error) {
		select {
		case release := <-holding:
			<-release
		default:
		}
		return write(f, b, off)
	}
	defer func() { syncLog, writeLog = sync, write }()
	dir := t.TempDir()
	c := &clock{t0}
	s := open(t, dir, c)
	save := func(key string) chan error {
		saved := make(chan error, 1)
		go func() { saved <- s.Save(key, engine.Record{Tool: "do_x", At: t0, InDoubt: true}) }()
		return saved
	}
	b1 := save("b1")
	first := <-syncs // b1's sync, held
	b2 := save("b2")
	for { // until b2 is written and waits behind b1's sync
		s.w.mu.Lock()
		n := s.w.waiting
		s.w.mu.Unlock()
		if n == 1 {
			break
		}
		runtime.Gosched()
	}
	held := make(chan struct{})
	holding <- held
	k := save("c")
	for { // until c's write is under way
		s.w.mu.Lock()
		writing := s.w.writing
		s.w.mu.Unlock()
		if writing {
			break
		}
		runtime.Gosched()
	}
	close(first) // b1 is answered, and b2's sync begins while c is being written
	close(<-syncs)
	for _, saved := range []chan error{b1, b2} {
		if err := <-saved; err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	close(held)
	close(<-syncs) // c's
	if err := <-k; err != nil {
		t.Fatal(err)
	}
	r := open(t, crashCopy(t, dir), c)
	defer r.Close()
	for _, key := range []string{"b1", "b2", "c"} {
		if _, ok := r.Load(key); !ok {
			t.Errorf("%s, answered as on disk, is lost in a crash", key)
		}
	}
	go func() {
		for release := range syncs {
			close(release)
		}
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	close(syncs)
}
