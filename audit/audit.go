// Package audit is physmcpd's tamper-evident audit trail: append-only JSON
// lines, one per do_* attempt, in daily files audit-YYYY-MM-DD.jsonl (UTC) in
// one directory.
//
// Every line is a JSON object whose first key, "prev", is the hex SHA-256 of
// the line before it (without its newline); the first line of a file chains
// to the last line of the previous file, and the very first line to 64 zeros.
// An edited or deleted line therefore breaks the chain at the next line. Two
// small files guard the ends, which a chain alone cannot: HEAD names the last
// line (file, number, hash), so deleting or editing the newest lines is
// caught; ANCHOR names the oldest file kept and the hash its first line chains
// to, written before files past retention are removed, so deleting the
// oldest remaining file is caught too.
//
// With a Key (WithKey) the chain is keyed: a line's chain value is the
// HMAC-SHA256 of the line under the key rather than its SHA-256, so whoever
// edits a line cannot recompute the chain, HEAD and ANCHOR without the key.
// A trail becomes keyed at an EventKeyed line naming the key by id (a trail
// written before keying keeps its plain start); HEAD and ANCHOR say "mac" from
// then on, so checking it without the key is a KeyError, not a pass.
//
// An entry is bounded before it is written (see MaxValueBytes and the limits
// beside it): a value over them is replaced by its Digest, so no caller input
// can make a line that Verify could not read back.
//
// Lines are fsync'd before Append returns (lines appended at the same time
// share one write and fsync); HEAD is replaced atomically after.
// A crash can leave a torn last line (dropped on Open, it was never
// acknowledged) or a HEAD one line behind (accepted and brought forward).
package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	filePrefix = "audit-"
	fileSuffix = ".jsonl"
	dayLayout  = "2006-01-02"
	headFile   = "HEAD"
	anchorFile = "ANCHOR"
	// maxLine bounds one line when reading back: far above what Append
	// writes (MaxEntryBytes), so lines of an older physmcpd still read.
	maxLine = 1 << 20
	// maxBatch bounds the lines one write holds, and so how far behind the
	// trail a crash can leave HEAD.
	maxBatch = 256
)

// genesis is what the first line of a trail chains to.
var genesis = strings.Repeat("0", 64)

// EventHeadMismatch is the "event" of a line Open appends when the trail does
// not end where HEAD says (lines were removed or altered while physmcpd was
// stopped): the evidence goes into the chain, and Verify reports it.
const EventHeadMismatch = "head_mismatch"

// Log appends entries to the trail. It is safe for concurrent use.
type Log struct {
	dir       string
	retention int // days; 0 keeps every file
	now       func() time.Time

	// qmu guards the lines waiting to be written; mu the file and the chain.
	qmu     sync.Mutex
	queue   []*queued
	writing bool // a caller is writing the lines queued before it

	mu   sync.Mutex
	f    *os.File
	file string // base name of the current file
	line int    // lines in the current file
	prev string // chain value of the last line written
	// key keys the chain from the file keyedSince on; nil while it is plain.
	key        *Key
	keyedSince string
	// appended wakes a Shipper after each line; it never blocks Append.
	appended chan struct{}
	// written counts the lines appended since Open, for monitoring.
	written atomic.Uint64
}

// Written is the number of lines appended since Open (the evidence line
// Open may append included).
func (l *Log) Written() uint64 { return l.written.Load() }

// head is the content of HEAD and ANCHOR. MAC and KeyID are set when the
// chain is keyed at that point; KeyedSince (HEAD only) names the file of the
// EventKeyed line.
type head struct {
	File       string `json:"file"`
	Line       int    `json:"line,omitempty"`
	Hash       string `json:"hash"`
	MAC        string `json:"mac,omitempty"`
	KeyID      string `json:"key_id,omitempty"`
	KeyedSince string `json:"keyed_since,omitempty"`
}

