package lint

import (
	"strings"
	"testing"
)

func TestModelAPIProblems(t *testing.T) {
	object := func(extra map[string]any) map[string]any {
		s := map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "string"}}}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	cases := []struct {
		name   string
		schema map[string]any
		want   []string // one part of each problem, in order
	}{
		{"plain object", object(map[string]any{"additionalProperties": false}), nil},
		{"nested anyOf is fine", object(map[string]any{"properties": map[string]any{
			"v": map[string]any{"anyOf": []any{map[string]any{"type": "number"}, map[string]any{"type": "string"}}}}}), nil},
		{"top-level anyOf with bare true", object(map[string]any{"anyOf": []any{
			map[string]any{"required": []any{"a"}, "properties": map[string]any{"a": true}},
			map[string]any{"required": []any{"b"}}}}), []string{"top-level anyOf", "bare true as the schema at /anyOf/0/properties/a"}},
		{"top-level oneOf, allOf, not", object(map[string]any{"oneOf": []any{}, "allOf": []any{}, "not": map[string]any{}}),
			[]string{"top-level oneOf", "top-level allOf", "top-level not"}},
		{"$ref", object(map[string]any{"$defs": map[string]any{"v": map[string]any{"type": "string"}},
			"properties": map[string]any{"v": map[string]any{"$ref": "#/$defs/v"}}}), []string{"$ref at /properties/v"}},
		{"bare false in items", object(map[string]any{"properties": map[string]any{"list": map[string]any{"type": "array", "items": false}}}),
			[]string{"bare false as the schema at /properties/list/items"}},
	}
	for _, c := range cases {
		got := ModelAPIProblems(c.schema)
		if len(got) != len(c.want) {
			t.Errorf("%s: got %q, want %d problems", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %d is %q, want it to say %q", c.name, i, got[i], w)
			}
		}
	}
}

func TestSchemaPortableFindings(t *testing.T) {
	canDo := Tool{Name: "can_do", Description: "Checks whether an action is possible right now.",
		InputSchema: map[string]any{"type": "object",
			"properties": map[string]any{"intent": map[string]any{"type": "object",
				"properties": map[string]any{"semantic_tags": map[string]any{"type": "array"}, "action": map[string]any{"enum": []any{"set"}}}}},
			"anyOf": []any{map[string]any{"required": []any{"intent"}}}},
		OutputSchema: map[string]any{"type": "object", "properties": map[string]any{"extra": true}},
	}
	var got []string
	for _, f := range Check([]Tool{canDo}) {
		if f.Rule == "schema-portable" {
			got = append(got, f.Message)
		}
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "inputSchema: top-level anyOf") || !strings.HasPrefix(got[1], "outputSchema: bare true") {
		t.Errorf("schema-portable findings %q, want the input's top-level anyOf and the output's bare true", got)
	}
}
