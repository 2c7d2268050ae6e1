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
// Lines are fsync'd before Append returns; HEAD is replaced atomically after.
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
	"time"
)

const (
	filePrefix = "audit-"
	fileSuffix = ".jsonl"
	dayLayout  = "2006-01-02"
	headFile   = "HEAD"
	anchorFile = "ANCHOR"
	// maxLine bounds one line when reading back (entries are a few hundred bytes).
	maxLine = 1 << 20
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

	mu   sync.Mutex
	f    *os.File
	file string // base name of the current file
	line int    // lines in the current file
	prev string // hash of the last line written
}

// head is the content of HEAD and ANCHOR.
type head struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"`
	Hash string `json:"hash"`
}

// Open opens the trail in dir (created 0700 if needed), keeping files for
// retentionDays (0: forever). now is the clock (nil: time.Now).
func Open(dir string, retentionDays int, now func() time.Time) (*Log, error) {
	if retentionDays < 0 {
		return nil, fmt.Errorf("audit retention_days must not be negative, got %d", retentionDays)
	}
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit directory: %w", err)
	}
	l := &Log{dir: dir, retention: retentionDays, now: now}
	files, err := trailFiles(dir)
	if err != nil {
		return nil, err
	}
	anchor, err := readHead(filepath.Join(dir, anchorFile))
	if err != nil {
		return nil, err
	}
	l.prev = genesis
	if anchor != nil {
		l.prev = anchor.Hash
	}
	var mismatch string
	if len(files) > 0 {
		last := files[len(files)-1]
		n, hash, err := repairTail(filepath.Join(dir, last))
		if err != nil {
			return nil, err
		}
		if n > 0 {
			l.file, l.line, l.prev = last, n, hash
		}
		mismatch, err = l.checkHead()
		if err != nil {
			return nil, err
		}
	}
	if mismatch != "" {
		if err := l.Append(map[string]any{"time": now().UTC(), "event": EventHeadMismatch, "detail": mismatch}); err != nil {
			return nil, err
		}
	}
	if err := l.prune(); err != nil {
		return nil, err
	}
	return l, nil
}

// checkHead compares HEAD with the end of the trail. A HEAD one line behind
// is a crash between a line and its HEAD update and is not a mismatch.
func (l *Log) checkHead() (string, error) {
	h, err := readHead(filepath.Join(l.dir, headFile))
	if err != nil || h == nil {
		return "", err
	}
	if h.File == l.file && h.Line == l.line && h.Hash == l.prev {
		return "", nil
	}
	if h.File == l.file && h.Line == l.line-1 {
		return "", l.writeHead()
	}
	return fmt.Sprintf("HEAD records %s line %d (hash %.12s…), but the trail ends at %s line %d (hash %.12s…)", h.File, h.Line, h.Hash, l.file, l.line, l.prev), nil
}

// Append writes v (which must encode as a JSON object) as the next line,
// chained to the previous one, and returns once it is on disk.
func (l *Log) Append(v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("audit: encode entry: %w", err)
	}
	if len(body) < 2 || body[0] != '{' {
		return fmt.Errorf("audit: an entry must encode as a JSON object, got %.40s", body)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.rotate(); err != nil {
		return err
	}
	line := make([]byte, 0, len(body)+80)
	line = append(line, `{"prev":"`...)
	line = append(line, l.prev...)
	line = append(line, '"')
	if rest := body[1:]; len(rest) > 1 {
		line = append(line, ',')
		line = append(line, rest...)
	} else {
		line = append(line, '}')
	}
	if _, err := l.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("audit: write %s: %w", l.file, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit: sync %s: %w", l.file, err)
	}
	l.line++
	l.prev = hashLine(line)
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
	_, hash, err := lastLine(filepath.Join(l.dir, files[drop-1]))
	if err != nil {
		return err
	}
	if err := writeHeadFile(filepath.Join(l.dir, anchorFile), head{File: files[drop], Hash: hash}); err != nil {
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
	return writeHeadFile(filepath.Join(l.dir, headFile), head{File: l.file, Line: l.line, Hash: l.prev})
}

// writeHeadFile replaces path atomically (write, fsync, rename).
func writeHeadFile(path string, h head) error {
	b, _ := json.Marshal(h)
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
// returns the number of lines and the hash of the last one.
func repairTail(path string) (int, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", fmt.Errorf("audit: %w", err)
	}
	if end := bytes.LastIndexByte(b, '\n') + 1; end < len(b) {
		if err := os.Truncate(path, int64(end)); err != nil {
			return 0, "", fmt.Errorf("audit: drop the torn last line of %s: %w", path, err)
		}
		b = b[:end]
	}
	return countAndLast(b)
}

func lastLine(path string) (int, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", fmt.Errorf("audit: %w", err)
	}
	return countAndLast(b)
}

