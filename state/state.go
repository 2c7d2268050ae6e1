// Package state is physmcpd's crash-safe store for the Full profile: the
// idempotency records of do_* calls (engine.IdempotencyStore, including the
// in-doubt intent written before each write), the write history behind
// cooldowns and rate limits, and the last value written to each actuator
// (engine.LimitStore). The Lite profile opens no Store and writes nothing.
//
// It is one go.etcd.io/bbolt file, <state-dir>/state.db, with a write-ahead
// log beside it, state.log (log.go). bbolt keeps the records by key with
// atomic, copy-on-write transactions, so a crash at any instant leaves either
// the old or the new state, never a torn one, and deleted records' pages are
// reused, so pruning keeps the file bounded without a compaction pass. It is
// pure Go (no cgo), so the arm cross-builds keep working, and its file lock
// stops a second daemon from sharing the state by mistake. The log makes
// each change durable with one write and one fdatasync, shared by everyone
// waiting, where a bbolt commit costs two fdatasyncs and a write per page;
// the changes reach state.db in batches in the background.
//
// Every Save and RecordWrite returns only after its change is in the log and
// fsync'd: the engine writes to the device only after the intent is durable.
// SaveOutcome of an outcome the device showed returns once it is in the log,
// before its fsync (see SaveOutcome).
//
// A store that lost records must not be mistaken for a new one: the engine
// would then act twice on a repeated idempotency key and ignore cooldowns.
// So Open reads every page and runs bbolt's consistency check before use, a
// random store id, kept inside state.db, in state.id beside it and in the
// log's header, tells a new directory from one whose state.db or state.log
// was truncated, deleted or replaced (integrity.go). Check and Reset are the
// operator's way out (recover.go).
package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
)

// FileName is the database file inside the state directory.
const FileName = "state.db"

var lockWaitLimit = 2 * time.Second

// Store is the bbolt-backed store. It is safe for concurrent use.
type Store struct {
	db  *bolt.DB
	now func() time.Time
	log *slog.Logger
	w   *logWriter

	applying  sync.Mutex     // one checkpoint at a time
	newest    map[string]int // the checkpoint's: the index of each record's newest version among its ops
	stop      chan struct{}
	stopped   chan struct{} // the checkpointer has returned
	closeOnce sync.Once
	closeErr  error
}

// Open opens the store in dir, creating dir (0700) and a new store when the
// directory has none, verifies it (see inspect), converts a store of an
// older format, applies what its log holds, and prunes records older than
// engine.KeyRetention. A store that may have lost records is refused with a
// *BrokenError and never replaced by an empty one. now is the clock (nil:
// time.Now).
func Open(dir string, now func() time.Time, log *slog.Logger) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	p := pathsIn(dir)
	in, err := inspect(p, false)
	if err != nil {
		return nil, err
	}
	if in.db == nil {
		id, err := p.create(nil)
		if err != nil {
			return nil, err
		}
		log.Info("new state store created", "file", p.db, "store", id)
		if in, err = inspect(p, false); err != nil {
			return nil, err
		}
	}
	db := in.db
	fail := func(err error) (*Store, error) {
		db.Close()
		return nil, err
	}
	if in.recorded == "" {
		if err := p.adopt(in, log); err != nil {
			return fail(err)
		}
	}
	var moved int
	if err := db.Update(func(tx *bolt.Tx) (err error) {
		moved, err = upgrade(tx, now())
		return err
	}); err != nil {
		return fail(fmt.Errorf("convert %s to format %s: %w", p.db, format, err))
	}
	if in.format != format {
		log.Info("state store converted to format "+format, "file", p.db, "records", moved)
	}
	s := &Store{db: db, now: now, log: log, stop: make(chan struct{}), stopped: make(chan struct{}),
		newest: map[string]int{}}
	if s.w, err = s.openLog(p, in); err != nil {
		return fail(err)
	}
	go s.applyInBackground()
	if n, err := s.Prune(); err != nil {
		s.Close()
		return nil, err
	} else if n > 0 {
		log.Info("expired idempotency records pruned", "count", n)
	}
	return s, nil
}