// Open opens the trail in dir (created 0700 if needed), keeping files for
// retentionDays (0: forever). now is the clock (nil: time.Now). With
// WithKey, a plain trail is keyed from here on; a keyed trail needs its key
// (else a *KeyError).
func Open(dir string, retentionDays int, now func() time.Time, opts ...Option) (*Log, error) {
	if retentionDays < 0 {
		return nil, fmt.Errorf("audit retention_days must not be negative, got %d", retentionDays)
	}
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	l := &Log{dir: dir, retention: retentionDays, now: now, appended: make(chan struct{}, 1)}
	files, err := trailFiles(dir)
	if err != nil {
		return nil, err
	}
	anchor, err := readHead(filepath.Join(dir, anchorFile))
	if err != nil {
		return nil, err
	}
	hd, err := readHead(filepath.Join(dir, headFile))
	if err != nil {
		return nil, err
	}
	l.prev = genesis
	if anchor != nil {
		l.prev = anchor.Hash
	}
	id, since := keyedAt(anchor, hd)
	var lastLine []byte
	if len(files) > 0 {
		last := files[len(files)-1]
		n, line, err := repairTail(filepath.Join(dir, last))
		if err != nil {
			return nil, err
		}
		if n > 0 {
			l.file, l.line, lastLine = last, n, line
		}
		if kid := keyedLine(line); id == "" && kid != "" {
			id, since = kid, last // a crash between the keyed line and its HEAD
		}
	}
	key := collect(opts).key
	if id != "" {
		if key == nil || key.ID() != id {
			return nil, &KeyError{Dir: dir, Want: id, Got: keyID(key)}
		}
		l.key, l.keyedSince = key, since
	}
	var mismatch string
	if len(files) > 0 {
		if lastLine != nil {
			l.prev = l.key.sum(lastLine)
		}
		var err error
		mismatch, err = l.checkHead(hd)
		if err != nil {
			return nil, err
		}
	}
	if mismatch != "" {
		if err := l.Append(map[string]any{"time": now().UTC(), "event": EventHeadMismatch, "detail": mismatch}); err != nil {
			return nil, err
		}
	}
	if key != nil && l.key == nil {
		l.key = key // the keyed event is the first keyed line; Append sets keyedSince
		if err := l.Append(map[string]any{"time": now().UTC(), "event": EventKeyed, "mac": MAC, "key_id": key.ID()}); err != nil {
			return nil, err
		}
	}
	if err := l.prune(); err != nil {
		return nil, err
	}
	return l, nil
}

// keyedAt returns the id of the key the trail's end is keyed under ("" when
// plain) and the file it became keyed in, from HEAD, else ANCHOR.
func keyedAt(anchor, hd *head) (id, since string) {
	switch {
	case hd != nil && hd.MAC != "":
		return hd.KeyID, hd.KeyedSince
	case anchor != nil && anchor.MAC != "":
		return anchor.KeyID, anchor.File
	}
	return "", ""
}

func keyID(k *Key) string {
	if k == nil {
		return ""
	}
	return k.ID()
}

// checkHead compares HEAD (h) with the end of the trail. A HEAD one line
// behind is a crash between a line and its HEAD update and is not a mismatch.
func (l *Log) checkHead(h *head) (string, error) {
	if h == nil {
		return "", nil
	}
	if h.File == l.file && h.Line == l.line && h.Hash == l.prev {
		return "", nil
	}
	if h.File == l.file && h.Line < l.line && l.line-h.Line <= maxBatch {
		// a crash between lines and their HEAD update: HEAD must still
		// name the line it was written for
		line, err := nthLine(filepath.Join(l.dir, l.file), l.file, h.Line)
		if err != nil {
			return "", err
		}
		if line != nil && (hashLine(line) == h.Hash || l.key.sum(line) == h.Hash) {
			return "", l.writeHead()
		}
	}
	return fmt.Sprintf("HEAD records %s line %d (hash %.12s…), but the trail ends at %s line %d (hash %.12s…)", h.File, h.Line, h.Hash, l.file, l.line, l.prev), nil
}

