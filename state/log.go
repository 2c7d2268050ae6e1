package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/physmcp/physmcpd/internal/binenc"
)

// The log, state.log beside state.db, is where every change is made durable
// before Save, RecordWrite, the operation methods and SaveOutcome (but see
// appendWritten) return: changes written while a sync is under way share
// the next one, and each change is a pwrite, and a share of an fdatasync, of
// a file that never changes size (a bbolt commit is two fdatasyncs and a pwrite per page touched: some
// two dozen for a batch of do_* calls on random keys). The changes are then
// applied to state.db in the background, many at once (a checkpoint: one
// bbolt transaction), and until then Load finds records in memory.
//
// The file is a header page and then a ring. Every entry carries its log
// sequence number (LSN: its position in the endless log; its place in the
// ring is the LSN modulo the ring's size) and a CRC-32C, so reading from
// where state.db says it has applied the log (meta "log_applied") stops at
// the first entry that is torn, stale (from an earlier lap of the ring) or
// never written. The writer never overwrites an entry not yet applied.
// After a crash, the entries of an unacknowledged last write may be partly
// on disk; whatever reads back whole is applied, as a bbolt commit
// interrupted after its data pages would not be, which is safe: those
// changes were made before any caller was told they were durable. At every
// start the log is applied completely and writing resumes at the next lap
// of the ring, so an entry left over from an interrupted write can never be
// read as a new one.

const (
	logFileName   = "state.log"
	logHeaderSize = 4096
	logMagic      = "physmcpd state log\n"
	logVersion    = 1
	entryHeader   = 4 + 8 + 4 // crc, lsn, payload length
)

var (
	// logRing is the ring's size, and checkpointAt how much unapplied log
	// starts a checkpoint (one is also made a second after the first change
	// since the last).
	logRing      int64 = 2 << 20
	checkpointAt int64 = 256 << 10
	idleApply          = time.Second
	castagnoli         = crc32.MakeTable(crc32.Castagnoli)
	syncLog            = fdatasync          // tests hold syncs back with it
	writeLog           = (*os.File).WriteAt // and writes
)

// logHeader is the first page of state.log.
type logHeader struct {
	ring    int64
	storeID string
}

func (h logHeader) encode() []byte {
	b := make([]byte, 0, logHeaderSize)
	b = append(b, logMagic...)
	b = binary.LittleEndian.AppendUint32(b, logVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.ring))
	b = binenc.AppendString(b, h.storeID)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return append(b, make([]byte, logHeaderSize-len(b))...)
}

// readLogHeader reads and checks the header of the log file f; the error
// says what is wrong, in words for a BrokenError.
func readLogHeader(f *os.File) (logHeader, error) {
	var h logHeader
	info, err := f.Stat()
	if err != nil {
		return h, err
	}
	page := make([]byte, logHeaderSize)
	if _, err := f.ReadAt(page, 0); err != nil {
		return h, fmt.Errorf("is too short to be a physmcpd state log (%d bytes): it was truncated", info.Size())
	}
	if !bytes.HasPrefix(page, []byte(logMagic)) {
		return h, errors.New("is not a physmcpd state log (its header is wrong): it was overwritten")
	}
	d := binenc.Decoder{B: page, Off: len(logMagic)}
	fixed := d.Take(12)
	h.storeID = d.String()
	end := d.Off
	sum := d.Take(4)
	if d.Err() != nil || binary.LittleEndian.Uint32(sum) != crc32.Checksum(page[:end], castagnoli) {
		return h, errors.New("has a damaged header: it was overwritten or corrupted")
	}
	version := binary.LittleEndian.Uint32(fixed)
	h.ring = int64(binary.LittleEndian.Uint64(fixed[4:]))
	switch {
	case version != logVersion:
		return h, fmt.Errorf("is version %d of the log, which this physmcpd does not know: it was written by a newer physmcpd", version)
	case h.ring <= 0 || info.Size() != logHeaderSize+h.ring:
		return h, fmt.Errorf("is %d bytes, not the %d its header records: it was truncated or extended", info.Size(), logHeaderSize+h.ring)
	}
	return h, nil
}