// openLog opens state.log (creating it for a store that has none yet),
// applies whatever it holds that state.db lacks, and returns its writer, set
// to write from the next lap of the ring.
func (s *Store) openLog(p paths, in inspection) (*logWriter, error) {
	if !in.hasLog {
		id, err := s.id()
		if err != nil {
			return nil, err
		}
		if err := createLog(p.dir, p.log, id); err != nil {
			return nil, err
		}
		in.applied = logRing
		// the log is in use from here on: a state.log lost after this is noticed
		if err := s.db.Update(func(tx *bolt.Tx) error { return setApplied(tx, in.applied) }); err != nil {
			return nil, fmt.Errorf("state store %s: %w", p.db, err)
		}
	}
	f, err := os.OpenFile(p.log, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("state log: %w", err)
	}
	h, err := readLogHeader(f)
	if err != nil {
		f.Close()
		return nil, p.broken(p.log, "%v", err) // inspect checked it; it changed since
	}
	entries, end, err := readLog(f, h.ring, in.applied)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", p.log, err)
	}
	next := nextLap(end, h.ring)
	err = s.db.Update(func(tx *bolt.Tx) error {
		a := newApplier(tx, s.log)
		for _, e := range entries {
			ops, err := decodeOps(e)
			if err != nil {
				return fmt.Errorf("an entry of %s that reads back whole cannot be decoded: %w", p.log, err)
			}
			for _, o := range ops {
				if err := a.apply(o); err != nil {
					return err
				}
			}
		}
		if err := a.done(); err != nil {
			return err
		}
		return setApplied(tx, next)
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("apply %s to %s: %w", p.log, p.db, err)
	}
	if len(entries) > 0 {
		s.log.Info("changes recovered from the state log", "file", p.log, "entries", len(entries))
	}
	w := &logWriter{f: f, ring: h.ring, reserved: next, next: next, applied: next, records: map[string]pendingOp{},
		kick: make(chan struct{}, 1)}
	for i := range w.syncs {
		if w.syncs[i], err = os.OpenFile(p.log, os.O_RDWR, 0); err != nil {
			w.closeFiles()
			return nil, fmt.Errorf("state log: %w", err)
		}
	}
	w.wake = sync.NewCond(&w.mu)
	return w, nil
}

func (s *Store) id() (id string, err error) {
	err = s.db.View(func(tx *bolt.Tx) error { id = storeID(tx); return nil })
	return id, err
}

func setApplied(tx *bolt.Tx, lsn int64) error {
	return tx.Bucket(bucketMeta).Put(keyLogApplied, binary.BigEndian.AppendUint64(nil, uint64(lsn)))
}

// applyInBackground makes checkpoints when the log asks for one. One that
// fails is tried again a second later; meanwhile the log fills, and once it
// is full Save and RecordWrite fail with the reason. After idleRelease
// without one it releases state.db's pages (release.go).
func (s *Store) applyInBackground() {
	defer close(s.stopped)
	idle := time.NewTimer(idleRelease) // Open's check read every page
	defer idle.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-idle.C:
			s.releasePages()
			continue
		case <-s.w.kick:
		}
		if _, err := s.checkpoint(); err != nil {
			s.log.Error("state log not applied to state.db; retrying", "err", err)
			select {
			case <-s.stop:
				return
			case <-time.After(time.Second):
				s.w.kickCheckpoint()
			}
		}
		idle.Reset(idleRelease)
	}
}

// checkpoint applies every pending change to state.db in one transaction,
// pruning expired records in the same one (it says how many), and frees
// their room in the log.
func (s *Store) checkpoint() (pruned int, err error) {
	s.applying.Lock()
	defer s.applying.Unlock()
	ops, upto := s.w.unapplied()
	if len(ops) == 0 && upto == s.w.appliedLSN() {
		return 0, nil
	}
	// A record saved again before the checkpoint (a do_*'s intent, then its
	// outcome) is put once, as its newest version: the transaction holds
	// all of them or none, so an older version was never read from state.db.
	clear(s.newest)
	for i, p := range ops {
		if p.op.kind == opRecord {
			s.newest[p.op.key] = i
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		a := newApplier(tx, s.log)
		for i, p := range ops {
			if p.op.kind == opRecord && s.newest[p.op.key] != i {
				continue
			}
			if err := a.apply(p.op); err != nil {
				return err
			}
		}
		if err := a.done(); err != nil {
			return err
		}
		if pruned, err = prune(tx, s.now().Add(-engine.KeyRetention)); err != nil {
			return err
		}
		return setApplied(tx, upto)
	})
	if err != nil {
		err = fmt.Errorf("apply the state log to %s: %w", FileName, err)
		s.w.applyFailed(err)
		return 0, err
	}
	s.w.appliedTo(len(ops), upto)
	return pruned, nil
}

// Close applies the log to state.db and closes both files.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.w.close()
		close(s.stop)
		<-s.stopped
		_, err := s.checkpoint()
		if cerr := s.w.closeFiles(); err == nil {
			err = cerr
		}
		if cerr := s.db.Close(); err == nil {
			err = cerr
		}
		s.closeErr = err
	})
	return s.closeErr
}

// Commits is how many fdatasyncs of the log the store has made (each makes
// every change written before it durable), for measuring what group commit
// saves.
func (s *Store) Commits() int64 {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.syncsRun
}

// Load returns the record for key if it is younger than engine.KeyRetention.
// A record that cannot be decoded is reported as in doubt with no fingerprint,
// so the engine refuses the key instead of acting as if it were new.
func (s *Store) Load(key string) (engine.Record, bool) {
	v, found := s.w.record(key)
	if !found {
		err := s.db.View(func(tx *bolt.Tx) error {
			if b := get(tx, key); b != nil {
				v, found = append([]byte(nil), b...), true
			}
			return nil
		})
		if err != nil {
			s.log.Error("state store unreadable; the key is refused", "key", key, "err", err)
			return engine.Record{InDoubt: true, At: s.now()}, true
		}
	}
	if !found {
		return engine.Record{}, false
	}
	rec, err := engine.DecodeRecord(key, v)
	if err != nil {
		s.log.Error("idempotency record unreadable; the key is refused", "key", key, "err", err)
		return engine.Record{InDoubt: true, At: s.now()}, true
	}
	if s.now().Sub(rec.At) > engine.KeyRetention {
		return engine.Record{}, false
	}
	return rec, true
}

