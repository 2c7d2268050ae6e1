package lint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A server's output schema that does not compile, or whose $ref names a
// file, is noted once per tool, never read from disk, and fails nothing.
func TestLiveOutputSchemaThatDoesNotCompile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "schema.json")
	if err := os.WriteFile(secret, []byte(`{"type":"object"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tools := []Tool{
		{Name: "read_temperature", InputSchema: objectSchema, OutputSchema: map[string]any{"type": 5}},
		{Name: "can_do", InputSchema: objectSchema, OutputSchema: map[string]any{"$ref": "file://" + secret}},
	}
	s := fakeSession{bodies: map[string]func(map[string]any) (any, bool, error){
		"read_temperature": fixed(goodRead()),
		"can_do":           fixed(report([]any{}, []any{}, []any{map[string]any{"outcome": "unroutable", "reason": "no_producer", "detail": "no"}}, false)),
	}}
	findings, notes := Live(context.Background(), s, tools)
	for _, f := range findings {
		if f.Rule == "live-output-schema" {
			t.Errorf("a schema that does not compile failed a call: %v", f)
		}
	}
	var schemaNotes []string
	for _, n := range notes {
		if strings.Contains(n, "output schema not checked live") {
			schemaNotes = append(schemaNotes, n)
		}
	}
	if len(schemaNotes) != 2 || !strings.HasPrefix(schemaNotes[0], "read_temperature:") || !strings.HasPrefix(schemaNotes[1], "can_do:") {
		t.Errorf("notes %q, want one per tool (can_do is called several times)", schemaNotes)
	}
}