// Append writes v (which must encode as a JSON object) as the next line,
// chained to the previous one, and returns once it is on disk. Values over
// the limits (MaxValueBytes and beside it) are written as their Digest.
//
// Lines appended at the same time share one write, one fsync and one HEAD
// update: a caller that arrives while lines are being written waits, and
// those queued meanwhile are written next, together, in the order they
// came, by the first of them.
func (l *Log) Append(v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("audit: encode entry: %w", err)
	}
	if len(body) < 2 || body[0] != '{' {
		return fmt.Errorf("audit: an entry must encode as a JSON object, got %.40s", body)
	}
	if body, err = bound(body); err != nil {
		return err
	}
	e := &queued{body: body, done: make(chan error, 1), lead: make(chan struct{}, 1)}
	l.qmu.Lock()
	l.queue = append(l.queue, e)
	if l.writing {
		l.qmu.Unlock()
		select {
		case err := <-e.done:
			return err
		case <-e.lead: // the lines before it are written: it writes the queue now
		}
		l.qmu.Lock()
	}
	l.writing = true
	batch := l.queue[:min(len(l.queue), maxBatch)]
	l.queue = l.queue[len(batch):]
	l.qmu.Unlock()

	err = l.write(batch)
	for _, q := range batch {
		q.done <- err
	}
	l.qmu.Lock()
	if len(l.queue) > 0 {
		l.queue[0].lead <- struct{}{}
	} else {
		l.writing = false
	}
	l.qmu.Unlock()
	return <-e.done
}

// queued is a line waiting to be written.
type queued struct {
	body []byte
	done chan error    // the outcome, once written or failed
	lead chan struct{} // told to write the queue itself
}

// write appends the lines of batch to today's file, syncs it and updates
// HEAD. When the lines cannot be written, the chain stays where it was.
func (l *Log) write(batch []*queued) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.rotate(); err != nil {
		return err
	}
	if l.key != nil && l.keyedSince == "" {
		l.keyedSince = l.file
	}
	prev := l.prev
	var buf []byte
	for _, q := range batch {
		start := len(buf)
		buf = append(buf, `{"prev":"`...)
		buf = append(buf, prev...)
		buf = append(buf, '"')
		if rest := q.body[1:]; len(rest) > 1 {
			buf = append(buf, ',')
			buf = append(buf, rest...)
		} else {
			buf = append(buf, '}')
		}
		prev = l.key.sum(buf[start:])
		buf = append(buf, '\n')
	}
	if _, err := l.f.Write(buf); err != nil {
		return fmt.Errorf("audit: write %s: %w", l.file, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit: sync %s: %w", l.file, err)
	}
	l.line += len(batch)
	l.written.Add(uint64(len(batch)))
	l.prev = prev
	select {
	case l.appended <- struct{}{}:
	default: // a wake-up is pending already
	}
	return l.writeHead()
}