func countAndLast(b []byte) (int, string, error) {
	b = bytes.TrimSuffix(b, []byte("\n"))
	if len(b) == 0 {
		return 0, "", nil
	}
	return bytes.Count(b, []byte("\n")) + 1, hashLine(b[bytes.LastIndexByte(b, '\n')+1:]), nil
}

// BreakError is the first place the chain does not hold.
type BreakError struct {
	File   string
	Line   int
	Reason string
}

func (e *BreakError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason) }

// Report is what Verify checked.
type Report struct {
	Files, Lines int
}

// Verify checks the whole trail in dir: every line chains to the one before
// (across files), the oldest file is the one ANCHOR names (when files were
// removed past retention), and the trail ends where HEAD says. The error is a
// *BreakError for the first break found.
func Verify(dir string) (Report, error) {
	var rep Report
	files, err := trailFiles(dir)
	if err != nil {
		return rep, err
	}
	anchor, err := readHead(filepath.Join(dir, anchorFile))
	if err != nil {
		return rep, err
	}
	hd, err := readHead(filepath.Join(dir, headFile))
	if err != nil {
		return rep, err
	}
	prev := genesis
	if anchor != nil {
		i := slices.Index(files, anchor.File)
		if i < 0 {
			return rep, &BreakError{File: anchor.File, Line: 1, Reason: "the oldest file kept (named in ANCHOR) is missing"}
		}
		files, prev = files[i:], anchor.Hash // older files are due for removal
	}
	if len(files) == 0 {
		if hd != nil {
			return rep, &BreakError{File: hd.File, Line: 1, Reason: "HEAD names a trail but no audit file is left"}
		}
		return rep, nil
	}
	var lastFile string
	var lastN int
	for _, name := range files {
		n, h, err := verifyFile(filepath.Join(dir, name), name, prev)
		if err != nil {
			return rep, err
		}
		if n == 0 {
			continue
		}
		rep.Files++
		rep.Lines += n
		prev, lastFile, lastN = h, name, n
	}
	if hd == nil {
		if rep.Lines > 0 {
			return rep, &BreakError{File: lastFile, Line: lastN, Reason: "HEAD is missing, so the end of the trail cannot be checked"}
		}
		return rep, nil
	}
	switch {
	case hd.File == lastFile && hd.Line == lastN && hd.Hash == prev:
	case hd.File == lastFile && hd.Line == lastN-1:
		// a crash between a line and its HEAD update
	case hd.File == lastFile && hd.Line > lastN || hd.File > lastFile:
		return rep, &BreakError{File: hd.File, Line: lastN + 1, Reason: fmt.Sprintf("line missing: HEAD records %s line %d, the trail ends at %s line %d", hd.File, hd.Line, lastFile, lastN)}
	default:
		return rep, &BreakError{File: lastFile, Line: lastN, Reason: fmt.Sprintf("the trail does not end where HEAD says (%s line %d, hash %.12s…): the last lines were altered or added", hd.File, hd.Line, hd.Hash)}
	}
	return rep, nil
}

// verifyFile checks one file's lines against prev and returns their count and
// the hash of the last.
func verifyFile(path, name, prev string) (int, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, maxLine)
	n := 0
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			return n, "", &BreakError{File: name, Line: n + 1, Reason: "line too long"}
		}
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return n, prev, nil
		}
		n++
		if err != nil && !errors.Is(err, io.EOF) {
			return n, "", fmt.Errorf("audit: read %s: %w", path, err)
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			return n, "", &BreakError{File: name, Line: n, Reason: "torn last line (no newline)"}
		}
		line = line[:len(line)-1]
		var fields struct {
			Prev  string `json:"prev"`
			Event string `json:"event"`
		}
		if err := json.Unmarshal(line, &fields); err != nil {
			return n, "", &BreakError{File: name, Line: n, Reason: fmt.Sprintf("not a JSON object: %v", err)}
		}
		if fields.Prev != prev {
			return n, "", &BreakError{File: name, Line: n, Reason: fmt.Sprintf("chain broken: prev is %.12s…, the line before hashes to %.12s… (a line before this one was edited or deleted)", fields.Prev, prev)}
		}
		if fields.Event == EventHeadMismatch {
			return n, "", &BreakError{File: name, Line: n, Reason: "physmcpd found the trail altered when it started (see this line's detail)"}
		}
		prev = hashLine(line)
	}
}
