package audit

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func testKey(t *testing.T, dir string) *Key {
	t.Helper()
	k, created, err := LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	if err != nil || !created {
		t.Fatalf("LoadOrCreateKey: created %v, %v", created, err)
	}
	return k
}

func fillKeyed(t *testing.T, dir string, c *clock, retention, days, perDay int, k *Key) {
	t.Helper()
	l, err := Open(dir, retention, c.now, WithKey(k))
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
		c.t = c.t.AddDate(0, 0, 1)
	}
}

// forge does what someone without the key can: edit lines (edit returns the
// new line, or nil to delete it), recompute the plain SHA-256 chain over
// every file and rewrite HEAD to match, keeping its keyed fields unless strip.
func forge(t *testing.T, dir string, strip bool, edit func(line []byte) []byte) {
	t.Helper()
	files, _ := trailFiles(dir)
	hd, err := readHead(filepath.Join(dir, headFile))
	if err != nil || hd == nil {
		t.Fatalf("HEAD: %v", err)
	}
	prev, last, n := genesis, "", 0
	for _, f := range files {
		p := filepath.Join(dir, f)
		var out [][]byte
		for _, line := range lines(t, p) {
			line = bytes.TrimSuffix(line, []byte("\n"))
			if len(line) == 0 {
				continue
			}
			if line = edit(line); line == nil {
				continue
			}
			line = append([]byte(`{"prev":"`+prev), line[len(`{"prev":"`)+64:]...)
			prev = hashLine(line)
			out = append(out, append(line, '\n'))
		}
		rewrite(t, p, out)
		last, n = f, len(out)
	}
	h := head{File: last, Line: n, Hash: prev}
	if !strip {
		h.MAC, h.KeyID, h.KeyedSince = hd.MAC, hd.KeyID, hd.KeyedSince
	}
	if err := writeHeadFile(filepath.Join(dir, headFile), h); err != nil {
		t.Fatal(err)
	}
}

func replaceIn(old, new string) func([]byte) []byte {
	return func(line []byte) []byte { return bytes.Replace(line, []byte(old), []byte(new), 1) }
}

func wantKeyError(t *testing.T, err error, got string) {
	t.Helper()
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Got != got {
		t.Fatalf("error %v, want a KeyError with key %q given", err, got)
	}
}

func TestKeyedTrailResistsRecomputedChain(t *testing.T) {
	dir, keyDir := t.TempDir(), t.TempDir()
	k := testKey(t, keyDir)
	fillKeyed(t, dir, &clock{t0}, 0, 2, 3, k)
	if _, err := Verify(dir, WithKey(k)); err != nil {
		t.Fatalf("untouched keyed trail: %v", err)
	}
	_, err := Verify(dir)
	wantKeyError(t, err, "")

	forge(t, dir, false, replaceIn(`"day":1,"i":1`, `"day":1,"i":7`))
	// line 1 is the keyed event: from there on a SHA-256 chain does not hold under the key
	wantBreak(t, dir, day(t0, 0), 2, WithKey(k))
}

func TestPlainChainIsForgeableButNotWithAKey(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, &clock{t0}, 0, 2, 3)
	forge(t, dir, false, replaceIn(`"day":1,"i":1`, `"day":1,"i":7`))
	mustVerify(t, dir, 6) // what keying is for: a recomputed plain chain passes
	k := testKey(t, t.TempDir())
	wantBreak(t, dir, day(t0, 1), 3, WithKey(k)) // "a key was given but the trail is not keyed"
}

func TestStrippedKeyingFailsWithTheKey(t *testing.T) {
	dir := t.TempDir()
	k := testKey(t, t.TempDir())
	fillKeyed(t, dir, &clock{t0}, 0, 2, 3, k)
	forge(t, dir, true, func(line []byte) []byte {
		if bytes.Contains(line, []byte(`"event":"keyed"`)) {
			return nil
		}
		return line
	})
	mustVerify(t, dir, 6)
	wantBreak(t, dir, day(t0, 1), 3, WithKey(k))
}

