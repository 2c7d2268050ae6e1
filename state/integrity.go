package state

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// IDFileName is the file beside state.db that records which store belongs in
// the directory. It lives outside the database so that a state.db truncated,
// deleted or swapped for another store's is noticed: a store forgotten that
// way would let a do_* idempotency key act twice and skip cooldowns.
const IDFileName = "state.id"

var idPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// BrokenError is a store physmcpd refuses to open because it cannot show
// that the store still holds every idempotency key and cooldown it recorded.
type BrokenError struct {
	Dir     string // the state directory
	File    string // the file at fault
	Problem string // what is wrong with it, and how it probably happened
}

// Summary is the file and what is wrong with it, without the advice.
func (e *BrokenError) Summary() string { return e.File + " " + e.Problem }

func (e *BrokenError) Error() string {
	return fmt.Sprintf("%s; physmcpd refuses to start on it, because the idempotency keys and cooldowns it held would be "+
		"forgotten and a do_* call could act twice. Run `physmcpd state check --state-dir %s` to see what is wrong and "+
		"`physmcpd state reset --state-dir %s` to move it aside and start a new store (docs/security.md, \"State store\")",
		e.Summary(), e.Dir, e.Dir)
}

// paths are the store's files in one state directory.
type paths struct{ dir, db, id, log string }

func pathsIn(dir string) paths {
	return paths{dir: dir, db: filepath.Join(dir, FileName), id: filepath.Join(dir, IDFileName), log: filepath.Join(dir, logFileName)}
}

func (p paths) broken(file, format string, a ...any) error {
	return &BrokenError{Dir: p.dir, File: file, Problem: fmt.Sprintf(format, a...)}
}

// inspection is what inspect found in a state directory.
type inspection struct {
	db       *bolt.DB // open and verified; nil when the directory has no state.db yet
	recorded string   // the id in state.id; "" when there is no state.id
	stored   string   // the id inside state.db; "" when it has none (a store from before state.id)
	format   string   // of state.db: "1" or format
	hasLog   bool     // state.db records that state.log is in use
	applied  int64    // and that it is applied up to this LSN
}

// inspect opens the store in p and verifies it: state.id against state.db,
// every page of state.db, bbolt's consistency check, and the header of
// state.log against state.db. It returns a *BrokenError for anything that
// means recorded keys may be lost. readOnly opens state.db with a shared
// lock and changes nothing.
func inspect(p paths, readOnly bool) (inspection, error) {
	var in inspection
	recorded, err := p.readID()
	if err != nil {
		return in, err
	}
	in.recorded = recorded
	info, err := os.Stat(p.db)
	switch {
	case errors.Is(err, fs.ErrNotExist) && recorded != "":
		return in, p.broken(p.db, "is missing, but %s records that store %s was created here: the database was deleted or moved away", p.id, recorded)
	case errors.Is(err, fs.ErrNotExist):
		return in, nil
	case err != nil:
		return in, fmt.Errorf("state store %s: %w", p.db, err)
	case info.Size() == 0:
		// a new store is written completely before it is given this name (create), so an empty one was truncated
		return in, p.broken(p.db, "is empty (0 bytes): it was truncated, by a full disk, a crash of the file system or a person")
	}
	db, err := openVerified(p, readOnly)
	if err != nil {
		return in, err
	}
	in.db = db
	if err := db.View(func(tx *bolt.Tx) error {
		in.stored, in.format = storeID(tx), "1"
		if b := tx.Bucket(bucketMeta); b != nil {
			if f := b.Get(keyFormat); f != nil {
				in.format = string(f)
			}
			if a := b.Get(keyLogApplied); len(a) == 8 {
				in.hasLog, in.applied = true, int64(binary.BigEndian.Uint64(a))
			}
		}
		return nil
	}); err != nil {
		db.Close()
		return in, fmt.Errorf("state store %s: read the store id: %w", p.db, err)
	}
	switch {
	case in.format != "1" && in.format != format:
		db.Close()
		return in, fmt.Errorf("state store %s is of format %s, which this physmcpd does not know: it was written by a newer physmcpd; run that one", p.db, in.format)
	case recorded == "" || in.stored == recorded:
		if err := p.checkLog(in); err != nil {
			db.Close()
			return in, err
		}
		return in, nil
	case in.stored == "":
		db.Close()
		return in, p.broken(p.db, "has no store id, but %s records store %s: the database was replaced by one from another installation or an older physmcpd", p.id, recorded)
	default:
		db.Close()
		return in, p.broken(p.db, "is store %s, but %s records store %s: the database was replaced by another store's", in.stored, p.id, recorded)
	}
}

