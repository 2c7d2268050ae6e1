package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTail(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	// Three days of lines long enough that the newest file spans several chunks.
	l, err := Open(dir, 0, c.now)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pad := strings.Repeat("x", 900)
	var want []string
	for d := range 3 {
		for i := range 40 {
			id := time.Duration(d*100 + i).String()
			if err := l.Append(map[string]any{"tool": "do_fan", "id": id, "pad": pad}); err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		c.t = c.t.Add(24 * time.Hour)
	}
	ids := func(lines [][]byte) []string {
		var out []string
		for _, line := range lines {
			var v struct {
				Prev, ID string
			}
			if err := json.Unmarshal(line, &v); err != nil || v.Prev == "" {
				t.Fatalf("not a whole line (%v): %.80s", err, line)
			}
			out = append(out, v.ID)
		}
		return out
	}
	for _, n := range []int{1, 17, 40, 41, 100, 120, 500} {
		got, err := l.Tail(n)
		if err != nil {
			t.Fatal(err)
		}
		w := want[max(0, len(want)-n):]
		if g := ids(got); strings.Join(g, ",") != strings.Join(w, ",") {
			t.Fatalf("Tail(%d) = %v, want %v", n, g, w)
		}
	}
	// A line still being written (no newline yet) is not shown.
	files, _ := trailFiles(dir)
	f, err := os.OpenFile(filepath.Join(dir, files[len(files)-1]), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"prev":"torn`)
	f.Close()
	got, err := l.Tail(2)
	if err != nil {
		t.Fatal(err)
	}
	if g := ids(got); strings.Join(g, ",") != strings.Join(want[len(want)-2:], ",") {
		t.Fatalf("with a torn line: %v", g)
	}
}