// createLog writes a new, zeroed log for store id at path (through a
// temporary file, so a half-made log never has the name).
func createLog(dir, path, id string) error {
	f, err := os.CreateTemp(dir, logFileName+".new-*")
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, err = f.Write(logHeader{ring: logRing, storeID: id}.encode())
	if err == nil {
		// written, not just sized: an fdatasync of a block written before
		// flushes the data alone, one of a hole also its allocation
		_, err = f.Write(make([]byte, logRing))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return nil
}

// readLog returns the whole entries of the log f (of ring size ring) from
// lsn on, and the LSN after the last of them.
func readLog(f io.ReaderAt, ring, lsn int64) (entries [][]byte, end int64, err error) {
	head := make([]byte, entryHeader)
	for start := lsn; lsn-start < ring; {
		pos := lsn % ring
		if ring-pos < entryHeader {
			lsn += ring - pos // no room for an entry: the writer went on at the next lap
			continue
		}
		if _, err := f.ReadAt(head, logHeaderSize+pos); err != nil {
			return nil, 0, err
		}
		n := int64(binary.LittleEndian.Uint32(head[12:]))
		if int64(binary.LittleEndian.Uint64(head[4:])) != lsn || n > ring-pos-entryHeader {
			break
		}
		e := make([]byte, entryHeader+n)
		if _, err := f.ReadAt(e, logHeaderSize+pos); err != nil {
			return nil, 0, err
		}
		if binary.LittleEndian.Uint32(e) != crc32.Checksum(e[4:], castagnoli) {
			break
		}
		if n == 0 {
			lsn += ring - pos // a wrap marker: the next entry is at the next lap
			continue
		}
		entries = append(entries, e[entryHeader:])
		lsn += entryHeader + n
	}
	return entries, lsn, nil
}

// nextLap is the LSN at the start of the lap after the one lsn is in (lsn
// itself at a lap's start).
func nextLap(lsn, ring int64) int64 {
	return (lsn + ring - 1) / ring * ring
}

// change is one caller's ops, and their entry, waiting to be written.
type change struct {
	ops   []op
	entry []byte
	// done gets the change's answer, or errTurn when its caller is to run
	// the sync in turn.
	done chan error
	turn *syncRun
	// early: answered once written, before its sync (appendWritten)
	early, answered bool
	end             int64 // the LSN after its entry, once laid out
}

// errTurn tells a waiting caller to run the sync in its change's turn field.
var errTurn = errors.New("run the sync")

// syncDepth is how many syncs may be under way at once. fdatasync waits
// mostly for the device's cache flush, and flushes run side by side: a sync
// that starts while another runs need not wait for it, only be answered
// after it. But a second sync is begun only for callers that would otherwise
// wait behind a sync no caller waits for (the outcomes of the calls before,
// answered once written: see syncDue). Each sync costs the process far more
// CPU time than its share of the device (a thread blocked in it and woken,
// the runtime's P handed to another thread and back): with 16 callers at
// once, letting every sync start beside the one under way made about 0.30
// syncs per do_* and 258–274 µs of CPU time against 0.21–0.24 and 233–248 µs,
// and a higher p50 (5.8–6.0 against 5.0–5.2 ms; bench/compare, load 14). Each
// in-flight sync has a descriptor of its own, because a write-back error is
// reported once per open file: on a shared one, one caller's sync could take
// the error that belongs to another's data.
const syncDepth = 2

// syncRun is one fdatasync of the log, covering everything written before
// it began: the changes written since the previous one began, up to LSN upto.
type syncRun struct {
	f       *os.File
	changes []*change
	waited  bool // a caller waits for it
	upto    int64
	done    bool
	err     error
}

// logWriter appends changes to the log in group writes. It has no goroutine
// of its own: the callers write and sync. A caller that finds no write under
// way writes everything queued, its own change included, with one pwrite, and
// one whose change waits for the disk runs the sync that covers it, or is
// handed a sync to run when its change is in one that begins later. Each
// hand-off between goroutines is a thread woken when the process is not busy
// (it waits for the disk), and those wake-ups were most of what a durable
// do_* cost in CPU beyond one without a store: a caller now waits for
// another goroutine only when its change shares another caller's write or
// sync.
type logWriter struct {
	f     *os.File
	syncs [syncDepth]*os.File // one descriptor per sync in flight
	ring  int64

	mu       sync.Mutex
	wake     *sync.Cond // a write or sync done, or room in the ring (for close)
	queue    []*change
	writing  bool       // a caller is writing the queue
	buf      []byte     // the writing caller's, reused
	unsynced []*change  // written since the last sync began
	waiting  int        // of them, changes whose callers wait for a sync
	inflight []*syncRun // begun, answered in order once done
	reserved int64      // the LSN of the next entry to write
	next     int64      // the LSN after the last entry synced
	applied  int64      // entries below it are in state.db
	failed   error      // a write or sync failed: nothing more is accepted
	stuck    error      // the last checkpoint failed
	closing  bool
	syncsRun int64

	// pending are the ops synced and not yet applied, in log order, with
	// the LSN after each; records maps the key of each record among them,
	// and among the changes written and answered before their sync, to its
	// newest version.
	pending []pendingOp
	records map[string]pendingOp
	timer   *time.Timer // the idle checkpoint, armed by the first pending op
	kick    chan struct{}
}

type pendingOp struct {
	op  op
	end int64 // the LSN after its entry
}

// append queues ops as one entry and returns once it is on disk.
func (w *logWriter) append(ops ...op) error { return w.add(false, ops) }

// appendWritten queues ops as one entry and returns once it is written to
// the file, before it is on disk: a crash of the process keeps it (it is in
// the kernel's page cache), one of the machine may lose it. It is synced
// with the next change that waits for a sync, or on its own as soon as no
// sync is under way.
func (w *logWriter) appendWritten(ops ...op) error { return w.add(true, ops) }

func (w *logWriter) add(early bool, ops []op) error {
	e, err := encodeOps(ops)
	if err != nil {
		return err
	}
	if int64(len(e)) > w.ring/4 {
		return fmt.Errorf("a change of %d bytes is too large for the state log", len(e))
	}
	c := &change{ops: ops, entry: e, done: make(chan error, 1), early: early}
	w.mu.Lock()
	if w.failed != nil || w.closing {
		err := w.failed
		w.mu.Unlock()
		if err == nil {
			err = errors.New("the state store is closed")
		}
		return err
	}
	w.queue = append(w.queue, c)
	s := w.pump(c)
	w.mu.Unlock()
	return w.wait(c, s)
}

// wait returns c's answer, running s first (when not nil) and any sync c
// is handed meanwhile.
func (w *logWriter) wait(c *change, s *syncRun) error {
	for {
		if s != nil {
			w.runSync(s)
		}
		err := <-c.done
		if err != errTurn {
			return err
		}
		s = c.turn
	}
}

// pump writes what is queued, unless another caller is writing (it takes
// the queue when its write is done), and begins a sync when one is due (see
// beginSync). It returns the sync self's caller is to run, or nil. It is
// called with w.mu held, and releases it during writes.
func (w *logWriter) pump(self *change) *syncRun {
	for len(w.queue) > 0 && !w.writing {
		w.writing = true
		wrote := w.writeQueued()
		w.writing = false
		if !wrote {
			break // no room in the ring: the checkpoint that makes some pumps again
		}
	}
	return w.beginSync(self)
}

// syncDue says a sync should begin now: something written is not covered by
// one under way, and either no sync is under way at all (changes answered
// when written are synced no later than that), or a caller waits for it, a
// descriptor is free, and no caller waits for the syncs under way. It is
// called with w.mu held.
func (w *logWriter) syncDue() bool {
	if len(w.unsynced) == 0 || len(w.inflight) == syncDepth {
		return false
	}
	return len(w.inflight) == 0 || w.waiting > 0 && !slices.ContainsFunc(w.inflight, func(s *syncRun) bool { return s.waited })
}

// beginSync begins a sync when one is due. When self waits for it, self's
// caller runs it (returned); else a caller waiting for it is handed it, and
// when none is (every change in it was answered once written), a goroutine
// runs it. It is called with w.mu held.
func (w *logWriter) beginSync(self *change) *syncRun {
	if !w.syncDue() {
		return nil
	}
	// up to the last change written, not w.reserved: another caller may be
	// writing the entries after it
	upto := w.unsynced[len(w.unsynced)-1].end
	s := &syncRun{f: w.syncs[w.syncsRun%syncDepth], changes: w.unsynced, waited: w.waiting > 0, upto: upto}
	w.unsynced, w.waiting = nil, 0
	w.inflight = append(w.inflight, s)
	w.syncsRun++
	var runner *change
	for _, c := range s.changes {
		if !c.answered && (runner == nil || c == self) {
			runner = c
		}
	}
	switch {
	case runner == nil:
		go w.runSync(s)
	case runner == self:
		return s
	default:
		runner.turn = s
		runner.done <- errTurn // its caller waits for this sync, so for nothing else
	}
	return nil
}

// runSync makes the changes of s durable, answers them (and the syncs
// before it, once they are done too) and begins the next sync if one is due.
func (w *logWriter) runSync(s *syncRun) {
	err := syncLog(s.f)
	w.mu.Lock()
	defer w.mu.Unlock()
	s.done, s.err = true, err
	w.answer()
	w.beginSync(nil)
}

// writeQueued writes the queued changes that fit in the ring with one
// pwrite, and answers those that do not wait for a sync. It says whether it
// took any. It is called with w.mu held by the writing caller, and releases
// it during the write.
func (w *logWriter) writeQueued() bool {
	changes, entries, err := w.take()
	w.queue = w.queue[len(changes):]
	if err != nil {
		for _, c := range changes {
			c.done <- err
		}
		w.wake.Broadcast()
		return true
	}
	if len(changes) == 0 {
		return false
	}
	start := w.reserved
	w.buf, w.reserved = layout(w.buf[:0], start, w.ring, entries)
	lsn := start
	for _, c := range changes {
		lsn = entryEnd(lsn, w.ring, int64(len(c.entry)))
		c.end = lsn
	}
	w.mu.Unlock()
	err = w.write(w.buf, start)
	w.mu.Lock()
	if err != nil {
		// nothing after a torn entry is read: fail everyone not answered yet
		w.fail(err)
		for _, c := range append(w.unsynced, changes...) {
			if !c.answered {
				c.done <- w.failed
			}
		}
		w.unsynced, w.waiting = nil, 0
		w.wake.Broadcast()
		return true
	}
	for _, c := range changes {
		if c.early {
			c.answered = true
			w.noteRecords(c)
			c.done <- nil
		} else {
			w.waiting++
		}
	}
	w.unsynced = append(w.unsynced, changes...)
	return true
}

// noteRecords makes c's records the newest versions Load finds, unless a
// later change holds a newer one. It is called with w.mu held.
func (w *logWriter) noteRecords(c *change) {
	for _, o := range c.ops {
		if q, ok := w.records[o.key]; o.kind == opRecord && (!ok || q.end < c.end) {
			w.records[o.key] = pendingOp{o, c.end}
		}
	}
}

// fail stops the log at the first write or sync error. It is called with w.mu held.
func (w *logWriter) fail(err error) {
	if w.failed == nil {
		w.failed = fmt.Errorf("the state log could not be written (%w): nothing more is recorded until physmcpd is restarted", err)
	}
}

// answer answers the changes of the finished syncs at the head of
// w.inflight: an error fails them all and every change after them, since
// what follows a torn entry is never read. It is called with w.mu held.
func (w *logWriter) answer() {
	for len(w.inflight) > 0 && w.inflight[0].done {
		s := w.inflight[0]
		w.inflight = w.inflight[1:]
		if s.err != nil {
			w.fail(s.err)
		}
		if w.failed != nil {
			for _, c := range s.changes {
				if !c.answered {
					c.done <- w.failed
				}
			}
			continue
		}
		for _, c := range s.changes {
			for _, o := range c.ops {
				w.pending = append(w.pending, pendingOp{o, c.end})
			}
			if !c.answered {
				w.noteRecords(c)
				c.done <- nil
			}
		}
		w.next = s.upto
		w.schedule()
	}
	w.wake.Broadcast()
}

// take returns the queued changes that fit in the ring, and their entries;
// when none does, it starts a checkpoint to make room and returns none. It
// is called with w.mu held.
func (w *logWriter) take() (batch []*change, entries [][]byte, err error) {
	if w.failed != nil {
		return w.queue, nil, w.failed
	}
	free := w.ring - (w.reserved - w.applied) - entryHeader
	for _, c := range w.queue {
		// at most its own size again is skipped to the next lap before it
		if free -= 2 * (entryHeader + int64(len(c.entry))); free < 0 {
			break
		}
		batch, entries = append(batch, c), append(entries, c.entry)
	}
	if len(batch) > 0 {
		return batch, entries, nil
	}
	if w.stuck != nil {
		return w.queue[:1], nil, fmt.Errorf("the state log is full: %w", w.stuck)
	}
	w.kickCheckpoint()
	return nil, nil, nil
}

// write puts buf, which begins at LSN start, in the ring (two pieces when it
// wraps).
func (w *logWriter) write(buf []byte, start int64) error {
	pos := start % w.ring
	first := min(int64(len(buf)), w.ring-pos)
	if _, err := writeLog(w.f, buf[:first], logHeaderSize+pos); err != nil {
		return err
	}
	if rest := buf[first:]; len(rest) > 0 {
		if _, err := writeLog(w.f, rest, logHeaderSize); err != nil {
			return err
		}
	}
	return nil
}

// layout appends to buf the entries starting at LSN start as they lie in
// the ring: each with its header, and a wrap marker (or a gap too small for
// one) where the next entry would not fit before the ring's end. It returns
// the LSN after the last.
func layout(buf []byte, start, ring int64, entries [][]byte) ([]byte, int64) {
	lsn := start
	for _, e := range entries {
		at := entryStart(lsn, ring, int64(len(e)))
		if at != lsn {
			// the rest of the lap, starting with a wrap marker when there is room for one
			gap := make([]byte, at-lsn)
			if len(gap) >= entryHeader {
				binary.LittleEndian.PutUint64(gap[4:], uint64(lsn))
				binary.LittleEndian.PutUint32(gap, crc32.Checksum(gap[4:entryHeader], castagnoli))
			}
			buf = append(buf, gap...)
			lsn = at
		}
		head := len(buf)
		buf = binary.LittleEndian.AppendUint32(buf, 0) // the CRC, below
		buf = binary.LittleEndian.AppendUint64(buf, uint64(lsn))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
		binary.LittleEndian.PutUint32(buf[head:], crc32.Checksum(buf[head+4:], castagnoli))
		lsn += entryHeader + int64(len(e))
	}
	return buf, lsn
}

// entryStart is where an entry of n payload bytes goes when the log is at
// lsn: there, or at the next lap when it would not fit before the ring's end.
func entryStart(lsn, ring, n int64) int64 {
	if ring-lsn%ring < entryHeader+n {
		return nextLap(lsn+1, ring)
	}
	return lsn
}

func entryEnd(lsn, ring, n int64) int64 { return entryStart(lsn, ring, n) + entryHeader + n }

// schedule starts a checkpoint when enough is pending, and arms the idle one
// with the first pending op. It is called with w.mu held.
func (w *logWriter) schedule() {
	switch {
	case w.next-w.applied >= checkpointAt:
		w.kickCheckpoint()
	case w.timer == nil:
		w.timer = time.AfterFunc(idleApply, w.kickCheckpoint)
	}
}

func (w *logWriter) kickCheckpoint() {
	select {
	case w.kick <- struct{}{}:
	default: // one is due already
	}
}

// record returns the newest version of key's record among the pending ops.
func (w *logWriter) record(key string) ([]byte, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.records[key]
	return p.op.value, ok
}

// unapplied returns the pending ops and the LSN they end at.
func (w *logWriter) unapplied() ([]pendingOp, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	return w.pending, w.next
}

func (w *logWriter) appliedLSN() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied
}