// checkLog checks that a store whose state.db records a log has it: its
// records since the last checkpoint are there and nowhere else.
func (p paths) checkLog(in inspection) error {
	if !in.hasLog {
		return nil // a store not yet opened by a physmcpd that keeps a log
	}
	f, err := os.Open(p.log)
	if errors.Is(err, fs.ErrNotExist) {
		return p.broken(p.log, "is missing, but %s records that changes were written to it: the records of the last moments before physmcpd stopped may be gone", p.db)
	}
	if err != nil {
		return fmt.Errorf("state log %s: %w", p.log, err)
	}
	defer f.Close()
	h, err := readLogHeader(f)
	if err != nil {
		return p.broken(p.log, "%v", err)
	}
	if h.storeID != in.stored {
		return p.broken(p.log, "is the log of store %s, but %s is store %s: it was replaced by another store's", h.storeID, p.db, in.stored)
	}
	return nil
}

// openVerified opens the database and reads every page of it before anything
// uses it, then runs bbolt's consistency check. bbolt panics on a corrupted
// page, and faults on one that points past the end of the file; both become
// a *BrokenError here instead of a crash at the first do_* call.
func openVerified(p paths, readOnly bool) (*bolt.DB, error) {
	var db *bolt.DB
	err := guard(func() (err error) {
		db, err = bolt.Open(p.db, 0o600, &bolt.Options{Timeout: lockWaitLimit, ReadOnly: readOnly, PreLoadFreelist: true})
		return err
	})
	switch {
	case errors.Is(err, bolt.ErrTimeout):
		return nil, fmt.Errorf("state store %s: another physmcpd holds it (locked for more than %s); stop it first", p.db, lockWaitLimit)
	case errors.As(err, new(*fs.PathError)), errors.As(err, new(syscall.Errno)):
		// opening, locking or mapping the file failed: permissions or memory, not its content
		return nil, fmt.Errorf("state store %s: %w", p.db, err)
	case err != nil:
		return nil, p.broken(p.db, "is not a readable bbolt database (%v): it was truncated, overwritten or corrupted", err)
	}
	if err := guard(func() error { return db.View(verify) }); err != nil {
		closeGuarded(db)
		return nil, p.broken(p.db, "is corrupted (%v)", err)
	}
	return db, nil
}

// guard runs f, turning a bbolt panic, or a fault on a page mapped past the
// end of the file, into an error. bbolt's View and Update roll their
// transaction back while the panic unwinds, so the database can be closed.
func guard(f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("bbolt: %v", r)
		}
	}()
	return f()
}

// closeGuarded closes a database whose pages may be corrupted: closing may
// panic as well, and releasing the file lock is all that matters then.
func closeGuarded(db *bolt.DB) {
	_ = guard(db.Close)
}

// verify reads every key and value of every bucket (so a bad page panics
// here, in the goroutine openVerified guards), then runs tx.Check, which
// also finds pages both in use and free, or neither. tx.Check walks the same
// pages in a goroutine of its own, where a panic could not be recovered:
// that is why the walk comes first.
func verify(tx *bolt.Tx) error {
	if err := tx.ForEach(func(_ []byte, b *bolt.Bucket) error { walk(b); return nil }); err != nil {
		return err
	}
	var first error
	for err := range tx.Check() {
		if first == nil {
			first = err
		}
	}
	return first
}

