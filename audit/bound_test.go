package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appendAndRead appends one entry to a fresh trail, verifies the trail and
// returns the line written (without its "prev").
func appendAndRead(t *testing.T, entry any) map[string]any {
	t.Helper()
	dir := t.TempDir()
	l, err := Open(dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(entry); err != nil {
		t.Fatal(err)
	}
	l.Close()
	mustVerify(t, dir, 1)
	files, _ := trailFiles(dir)
	b, err := os.ReadFile(filepath.Join(dir, files[0]))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxEntryBytes+100 {
		t.Fatalf("line of %d bytes, want at most about %d", len(b), MaxEntryBytes)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("line does not decode: %v", err)
	}
	return got
}

func asDigest(t *testing.T, v any) Digest {
	t.Helper()
	b, _ := json.Marshal(v)
	var d Digest
	if err := json.Unmarshal(b, &d); err != nil || !d.Truncated || len(d.SHA256) != 64 {
		t.Fatalf("want a digest, got %s", b)
	}
	return d
}

func TestHugeStringIsWrittenAsItsDigest(t *testing.T) {
	huge := strings.Repeat("x", 700_000)
	got := appendAndRead(t, map[string]any{"tool": "do_fan", "arguments": map[string]any{"value": huge, "idempotency_key": "k1"}})
	args := got["arguments"].(map[string]any)
	if d := asDigest(t, args["value"]); d != DigestOf(huge) || d.Bytes != 700_000 || d.Type != "string" {
		t.Fatalf("digest %+v, want %+v", d, DigestOf(huge))
	}
	if got["tool"] != "do_fan" || args["idempotency_key"] != "k1" {
		t.Fatalf("the small fields were not kept: %v", got)
	}
}

func TestDeepAndLargeArgumentsAreBounded(t *testing.T) {
	var deep any = "bottom"
	for range 20_000 { // deeper than encoding/json's own decoding limit (10000)
		deep = []any{deep}
	}
	wide := map[string]any{}
	for i := range 100_000 {
		wide[fmt.Sprintf("k%06d", i)] = i
	}
	got := appendAndRead(t, map[string]any{"tool": "do_fan", "deep": deep, "wide": wide, "long_key": map[string]any{strings.Repeat("k", 2000): 1}})
	if got["tool"] != "do_fan" {
		t.Fatalf("tool lost: %v", got["tool"])
	}
	d := got["deep"]
	for depth := 1; depth < MaxDepth; depth++ {
		d = d.([]any)[0]
	}
	if dg := asDigest(t, d); dg.Type != "array" {
		t.Fatalf("the array at depth %d: %+v", MaxDepth, dg)
	}
	if dg := asDigest(t, got["wide"]); dg.Type != "object" || dg.Bytes < 100_000 {
		t.Fatalf("wide object: %+v", dg)
	}
	asDigest(t, got["long_key"])
}

func TestEntryOfManySmallFieldsIsDigestedWhole(t *testing.T) {
	many := map[string]any{}
	for i := range 20_000 {
		many[fmt.Sprintf("f%05d", i)] = "v"
	}
	got := appendAndRead(t, many)
	if got["type"] != "object" || got["truncated"] != true {
		t.Fatalf("entry %v, want the whole entry as a digest", got)
	}
}

func TestSmallEntriesAreWrittenVerbatim(t *testing.T) {
	type entry struct {
		Tool  string `json:"tool"`
		Value any    `json:"value"`
		Note  string `json:"note"`
	}
	// escapes make the encoding longer than MaxValueBytes, the text is not
	e := entry{Tool: "do_fan", Value: []any{1.5, map[string]any{"z": nil, "a": true}}, Note: strings.Repeat("<", MaxValueBytes)}
	want, _ := json.Marshal(e)
	got, err := bound(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("bound changed an entry within the limits:\n%s\n%s", got, want)
	}
}
