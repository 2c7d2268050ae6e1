package state

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/physmcp/physmcpd/engine"
)

var (
	// ErrNoStore is Check's and Reset's answer for a directory with no store:
	// serve creates one there.
	ErrNoStore = errors.New("no state store yet")
	// ErrIntact is Reset's refusal to discard a store that passes every check.
	ErrIntact = errors.New("the state store passes every check")
)

// Report is what Check found in a sound store.
type Report struct {
	File      string
	StoreID   string // "" for a store made before state.id existed
	Records   int    // idempotency records, expired ones included until the next prune
	Histories int    // points with a write history
	Bytes     int64
	Took      time.Duration // opening, reading every page and tx.Check
	Notes     []string      // what serve repairs by itself on its next start
}

// Check verifies the store in dir as Open does, without changing anything
// (it takes a shared lock, so it fails while a physmcpd serves from dir). It
// returns a *BrokenError when serve would refuse the store, ErrNoStore when
// there is none.
func Check(dir string) (Report, error) {
	if _, err := os.Stat(dir); err != nil {
		return Report{}, fmt.Errorf("state directory: %w", err)
	}
	p := pathsIn(dir)
	start := time.Now()
	in, err := inspect(p, true)
	if err != nil {
		return Report{}, err
	}
	if in.db == nil {
		return Report{}, ErrNoStore
	}
	defer in.db.Close()
	r := Report{File: p.db, StoreID: in.stored, Took: time.Since(start)}
	err = in.db.View(func(tx *bolt.Tx) error {
		r.Bytes = tx.Size()
		for _, name := range [][]byte{bucketIndex, legacyKeys} {
			if b := tx.Bucket(name); b != nil {
				r.Records += b.Stats().KeyN
			}
		}
		if b := tx.Bucket(bucketWrites); b != nil {
			r.Histories = b.Stats().KeyN
		}
		return nil
	})
	switch {
	case in.stored == "":
		r.Notes = append(r.Notes, "the store has no id yet (it was made by an older physmcpd): serve gives it one and writes "+IDFileName)
	case in.recorded == "":
		r.Notes = append(r.Notes, IDFileName+" is missing: serve writes it again from the id inside "+FileName)
	}
	if in.format != format {
		r.Notes = append(r.Notes, fmt.Sprintf("the store is of format %s (an older physmcpd's): serve converts it to format %s", in.format, format))
	}
	if in.hasLog {
		if ops, lerr := unappliedOps(p.log, in.applied); lerr != nil {
			err = errors.Join(err, lerr)
		} else if len(ops) > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("%d changes in %s are not in %s yet: serve applies them when it starts", len(ops), logFileName, FileName))
		}
	}
	return r, err
}