// walk reads every key and value of b, nested buckets included: checksumming
// them touches every byte, so one on a page past the end of the file faults
// here.
func walk(b *bolt.Bucket) {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		crc32.ChecksumIEEE(k)
		crc32.ChecksumIEEE(v)
		if v == nil {
			if sub := b.Bucket(k); sub != nil {
				walk(sub)
			}
		}
	}
}

// readID returns the id in state.id, or "" when there is no state.id.
func (p paths) readID() (string, error) {
	data, err := os.ReadFile(p.id)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("state store id %s: %w", p.id, err)
	}
	var id string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if id != "" || !idPattern.MatchString(line) {
			id = ""
			break
		}
		id = line
	}
	if id == "" {
		return "", p.broken(p.id, "is not a store id file (want one line of 32 hex digits): restore it from a backup, "+
			"or delete it if %s is this device's own store (physmcpd then adopts the id inside it)", p.db)
	}
	return id, nil
}

// writeID replaces state.id atomically: a temporary file, fsync'd, renamed
// over it, and the directory fsync'd so the new name survives a crash.
func (p paths) writeID(id string) error {
	f, err := os.CreateTemp(p.dir, IDFileName+".new-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", p.id, err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, err = fmt.Fprintf(f, "# physmcpd state store id: it must match the id inside %s (docs/security.md, \"State store\")\n%s\n", FileName, id)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p.id)
	}
	if err == nil {
		err = syncDir(p.dir)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p.id, err)
	}
	return nil
}

// create writes a new, empty store with a new id (plus whatever seed puts
// in it) under a temporary name and links it in as state.db only when
// complete, so an empty or half-written state.db never comes from here; then
// it writes state.id. A crash between the two leaves a state.db whose id
// state.id lacks, which Open adopts. The link fails rather than replace a
// state.db that appeared meanwhile.
func (p paths) create(seed func(tx *bolt.Tx) error) (id string, err error) {
	id = newID()
	f, err := os.CreateTemp(p.dir, FileName+".new-*")
	if err != nil {
		return "", fmt.Errorf("create %s: %w", p.db, err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp) // once linked, state.db keeps the data
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockWaitLimit})
	if err != nil {
		return "", fmt.Errorf("create %s: %w", p.db, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := initBuckets(tx); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMeta).Put(keyStoreID, []byte(id)); err != nil {
			return err
		}
		if seed != nil {
			return seed(tx)
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, p.db)
	}
	if err == nil {
		err = syncDir(p.dir)
	}
	if err != nil {
		return "", fmt.Errorf("create %s: %w", p.db, err)
	}
	return id, p.writeID(id)
}

// adopt gives a store without an id file one: the id inside state.db, or a
// new one for a store from before state.id existed.
func (p paths) adopt(in inspection, log *slog.Logger) error {
	id := in.stored
	if id == "" {
		id = newID()
		if err := in.db.Update(func(tx *bolt.Tx) error {
			meta, err := tx.CreateBucketIfNotExists(bucketMeta)
			if err != nil {
				return err
			}
			// where this store's format keeps it (upgrade moves it)
			key := legacyStoreID
			if in.format == format {
				key = keyStoreID
			}
			return meta.Put(key, []byte(id))
		}); err != nil {
			return fmt.Errorf("state store %s: record its id: %w", p.db, err)
		}
		log.Info("state store given an id", "file", p.id, "store", id)
	} else {
		log.Warn("state.id was missing; recreated from the id inside state.db", "file", p.id, "store", id)
	}
	return p.writeID(id)
}

// newID is a random store id (crypto/rand.Read cannot fail).
func newID() string {
	raw := make([]byte, 16)
	rand.Read(raw)
	return hex.EncodeToString(raw)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