// rotate opens the file for today, starting a new one when the UTC day has
// changed (and removing files past retention then).
func (l *Log) rotate() error {
	name := filePrefix + l.now().UTC().Format(dayLayout) + fileSuffix
	if l.f != nil && name == l.file {
		return nil
	}
	if l.f == nil && name == l.file {
		f, err := os.OpenFile(filepath.Join(l.dir, name), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		l.f = f
		return nil
	}
	if l.f != nil {
		if err := l.f.Close(); err != nil {
			return fmt.Errorf("audit: close %s: %w", l.file, err)
		}
		l.f = nil
	}
	if name < l.file {
		// the clock went back: keep appending to the newest file rather than
		// starting one the chain would read out of order
		f, err := os.OpenFile(filepath.Join(l.dir, l.file), os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		l.f = f
		return nil
	}
	f, err := os.OpenFile(filepath.Join(l.dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	l.f, l.file, l.line = f, name, 0
	if err := syncDir(l.dir); err != nil {
		return err
	}
	return l.prune()
}

// prune removes files older than the retention, recording in ANCHOR (first)
// what the oldest kept file chains to.
func (l *Log) prune() error {
	if l.retention == 0 {
		return nil
	}
	files, err := trailFiles(l.dir)
	if err != nil {
		return err
	}
	cutoff := filePrefix + l.now().UTC().AddDate(0, 0, -l.retention).Format(dayLayout) + fileSuffix
	drop := 0
	for drop < len(files)-1 && files[drop] < cutoff && files[drop] != l.file {
		drop++
	}
	if drop == 0 {
		return nil
	}
	// what the oldest kept line chains to is in its own "prev"; with no line
	// kept yet, it is the end of the trail
	anchor := head{File: files[drop], Hash: l.prev}
	for _, f := range files[drop:] {
		p, ok, err := firstPrev(filepath.Join(l.dir, f), f)
		if err != nil {
			return err
		}
		if ok {
			anchor.Hash = p
			break
		}
	}
	if l.key != nil && l.keyedSince < files[drop] {
		anchor.MAC, anchor.KeyID = MAC, l.key.ID()
	}
	if err := writeHeadFile(filepath.Join(l.dir, anchorFile), anchor); err != nil {
		return err
	}
	for _, f := range files[:drop] {
		if err := os.Remove(filepath.Join(l.dir, f)); err != nil {
			return fmt.Errorf("audit: remove %s past retention: %w", f, err)
		}
	}
	return nil
}

// Close closes the current file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

func (l *Log) writeHead() error {
	h := head{File: l.file, Line: l.line, Hash: l.prev}
	if l.key != nil {
		h.MAC, h.KeyID, h.KeyedSince = MAC, l.key.ID(), l.keyedSince
	}
	return writeHeadFile(filepath.Join(l.dir, headFile), h)
}

func writeHeadFile(path string, h head) error {
	b, _ := json.Marshal(h)
	return replaceFile(path, b)
}

// replaceFile replaces path atomically with b and a newline (write, fsync,
// rename).
func replaceFile(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("audit: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return nil
}

func readHead(path string) (*head, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var h head
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("audit: %s is not valid: %w", path, err)
	}
	return &h, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("audit: sync %s: %w", dir, err)
	}
	return nil
}

// trailFiles lists the trail's files, oldest first (the names sort by date).
func trailFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if e.Type().IsRegular() && strings.HasPrefix(n, filePrefix) && strings.HasSuffix(n, fileSuffix) {
			if _, err := time.Parse(dayLayout, strings.TrimSuffix(strings.TrimPrefix(n, filePrefix), fileSuffix)); err == nil {
				files = append(files, n)
			}
		}
	}
	slices.Sort(files)
	return files, nil
}

func hashLine(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// repairTail drops a torn last line (no newline: a crash mid-append) and
// returns the number of lines and the last one (without its newline).
func repairTail(path string) (int, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, nil, fmt.Errorf("audit: %w", err)
	}
	if end := bytes.LastIndexByte(b, '\n') + 1; end < len(b) {
		if err := os.Truncate(path, int64(end)); err != nil {
			return 0, nil, fmt.Errorf("audit: drop the torn last line of %s: %w", path, err)
		}
		b = b[:end]
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return 0, nil, nil
	}
	return bytes.Count(b, []byte("\n")) + 1, b[bytes.LastIndexByte(b, '\n')+1:], nil
}

// keyedLine returns the key id an EventKeyed line names ("" for other lines).
func keyedLine(line []byte) string {
	var fields struct {
		Event string `json:"event"`
		KeyID string `json:"key_id"`
	}
	if json.Unmarshal(line, &fields) != nil || fields.Event != EventKeyed {
		return ""
	}
	return fields.KeyID
}

// errStop ends an eachLine walk early without an error.
var errStop = errors.New("stop")

// eachLine calls fn with every line of the file (name is its base name),
// numbered from 1 and without its newline. A line too long or torn is a
// *BreakError.
func eachLine(path, name string, fn func(n int, line []byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, maxLine)
	for n := 1; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return &BreakError{File: name, Line: n, Reason: "line too long"}
		}
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("audit: read %s: %w", path, err)
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			return &BreakError{File: name, Line: n, Reason: "torn last line (no newline)", torn: true}
		}
		if err := fn(n, line[:len(line)-1]); errors.Is(err, errStop) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// nthLine returns line n (from 1) of the file, or nil when it has fewer.
func nthLine(path, name string, n int) (line []byte, err error) {
	err = eachLine(path, name, func(i int, l []byte) error {
		if i == n {
			line = bytes.Clone(l)
			return errStop
		}
		return nil
	})
	return line, err
}

