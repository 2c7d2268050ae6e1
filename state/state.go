// Package state is physmcpd's crash-safe store for the Full profile: the
// idempotency records of do_* calls (engine.IdempotencyStore, including the
// in-doubt intent written before each write), the write history behind
// cooldowns and rate limits, and the last value written to each actuator
// (engine.LimitStore). The Lite profile opens no Store and writes nothing.
//
// It is one go.etcd.io/bbolt file, <state-dir>/state.db, chosen over an
// fsync'd append-only log because every method here is a read-modify-write by
// key (a record replaces its intent; a point's history is trimmed as it
// grows): bbolt gives atomic, fsync'd transactions with copy-on-write pages,
// so a crash at any instant leaves either the old or the new value, never a
// torn one, and deleted records' pages are reused, so pruning keeps the file
// bounded without a compaction pass that a log would need (rewrite, fsync,
// rename, with its own crash windows). It is pure Go (no cgo), so the arm
// cross-builds keep working, and its file lock stops a second daemon from
// sharing the state by mistake.
//
// Every Save and RecordWrite returns only after its transaction is committed
// and fsync'd: the engine writes to the device only after the intent is durable.
//
// A store that lost records must not be mistaken for a new one: the engine
// would then act twice on a repeated idempotency key and ignore cooldowns.
// So Open reads every page and runs bbolt's consistency check before use,
// and a random store id, kept both inside state.db and in state.id beside it,
// tells a new directory from one whose state.db was truncated, deleted or
// replaced (integrity.go). Check and Reset are the operator's way out
// (recover.go).
package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
)

// FileName is the database file inside the state directory.
const FileName = "state.db"

var (
	bucketKeys    = []byte("idempotency")    // key → record (JSON)
	bucketByTime  = []byte("idempotency_at") // at (big-endian ns) + key → nothing, for pruning
	bucketWrites  = []byte("writes")         // tool → history (JSON)
	pruneEvery    = 1024                     // saves between prunes
	lockWaitLimit = 2 * time.Second
)

// Store is the bbolt-backed store. It is safe for concurrent use.
type Store struct {
	db    *bolt.DB
	now   func() time.Time
	log   *slog.Logger
	saves int // guarded by bbolt's single writer
	group committer
}

// Open opens the store in dir, creating dir (0700) and a new store when the
// directory has none, verifies it (see inspect), and prunes records older
// than engine.KeyRetention. A store that may have lost records is refused
// with a *BrokenError and never replaced by an empty one. now is the clock
// (nil: time.Now).
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
	if in.recorded == "" {
		if err := p.adopt(in, log); err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := db.Update(initBuckets); err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise %s: %w", p.db, err)
	}
	s := &Store{db: db, now: now, log: log}
	if n, err := s.Prune(); err != nil {
		db.Close()
		return nil, err
	} else if n > 0 {
		log.Info("expired idempotency records pruned", "count", n)
	}
	return s, nil
}

// Close closes the database file.
func (s *Store) Close() error { return s.db.Close() }

// Load returns the record for key if it is younger than engine.KeyRetention.
// A record that cannot be decoded is reported as in doubt with no fingerprint,
// so the engine refuses the key instead of acting as if it were new.
func (s *Store) Load(key string) (engine.Record, bool) {
	var rec engine.Record
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketKeys).Get([]byte(key))
		if v == nil {
			return nil
		}
		found = true
		return json.Unmarshal(v, &rec)
	})
	if err != nil {
		s.log.Error("idempotency record unreadable; the key is refused", "key", key, "err", err)
		return engine.Record{InDoubt: true, At: s.now()}, true
	}
	if !found || s.now().Sub(rec.At) > engine.KeyRetention {
		return engine.Record{}, false
	}
	return rec, true
}

// Save stores r under key and returns once it is on disk. Every pruneEvery
// saves it also drops expired records, in the same transaction.
func (s *Store) Save(key string, r engine.Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the record: %w", err)
	}
	if err := s.commit(func(tx *bolt.Tx) error { return s.save(tx, key, v, r.At) }); err != nil {
		return fmt.Errorf("save idempotency record: %w", err)
	}
	return nil
}

// SaveCharged is Save and RecordWrite in one commit (engine.OutcomeStore).
func (s *Store) SaveCharged(key string, r engine.Record, tool string, w engine.Write, keep time.Duration) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the record: %w", err)
	}
	err = s.commit(func(tx *bolt.Tx) error {
		if err := s.save(tx, key, v, r.At); err != nil {
			return err
		}
		return recordWrite(tx, tool, w, keep)
	})
	if err != nil {
		return fmt.Errorf("save idempotency record and the write to %s: %w", tool, err)
	}
	return nil
}

// save puts the encoded record v and, every pruneEvery saves, prunes.
func (s *Store) save(tx *bolt.Tx, key string, v []byte, at time.Time) error {
	if err := put(tx, key, v, at); err != nil {
		return err
	}
	if s.saves++; s.saves%pruneEvery == 0 {
		_, err := prune(tx, s.now().Add(-engine.KeyRetention))
		return err
	}
	return nil
}