// recordOp is the op that stores r under key.
func recordOp(key string, r engine.Record) (op, error) {
	v, err := engine.EncodeRecord(key, r)
	if err != nil {
		return op{}, fmt.Errorf("encode the record: %w", err)
	}
	return op{kind: opRecord, key: key, at: r.At, value: v}, nil
}

// Save stores r under key and returns once it is on disk.
func (s *Store) Save(key string, r engine.Record) error {
	o, err := recordOp(key, r)
	if err == nil {
		err = s.w.append(o)
	}
	if err != nil {
		return fmt.Errorf("save idempotency record: %w", err)
	}
	return nil
}

// SaveOutcome is Save and, when w is not nil, RecordWrite in one change
// (engine.OutcomeStore). With shown it returns once the change is written
// to the log, and it is fsync'd with the next change that waits for one (or
// on its own, as soon as no sync is under way): a crash of the process
// loses nothing, and one of the machine before the sync leaves the key's
// in-doubt intent, which the device's read-back settles as this outcome.
func (s *Store) SaveOutcome(key string, r engine.Record, tool string, w *engine.Write, keep time.Duration, shown bool) error {
	o, err := recordOp(key, r)
	if err != nil {
		return fmt.Errorf("save idempotency record: %w", err)
	}
	ops := append(make([]op, 0, 2), o) // room for the charge: one allocation
	if w != nil {
		ops = append(ops, op{kind: opCharge, key: tool, write: *w, keep: keep})
	}
	if shown {
		err = s.w.appendWritten(ops...)
	} else {
		err = s.w.append(ops...)
	}
	if err != nil {
		return fmt.Errorf("save idempotency record and the write to %s: %w", tool, err)
	}
	return nil
}

// RecordWrite adds w to tool's history and returns once it is on disk
// (engine.LimitStore). Writes older than keep before w.At are dropped; the
// latest is always kept.
func (s *Store) RecordWrite(tool string, w engine.Write, keep time.Duration) error {
	if err := s.w.append(op{kind: opCharge, key: tool, write: w, keep: keep}); err != nil {
		return fmt.Errorf("record the write to %s: %w", tool, err)
	}
	return nil
}

// view applies the log first, so that what state.db holds is everything.
// The methods that read whole tables are for start-up, when there is
// nothing to apply, or tools.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	if _, err := s.checkpoint(); err != nil {
		return err
	}
	return s.db.View(fn)
}

// InDoubt lists the records whose write outcome is unknown (engine.InDoubtLister).
func (s *Store) InDoubt() (map[string]engine.Record, error) {
	out := map[string]engine.Record{}
	cutoff := s.now().Add(-engine.KeyRetention)
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
			key := string(k[8:])
			rec, err := engine.DecodeRecord(key, v)
			if err != nil {
				return fmt.Errorf("record %q: %w", key, err)
			}
			if rec.InDoubt && rec.At.After(cutoff) {
				out[key] = rec
			}
			return nil
		})
	})
	return out, err
}

// Prune drops idempotency records older than engine.KeyRetention and reports
// how many; their pages are reused by later records. Checkpoints prune too.
func (s *Store) Prune() (n int, err error) {
	applied, err := s.checkpoint()
	if err != nil {
		return 0, err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		n, err = prune(tx, s.now().Add(-engine.KeyRetention))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune idempotency records: %w", err)
	}
	return applied + n, nil
}

// LoadWrites returns every point's write history (engine.LimitStore).
func (s *Store) LoadWrites() (map[string]engine.WriteHistory, error) {
	out := map[string]engine.WriteHistory{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketWrites).ForEach(func(k, v []byte) error {
			var h history
			if err := json.Unmarshal(v, &h); err != nil {
				return fmt.Errorf("write history of %s: %w", k, err)
			}
			out[string(k)] = engine.WriteHistory{Writes: h.Writes, Last: h.Last, LastValue: h.LastValue, Seq: h.Seq, Key: h.Key}
			return nil
		})
	})
	return out, err
}

// Records calls fn with every idempotency record, in doubt or final, oldest
// slot first, expired ones not yet pruned included (fn checks At). fn must
// not call the store. Records that cannot be decoded are skipped and
// reported in the error, after the others; an error from fn stops the walk.
func (s *Store) Records(fn func(key string, r engine.Record) error) error {
	var bad int
	var firstBad error
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketRecords).ForEach(func(k, v []byte) error {
			key := string(k[8:])
			rec, err := engine.DecodeRecord(key, v)
			if err != nil {
				if bad++; firstBad == nil {
					firstBad = fmt.Errorf("idempotency record %q: %w", key, err)
				}
				return nil
			}
			return fn(key, rec)
		})
	})
	if err == nil && bad > 0 {
		err = fmt.Errorf("%d idempotency records unreadable, skipped; the first: %w", bad, firstBad)
	}
	return err
}
