package state

import (
	"crypto/rand"
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

var (
	bucketMeta = []byte("meta")     // store_id → the id also kept in state.id
	keyStoreID = []byte("store_id") // in bucketMeta
	idPattern  = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

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
type paths struct{ dir, db, id string }

func pathsIn(dir string) paths {
	return paths{dir: dir, db: filepath.Join(dir, FileName), id: filepath.Join(dir, IDFileName)}
}

func (p paths) broken(file, format string, a ...any) error {
	return &BrokenError{Dir: p.dir, File: file, Problem: fmt.Sprintf(format, a...)}
}

// inspection is what inspect found in a state directory.
type inspection struct {
	db       *bolt.DB // open and verified; nil when the directory has no state.db yet
	recorded string   // the id in state.id; "" when there is no state.id
	stored   string   // the id inside state.db; "" when it has none (a store from before state.id)
}

// inspect opens the store in p and verifies it: state.id against state.db,
// every page of state.db, and bbolt's consistency check. It returns a
// *BrokenError for anything that means recorded keys may be lost. readOnly
// opens state.db with a shared lock and changes nothing.
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
		if b := tx.Bucket(bucketMeta); b != nil {
			in.stored = string(b.Get(keyStoreID))
		}
		return nil
	}); err != nil {
		db.Close()
		return in, fmt.Errorf("state store %s: read the store id: %w", p.db, err)
	}
	switch {
	case recorded == "" || in.stored == recorded:
		return in, nil
	case in.stored == "":
		db.Close()
		return in, p.broken(p.db, "has no store id, but %s records store %s: the database was replaced by one from another installation or an older physmcpd", p.id, recorded)
	default:
		db.Close()
		return in, p.broken(p.db, "is store %s, but %s records store %s: the database was replaced by another store's", in.stored, p.id, recorded)
	}
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

// initBuckets creates the buckets a store needs (an older store lacks meta).
func initBuckets(tx *bolt.Tx) error {
	for _, b := range [][]byte{bucketKeys, bucketByTime, bucketWrites, bucketMeta, bucketOps} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// adopt gives a store without an id file one: the id inside state.db, or a
// new one for a store from before state.id existed.
func (p paths) adopt(in inspection, log *slog.Logger) error {
	id := in.stored
	if id == "" {
		id = newID()
		if err := in.db.Update(func(tx *bolt.Tx) error {
			if err := initBuckets(tx); err != nil {
				return err
			}
			return tx.Bucket(bucketMeta).Put(keyStoreID, []byte(id))
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