// put stores the encoded record v, dated at, under key, and moves the key
// in the time index.
func put(tx *bolt.Tx, key string, v []byte, at time.Time) error {
	keys, byTime := tx.Bucket(bucketKeys), tx.Bucket(bucketByTime)
	if old := keys.Get([]byte(key)); old != nil {
		var prev engine.Record
		if json.Unmarshal(old, &prev) == nil {
			if err := byTime.Delete(timeKey(prev.At, key)); err != nil {
				return err
			}
		}
	}
	if err := keys.Put([]byte(key), v); err != nil {
		return err
	}
	return byTime.Put(timeKey(at, key), nil)
}

// InDoubt lists the records whose write outcome is unknown (engine.InDoubtLister).
func (s *Store) InDoubt() (map[string]engine.Record, error) {
	out := map[string]engine.Record{}
	cutoff := s.now().Add(-engine.KeyRetention)
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKeys).ForEach(func(k, v []byte) error {
			var rec engine.Record
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("record %q: %w", k, err)
			}
			if rec.InDoubt && rec.At.After(cutoff) {
				out[string(k)] = rec
			}
			return nil
		})
	})
	return out, err
}

// Prune drops idempotency records older than engine.KeyRetention and reports
// how many; their pages are reused by later records.
func (s *Store) Prune() (n int, err error) {
	err = s.db.Update(func(tx *bolt.Tx) error {
		n, err = prune(tx, s.now().Add(-engine.KeyRetention))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune idempotency records: %w", err)
	}
	return n, nil
}

func prune(tx *bolt.Tx, cutoff time.Time) (int, error) {
	keys, byTime := tx.Bucket(bucketKeys), tx.Bucket(bucketByTime)
	var expired [][]byte
	c := byTime.Cursor()
	for k, _ := c.First(); k != nil && int64(binary.BigEndian.Uint64(k[:8])) < cutoff.UnixNano(); k, _ = c.Next() {
		expired = append(expired, append([]byte(nil), k...))
	}
	for _, k := range expired {
		if err := byTime.Delete(k); err != nil {
			return 0, err
		}
		if err := keys.Delete(k[8:]); err != nil {
			return 0, err
		}
	}
	return len(expired), nil
}

// timeKey orders the time index by age; times before 1970 sort first.
func timeKey(at time.Time, key string) []byte {
	b := make([]byte, 8, 8+len(key))
	binary.BigEndian.PutUint64(b, uint64(max(at.UnixNano(), 0)))
	return append(b, key...)
}

// history is a point's write history as stored.
type history struct {
	Writes    []time.Time `json:"writes"`
	Last      time.Time   `json:"last"`
	LastValue any         `json:"last_value"`
	Seq       uint64      `json:"seq,omitempty"`
	Key       string      `json:"key,omitempty"`
}

// LoadWrites returns every point's write history (engine.LimitStore).
func (s *Store) LoadWrites() (map[string]engine.WriteHistory, error) {
	out := map[string]engine.WriteHistory{}
	err := s.db.View(func(tx *bolt.Tx) error {
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

// RecordWrite adds w to tool's history and returns once it is on disk
// (engine.LimitStore). Writes older than keep before w.At are dropped; the
// latest is always kept.
func (s *Store) RecordWrite(tool string, w engine.Write, keep time.Duration) error {
	if err := s.commit(func(tx *bolt.Tx) error { return recordWrite(tx, tool, w, keep) }); err != nil {
		return fmt.Errorf("record the write to %s: %w", tool, err)
	}
	return nil
}

func recordWrite(tx *bolt.Tx, tool string, w engine.Write, keep time.Duration) error {
	b := tx.Bucket(bucketWrites)
	var h history
	if v := b.Get([]byte(tool)); v != nil {
		if err := json.Unmarshal(v, &h); err != nil {
			return fmt.Errorf("write history of %s: %w", tool, err)
		}
	}
	if !w.At.Before(h.Last) {
		h.Last, h.LastValue = w.At, w.Value
	}
	if w.Seq > h.Seq {
		h.Seq, h.Key = w.Seq, w.Key
	}
	h.Writes = append(h.Writes, w.At)
	slices.SortFunc(h.Writes, time.Time.Compare)
	kept := h.Writes[:0]
	for _, t := range h.Writes {
		if w.At.Sub(t) <= keep || t.Equal(h.Last) {
			kept = append(kept, t)
		}
	}
	h.Writes = kept
	v, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return b.Put([]byte(tool), v)
}

// Records calls fn with every idempotency record, in doubt or final, in key
// order, expired ones not yet pruned included (fn checks At). fn must not
// call the store. Records that cannot be decoded are skipped and reported in
// the error, after the others; an error from fn stops the walk.
func (s *Store) Records(fn func(key string, r engine.Record) error) error {
	var bad int
	var firstBad error
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketKeys).ForEach(func(k, v []byte) error {
			var rec engine.Record
			if err := json.Unmarshal(v, &rec); err != nil {
				if bad++; firstBad == nil {
					firstBad = fmt.Errorf("idempotency record %q: %w", k, err)
				}
				return nil
			}
			return fn(string(k), rec)
		})
	})
	if err == nil && bad > 0 {
		err = fmt.Errorf("%d idempotency records unreadable, skipped; the first: %w", bad, firstBad)
	}
	return err
}