// appliedTo drops the first n pending ops, now in state.db up to LSN upto,
// and makes their room in the ring free again.
func (w *logWriter) appliedTo(n int, upto int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pending[:n] {
		// a newer version of the record stays until it is applied too
		if q, ok := w.records[p.op.key]; ok && p.op.kind == opRecord && q.end == p.end {
			delete(w.records, p.op.key)
		}
	}
	// in place: the checkpoint that read them is over, and the room is reused
	rest := copy(w.pending, w.pending[n:])
	clear(w.pending[rest:])
	w.pending = w.pending[:rest]
	w.applied, w.stuck = upto, nil
	if len(w.pending) > 0 {
		w.schedule()
	}
	w.pump(nil) // what waited for room
	w.wake.Broadcast()
}

// applyFailed records why the last checkpoint failed: changes that find the
// ring full fail with it instead of waiting.
func (w *logWriter) applyFailed(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stuck = err
	w.pump(nil) // what waits for room now fails with err
	w.wake.Broadcast()
}

// close stops accepting changes and waits until the queued ones are
// written and everything written is synced and answered.
func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closing = true
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	for {
		w.pump(nil)
		if len(w.queue) == 0 && len(w.unsynced) == 0 && len(w.inflight) == 0 {
			return
		}
		w.wake.Wait()
	}
}

// closeFiles closes the log's descriptors.
func (w *logWriter) closeFiles() error {
	errs := []error{w.f.Close()}
	for _, f := range w.syncs {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}