// firstPrev returns what the file's first line chains to (ok false when the
// file has no line).
func firstPrev(path, name string) (prev string, ok bool, err error) {
	err = eachLine(path, name, func(n int, line []byte) error {
		var fields struct {
			Prev string `json:"prev"`
		}
		if err := json.Unmarshal(line, &fields); err != nil {
			return &BreakError{File: name, Line: n, Reason: fmt.Sprintf("not a JSON object: %v", err)}
		}
		prev, ok = fields.Prev, true
		return errStop
	})
	return prev, ok, err
}

// Scan calls fn with every line (without its newline) of the files dated on
// or after since's UTC day, oldest first. Appends wait until it is done, so
// fn must not call Append.
func (l *Log) Scan(since time.Time, fn func(line []byte) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	files, err := trailFiles(l.dir)
	if err != nil {
		return err
	}
	first := filePrefix + since.UTC().Format(dayLayout) + fileSuffix
	for _, name := range files {
		if name < first {
			continue
		}
		if err := eachLine(filepath.Join(l.dir, name), name, func(_ int, line []byte) error { return fn(line) }); err != nil {
			return err
		}
	}
	return nil
}

// BreakError is the first place the chain does not hold.
type BreakError struct {
	File   string
	Line   int
	Reason string
	torn   bool // the file's last line has no newline
}

func (e *BreakError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason) }

// Report is what Verify checked.
type Report struct {
	Files, Lines int
}

// Verify checks the whole trail in dir: every line chains to the one before
// (across files), the oldest file is the one ANCHOR names (when files were
// removed past retention), and the trail ends where HEAD says. With WithKey
// the trail must be keyed under that key from its EventKeyed line on (lines
// before it are a plain chain). The error is a *BreakError for the first
// break found, or a *KeyError when the trail is keyed and no key or another
// key was given.
//
// A trail physmcpd is appending to checks too: HEAD is read before the
// files, so the lines written meanwhile come after the line it names. They
// must chain like any other and end within one write of HEAD as it is once
// the files are read, and a torn last line after HEAD is a write in
// progress (not counted).
func Verify(dir string, opts ...Option) (Report, error) {
	var rep Report
	anchor, err := readHead(filepath.Join(dir, anchorFile))
	if err != nil {
		return rep, err
	}
	hd, err := readHead(filepath.Join(dir, headFile))
	if err != nil {
		return rep, err
	}
	files, err := trailFiles(dir)
	if err != nil {
		return rep, err
	}
	v := verifier{dir: dir, given: collect(opts).key, prev: genesis, head: hd}
	if v.given == nil {
		// without the key a keyed chain breaks at its first keyed line: say why instead
		if id, _ := keyedAt(anchor, hd); id != "" {
			return rep, &KeyError{Dir: dir, Want: id}
		}
	}
	if anchor != nil {
		i := slices.Index(files, anchor.File)
		if i < 0 {
			return rep, &BreakError{File: anchor.File, Line: 1, Reason: "the oldest file kept (named in ANCHOR) is missing"}
		}
		files, v.prev = files[i:], anchor.Hash // older files are due for removal
		if anchor.MAC != "" {
			if err := v.keyed(anchor.KeyID); err != nil {
				return rep, err
			}
		}
	}
	if len(files) == 0 {
		if hd != nil {
			return rep, &BreakError{File: hd.File, Line: 1, Reason: "HEAD names a trail but no audit file is left"}
		}
		return rep, nil
	}
	var lastFile string
	var lastN int
	for i, name := range files {
		n, err := v.file(name)
		var torn *BreakError
		if errors.As(err, &torn) && torn.torn && i == len(files)-1 && v.headHash != "" {
			n, err = torn.Line-1, nil
		}
		if err != nil {
			return rep, err
		}
		if n == 0 {
			continue
		}
		rep.Files++
		rep.Lines += n
		lastFile, lastN = name, n
	}
	if v.given != nil && v.key == nil && rep.Lines > 0 {
		return rep, &BreakError{File: lastFile, Line: lastN, Reason: "a key was given but the trail is not keyed: it was written without one, or its keying was removed and the chain recomputed"}
	}
	if hd != nil {
		switch {
		case v.headHash == hd.Hash:
		case v.headHash != "":
			return rep, &BreakError{File: hd.File, Line: hd.Line, Reason: fmt.Sprintf("the line HEAD records hashes to %.12s…, HEAD says %.12s…: it was altered", v.headHash, hd.Hash)}
		case hd.File == lastFile && hd.Line > lastN || hd.File > lastFile:
			return rep, &BreakError{File: hd.File, Line: lastN + 1, Reason: fmt.Sprintf("line missing: HEAD records %s line %d, the trail ends at %s line %d", hd.File, hd.Line, lastFile, lastN)}
		default:
			return rep, &BreakError{File: hd.File, Line: hd.Line, Reason: fmt.Sprintf("the line HEAD records is missing (%s has fewer lines)", hd.File)}
		}
	}
	// Lines after HEAD's chain like the others. There are at most one
	// write's (maxBatch) past the newest HEAD: a write under way, or a crash
	// between a write and its HEAD update. HEAD is read again because serve
	// may have written many more while the files were read.
	now, err := readHead(filepath.Join(dir, headFile))
	if err != nil {
		return rep, err
	}
	h := hd
	if now != nil && (h == nil || now.File > h.File || now.File == h.File && now.Line > h.Line) {
		h = now
	}
	if h == nil {
		if rep.Lines > 0 {
			return rep, &BreakError{File: lastFile, Line: lastN, Reason: "HEAD is missing, so the end of the trail cannot be checked"}
		}
		return rep, nil
	}
	if (h.File < lastFile || h.File == lastFile && h.Line < lastN) && (h.File != lastFile || lastN-h.Line > maxBatch) {
		return rep, &BreakError{File: lastFile, Line: lastN, Reason: fmt.Sprintf("the trail does not end where HEAD says (%s line %d, hash %.12s…): the last lines were altered or added", h.File, h.Line, h.Hash)}
	}
	return rep, nil
}