// unappliedOps reads the ops of the log at path from LSN applied on.
func unappliedOps(path string, applied int64) ([]op, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("state log: %w", err)
	}
	defer f.Close()
	h, err := readLogHeader(f)
	if err != nil {
		return nil, fmt.Errorf("state log %s %w", path, err)
	}
	entries, _, err := readLog(f, h.ring, applied)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var ops []op
	for _, e := range entries {
		o, err := decodeOps(e)
		if err != nil {
			return ops, fmt.Errorf("%s: an entry cannot be decoded: %w", path, err)
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// ResetReport is what Reset did.
type ResetReport struct {
	MovedTo   string // where the old state.db went; "" when there was none
	StoreID   string // the new store's id
	Records   int    // idempotency records copied from the old file
	Histories int    // write histories copied from the old file
	Lost      error  // why some records could not be copied; nil when none were lost
}

// Reset replaces a store that Check (and so serve) refuses: it renames
// state.db to state.db.broken-<UTC time> (and state.log to
// state.log.broken-<UTC time>), copies every idempotency record and write
// history it can still read from them into a new store with a new id, and
// writes state.id. Whatever it could not read is forgotten. It refuses a
// sound store (ErrIntact), a directory without one (ErrNoStore) and a store
// a running physmcpd holds.
func Reset(dir string, now time.Time) (ResetReport, error) {
	var rep ResetReport
	p := pathsIn(dir)
	in, err := inspect(p, true)
	var broken *BrokenError
	switch {
	case err == nil && in.db == nil:
		return rep, ErrNoStore
	case err == nil:
		in.db.Close()
		return rep, ErrIntact
	case !errors.As(err, &broken):
		return rep, err
	}
	kept := salvaged{lost: fmt.Errorf("%s is missing", p.db)}
	suffix := ".broken-" + now.UTC().Format("20060102T150405Z")
	if info, err := os.Stat(p.db); err == nil {
		kept.lost = fmt.Errorf("%s is empty", p.db)
		if info.Size() > 0 {
			kept = salvage(p)
		}
		rep.MovedTo = p.db + suffix
		if err := moveAside(p.db, rep.MovedTo); err != nil {
			return rep, err
		}
	}
	if _, err := os.Stat(p.log); err == nil {
		if err := moveAside(p.log, p.log+suffix); err != nil {
			return rep, err
		}
	}
	if err := syncDir(dir); err != nil {
		return rep, fmt.Errorf("state directory %s: %w", dir, err)
	}
	rep.Lost = kept.lost
	// create replaces state.id only after the new state.db is in place: a
	// crash in between leaves ids that disagree, which serve refuses and a
	// second reset repairs, never a directory serve would fill afresh.
	rep.StoreID, err = p.create(func(tx *bolt.Tx) error {
		var err error
		rep.Records, rep.Histories, err = kept.copyInto(tx, now)
		return err
	})
	if kept.unreadableHistories > 0 {
		rep.Lost = errors.Join(rep.Lost, fmt.Errorf("%d write histories could not be decoded", kept.unreadableHistories))
	}
	return rep, err
}

// moveAside renames path to to: a link, then a removal, so that unlike a
// rename it never replaces an earlier broken store.
func moveAside(path, to string) error {
	if err := os.Link(path, to); err != nil {
		return fmt.Errorf("move %s aside: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("move %s aside: %w", path, err)
	}
	return nil
}

// salvaged is what could be read from a broken store.
type salvaged struct {
	keys, writes        map[string][]byte
	logged              []op // from state.log, not yet in state.db
	lost                error
	unreadableHistories int // set by copyInto
}

// salvage reads what bbolt still can from state.db, and what state.log holds
// beyond it when state.db still says where that begins.
func salvage(p paths) salvaged {
	s := salvaged{keys: map[string][]byte{}, writes: map[string][]byte{}}
	var db *bolt.DB
	s.lost = guard(func() (err error) {
		db, err = bolt.Open(p.db, 0o600, &bolt.Options{Timeout: lockWaitLimit, ReadOnly: true})
		return err
	})
	if s.lost != nil {
		return s
	}
	defer closeGuarded(db)
	records := map[string][]byte{}
	s.lost = errors.Join(salvageBucket(db, legacyKeys, s.keys), salvageBucket(db, bucketRecords, records),
		salvageBucket(db, bucketWrites, s.writes))
	for k, v := range records {
		if len(k) > 8 {
			s.keys[k[8:]] = v
		}
	}
	var applied []byte
	if err := guard(func() error {
		return db.View(func(tx *bolt.Tx) error {
			if meta := tx.Bucket(bucketMeta); meta != nil {
				applied = bytes.Clone(meta.Get(keyLogApplied))
			}
			return nil
		})
	}); err != nil || len(applied) != 8 {
		if _, serr := os.Stat(p.log); serr == nil {
			s.lost = errors.Join(s.lost, fmt.Errorf("%s cannot say where %s begins, so the log's changes are not copied", p.db, p.log))
		}
		return s
	}
	ops, err := unappliedOps(p.log, int64(binary.BigEndian.Uint64(applied)))
	s.logged = ops
	s.lost = errors.Join(s.lost, err)
	return s
}

// salvageBucket copies what it can read of a bucket into out: forward from
// the first key until a bad page stops it, then backward from the last until
// it meets the keys already copied, so only the records on bad pages are lost.
func salvageBucket(db *bolt.DB, name []byte, out map[string][]byte) error {
	var errs []error
	for _, backward := range []bool{false, true} {
		errs = append(errs, guard(func() error {
			return db.View(func(tx *bolt.Tx) error {
				b := tx.Bucket(name)
				if b == nil {
					return nil
				}
				c := b.Cursor()
				first, next := c.First, c.Next
				if backward {
					first, next = c.Last, c.Prev
				}
				for k, v := first(); k != nil; k, v = next() {
					if _, seen := out[string(k)]; seen && backward {
						return nil
					}
					if v != nil {
						out[string(k)] = bytes.Clone(v)
					}
				}
				return nil
			})
		}))
	}
	return errors.Join(errs...)
}

// copyInto writes the salvaged records into a new store's transaction and
// counts them; then the changes from the log, newer than those. Expired
// records are left behind. A record that cannot be decoded is kept, dated
// now: Load reports such a key as in doubt, so it is refused for a full
// retention period rather than forgotten. A history that cannot be decoded
// is dropped, because it would stop LoadWrites, and serve.
func (s *salvaged) copyInto(tx *bolt.Tx, now time.Time) (records, histories int, err error) {
	for _, o := range s.logged {
		if o.kind == opRecord {
			s.keys[o.key] = o.value
		}
	}
	for k, v := range s.keys {
		at := now
		if rec, err := engine.DecodeRecord(k, v); err == nil {
			at = rec.At
		}
		if now.Sub(at) > engine.KeyRetention {
			continue
		}
		if err := put(tx, k, v, at); err != nil {
			return 0, 0, err
		}
		records++
	}
	writes := tx.Bucket(bucketWrites)
	for k, v := range s.writes {
		if json.Unmarshal(v, new(history)) != nil {
			s.unreadableHistories++
			continue
		}
		if err := writes.Put([]byte(k), v); err != nil {
			return 0, 0, err
		}
		histories++
	}
	for _, o := range s.logged {
		if o.kind == opRecord {
			continue // copied above
		}
		if o.kind == opCharge && writes.Get([]byte(o.key)) == nil {
			histories++
		}
		if err := apply(tx, slog.Default(), o); err != nil {
			return 0, 0, err
		}
	}
	return records, histories, nil
}