func TestKeyingAnExistingTrail(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 1, 2)
	k := testKey(t, t.TempDir())
	c.t = t0
	fillKeyed(t, dir, c, 0, 1, 2, k) // plain lines 1-2, the keyed event, keyed lines 4-5
	rep, err := Verify(dir, WithKey(k))
	if err != nil || rep.Lines != 5 {
		t.Fatalf("Verify with the key: %+v, %v", rep, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, day(t0, 0)))
	if ls := bytes.Split(b, []byte("\n")); !bytes.Contains(ls[2], []byte(`"event":"keyed","key_id":"`+k.ID())) {
		t.Fatalf("line 3 is not the keyed event: %s", ls[2])
	}

	_, err = Open(dir, 0, nil)
	wantKeyError(t, err, "")
	other := testKey(t, t.TempDir())
	_, err = Open(dir, 0, nil, WithKey(other))
	wantKeyError(t, err, other.ID())
	_, err = Verify(dir, WithKey(other))
	wantKeyError(t, err, other.ID())

	// editing a plain line before the keyed one is still caught
	p := filepath.Join(dir, day(t0, 0))
	ls := lines(t, p)
	ls[0] = bytes.Replace(ls[0], []byte(`"i":0`), []byte(`"i":5`), 1)
	rewrite(t, p, ls)
	wantBreak(t, dir, day(t0, 0), 2, WithKey(k))
}

func TestKeyedRetentionAnchorsTheKey(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 2, 2, 2)
	k := testKey(t, t.TempDir())
	fillKeyed(t, dir, c, 2, 4, 2, k)
	anchor, err := readHead(filepath.Join(dir, anchorFile))
	if err != nil || anchor == nil || anchor.MAC != MAC || anchor.KeyID != k.ID() {
		t.Fatalf("ANCHOR %+v (%v), want it keyed: the keyed line was pruned", anchor, err)
	}
	if _, err := Verify(dir, WithKey(k)); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(dir)
	wantKeyError(t, err, "")
	files, _ := trailFiles(dir)
	forge(t, dir, false, replaceIn(`"i":0`, `"i":9`))
	// forge restarts from genesis: the first kept line no longer chains to ANCHOR
	wantBreak(t, dir, files[0], 1, WithKey(k))
}

func TestLoadOrCreateKey(t *testing.T) {
	dir := t.TempDir()
	k := testKey(t, dir)
	again, created, err := LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	if err != nil || created || again.ID() != k.ID() {
		t.Fatalf("second load: created %v, id %s vs %s, %v", created, again.ID(), k.ID(), err)
	}
	fi, err := os.Stat(filepath.Join(dir, "audit.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode(), err)
	}
	os.WriteFile(filepath.Join(dir, "short.key"), []byte("abcd\n"), 0o600)
	if _, err := LoadKey(filepath.Join(dir, "short.key")); err == nil {
		t.Fatal("a 2-byte key was accepted")
	}
}

func TestCrashRightAfterTheKeyedLine(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t0}
	fill(t, dir, c, 0, 1, 2)
	plainHead, _ := os.ReadFile(filepath.Join(dir, headFile))
	k := testKey(t, t.TempDir())
	c.t = t0
	fillKeyed(t, dir, c, 0, 1, 0, k) // only the keyed line
	// HEAD as a crash before its update leaves it: plain, one line behind
	if err := os.WriteFile(filepath.Join(dir, headFile), plainHead, 0o600); err != nil {
		t.Fatal(err)
	}
	c.t = t0
	fillKeyed(t, dir, c, 0, 1, 1, k)
	if rep, err := Verify(dir, WithKey(k)); err != nil || rep.Lines != 4 {
		t.Fatalf("Verify: %+v, %v", rep, err)
	}
}