// verifier walks the chain line by line.
type verifier struct {
	dir   string
	given *Key   // the key Verify was given, if any
	key   *Key   // the chain's key from its keyed line on; nil while plain
	prev  string // the chain value the next line must name
	// head is HEAD (nil without one), and headHash the chain value of the
	// line it names, once walked
	head     *head
	headHash string
}

// keyed switches the chain to the given key, which must be the one with id.
func (v *verifier) keyed(id string) error {
	if v.given == nil || v.given.ID() != id {
		return &KeyError{Dir: v.dir, Want: id, Got: keyID(v.given)}
	}
	v.key = v.given
	return nil
}

// file checks one file's lines and returns their count.
func (v *verifier) file(name string) (int, error) {
	count := 0
	err := eachLine(filepath.Join(v.dir, name), name, func(n int, line []byte) error {
		count = n
		var fields struct {
			Prev  string `json:"prev"`
			Event string `json:"event"`
			KeyID string `json:"key_id"`
		}
		if err := json.Unmarshal(line, &fields); err != nil {
			return &BreakError{File: name, Line: n, Reason: fmt.Sprintf("not a JSON object: %v", err)}
		}
		if fields.Prev != v.prev {
			return &BreakError{File: name, Line: n, Reason: fmt.Sprintf("chain broken: prev is %.12s…, the line before hashes to %.12s… (a line before this one was edited or deleted)", fields.Prev, v.prev)}
		}
		switch fields.Event {
		case EventHeadMismatch:
			return &BreakError{File: name, Line: n, Reason: "physmcpd found the trail altered when it started (see this line's detail)"}
		case EventKeyed:
			if v.key != nil {
				return &BreakError{File: name, Line: n, Reason: "a second keyed line: the trail was keyed already"}
			}
			if err := v.keyed(fields.KeyID); err != nil {
				return err
			}
		}
		v.prev = v.key.sum(line)
		if v.head != nil && name == v.head.File && n == v.head.Line {
			v.headHash = v.prev
		}
		return nil
	})
	return count, err
}
