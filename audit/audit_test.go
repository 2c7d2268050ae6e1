package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func fill(t *testing.T, dir string, c *clock, retention, days, perDay int) {
	t.Helper()
	l, err := Open(dir, retention, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for d := 0; d < days; d++ {
		for i := 0; i < perDay; i++ {
			if err := l.Append(map[string]any{"tool": "do_fan", "day": d, "i": i}); err != nil {
				t.Fatal(err)
			}
		}
		c.t = c.t.Add(24 * time.Hour)
	}
}

func mustVerify(t *testing.T, dir string, lines int) {
	t.Helper()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Lines != lines {
		t.Fatalf("Verify checked %d lines, want %d", rep.Lines, lines)
	}
}

func wantBreak(t *testing.T, dir, file string, line int, opts ...Option) {
	t.Helper()
	_, err := Verify(dir, opts...)
	var b *BreakError
	if !errors.As(err, &b) {
		t.Fatalf("Verify = %v, want a break at %s:%d", err, file, line)
	}
	if b.File != file || b.Line != line {
		t.Fatalf("break at %s:%d (%s), want %s:%d", b.File, b.Line, b.Reason, file, line)
	}
}

func day(c time.Time, offset int) string {
	return filePrefix + c.AddDate(0, 0, offset).UTC().Format(dayLayout) + fileSuffix
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestChainAcrossFilesAndReopen(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 3, 4)
	c.t = c.t.Add(-24 * time.Hour) // reopen on the last day: appends continue its chain
	fill(t, dir, c, 0, 1, 2)
	mustVerify(t, dir, 14)
	files, _ := trailFiles(dir)
	if len(files) != 3 {
		t.Fatalf("files %v, want 3 daily files", files)
	}
	first, _ := os.ReadFile(filepath.Join(dir, files[0]))
	if !bytes.HasPrefix(first, []byte(`{"prev":"`+genesis+`","day":0`)) {
		t.Fatalf("first line %q", first[:100])
	}
}

func lines(t *testing.T, path string) [][]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))
}

func rewrite(t *testing.T, path string, ls [][]byte) {
	if err := os.WriteFile(path, bytes.Join(ls, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	cases := map[string]struct {
		tamper   func(t *testing.T, dir string)
		file     func() string
		wantLine int
	}{
		"edited line": {func(t *testing.T, dir string) {
			p := filepath.Join(dir, day(t0, 1))
			ls := lines(t, p)
			ls[1] = bytes.Replace(ls[1], []byte(`"i":1`), []byte(`"i":7`), 1)
			rewrite(t, p, ls)
		}, func() string { return day(t0, 1) }, 3},
		"deleted line": {func(t *testing.T, dir string) {
			p := filepath.Join(dir, day(t0, 1))
			ls := lines(t, p)
			rewrite(t, p, append(ls[:1], ls[2:]...))
		}, func() string { return day(t0, 1) }, 2},
		"deleted first line of a file": {func(t *testing.T, dir string) {
			p := filepath.Join(dir, day(t0, 2))
			rewrite(t, p, lines(t, p)[1:])
		}, func() string { return day(t0, 2) }, 1},
		"deleted last line": {func(t *testing.T, dir string) {
			p := filepath.Join(dir, day(t0, 2))
			ls := lines(t, p)
			rewrite(t, p, ls[:len(ls)-2])
		}, func() string { return day(t0, 2) }, 4},
		"edited last line": {func(t *testing.T, dir string) {
			p := filepath.Join(dir, day(t0, 2))
			ls := lines(t, p)
			ls[3] = bytes.Replace(ls[3], []byte(`"i":3`), []byte(`"i":9`), 1)
			rewrite(t, p, ls)
		}, func() string { return day(t0, 2) }, 4},
		"deleted file": {func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, day(t0, 0)))
		}, func() string { return day(t0, 1) }, 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			fill(t, dir, &clock{t0}, 0, 3, 4)
			mustVerify(t, dir, 12)
			tc.tamper(t, dir)
			wantBreak(t, dir, tc.file(), tc.wantLine)
		})
	}
}

func TestRetentionKeepsChainVerifiable(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 2, 6, 3)
	files, _ := trailFiles(dir)
	if len(files) != 3 || files[0] != day(t0, 3) {
		t.Fatalf("files %v, want the last 3 days from %s", files, day(t0, 3))
	}
	mustVerify(t, dir, 9)
	// removing the oldest kept file is still caught
	os.Remove(filepath.Join(dir, files[0]))
	wantBreak(t, dir, files[0], 1)
}

func TestOpenDropsTornLineAndRecordsMismatch(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 1, 3)
	p := filepath.Join(dir, day(t0, 0))
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"prev":"abc","tool":"do_`) // a crash mid-append
	f.Close()
	c.t = t0
	fill(t, dir, c, 0, 1, 1)
	mustVerify(t, dir, 4)

	// lines removed while stopped: Open keeps the evidence in the chain
	ls := lines(t, p)
	rewrite(t, p, ls[:len(ls)-2])
	c.t = t0
	fill(t, dir, c, 0, 1, 1)
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), EventHeadMismatch) {
		t.Fatalf("no %s line after truncation:\n%s", EventHeadMismatch, b)
	}
	wantBreak(t, dir, day(t0, 0), 4)
}

func TestAppendRefusesNonObjects(t *testing.T) {
	l, err := Open(t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append([]int{1}); err == nil {
		t.Fatal("a JSON array was appended")
	}
	if err := l.Append(struct{}{}); err != nil {
		t.Fatal(err)
	}
}

func TestScanReadsFromTheDayGiven(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 3, 2)
	c.t = t0.AddDate(0, 0, 2)
	l, err := Open(dir, 0, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var days []string
	err = l.Scan(t0.AddDate(0, 0, 1), func(line []byte) error {
		days = append(days, string(line[75:82])) // after {"prev":"<64 hex>",
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(days, " "); got != `"day":1 "day":1 "day":2 "day":2` {
		t.Fatalf("scanned %s, want the lines of days 1 and 2", got)
	}
}
