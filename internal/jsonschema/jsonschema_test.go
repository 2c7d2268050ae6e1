package jsonschema

import (
	"encoding/json"
	"strings"
	"testing"
)

const person = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 5},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "mood": {"enum": ["calm", "busy", null]},
    "kind": {"const": "person"},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "seen": {"type": "string", "format": "date-time"},
    "id": {"type": "string", "format": "uuid"},
    "note": {"type": ["string", "null"]}
  },
  "required": ["name", "kind"],
  "additionalProperties": false,
  "anyOf": [{"required": ["age"]}, {"required": ["tags"]}]
}`

func TestValidateAccepts(t *testing.T) {
	docs := []string{
		`{"name":"ann","kind":"person","age":30}`,
		`{"name":"ann","kind":"person","age":30.0,"mood":null,"note":null}`,
		`{"name":"bob","kind":"person","tags":["a"],"seen":"2026-01-02T03:04:05.678Z","id":"0b6a3a62-4b0c-4a8e-9b8f-6c1d2e3f4a5b"}`,
	}
	for _, doc := range docs {
		if err := Validate(json.RawMessage(person), json.RawMessage(doc)); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	cases := []struct{ doc, want string }{
		{`{"kind":"person","age":1}`, `missing required property "name"`},
		{`{"name":"","kind":"person","age":1}`, "/name: is 0 characters long"},
		{`{"name":"toolong","kind":"person","age":1}`, "/name: is 7 characters long"},
		{`{"name":"a","kind":"robot","age":1}`, `/kind: "robot" is not "person"`},
		{`{"name":"a","kind":"person","age":1.5}`, "/age: got number, want integer"},
		{`{"name":"a","kind":"person","age":-1}`, "/age: -1 is below the minimum 0"},
		{`{"name":"a","kind":"person","age":151}`, "/age: 151 is above the maximum 150"},
		{`{"name":"a","kind":"person","age":1,"mood":"sad"}`, `/mood: "sad" is not one of`},
		{`{"name":"a","kind":"person","tags":[]}`, "/tags: has 0 items, want at least 1"},
		{`{"name":"a","kind":"person","tags":["a","b","c"]}`, "/tags: has 3 items, want at most 2"},
		{`{"name":"a","kind":"person","tags":[1]}`, "/tags/0: got number, want string"},
		{`{"name":"a","kind":"person","age":1,"seen":"yesterday"}`, "/seen: \"yesterday\" is not an RFC 3339"},
		{`{"name":"a","kind":"person","age":1,"id":"42"}`, `/id: "42" is not a UUID`},
		{`{"name":"a","kind":"person","age":1,"extra":1}`, `property "extra" is not allowed`},
		{`{"name":"a","kind":"person"}`, "matches none of anyOf"},
		{`{"name":"a","kind":"person","age":1,"note":3}`, "/note: got number, want string or null"},
		{`[]`, "/: got array, want object"},
	}
	for _, c := range cases {
		err := Validate(json.RawMessage(person), json.RawMessage(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.doc, err, c.want)
		}
	}
}

func TestValidateGoValues(t *testing.T) {
	type doc struct {
		Name string `json:"name"`
		Kind string `json:"kind"`
		Age  int    `json:"age"`
	}
	var schema map[string]any
	if err := json.Unmarshal([]byte(person), &schema); err != nil {
		t.Fatal(err)
	}
	if err := Validate(schema, doc{Name: "ann", Kind: "person", Age: 3}); err != nil {
		t.Fatal(err)
	}
	if err := Validate(schema, doc{Name: "ann", Kind: "person", Age: 300}); err == nil {
		t.Fatal("age 300 accepted")
	}
}

func TestCheckRejectsUnsupportedSchemas(t *testing.T) {
	cases := []struct{ schema, want string }{
		{`{"type":"float"}`, "unknown type"},
		{`{"type":[]}`, "non-empty list"},
		{`{"pattern":"^a"}`, `keyword "pattern" is not in the supported subset`},
		{`{"properties":{"a":{"oneOf":[]}}}`, `/properties/a: keyword "oneOf"`},
		{`{"required":"a"}`, `"required" must be an array`},
		{`{"enum":[]}`, `"enum" must be a non-empty array`},
		{`{"minimum":"1"}`, `"minimum" must be a number`},
		{`{"minLength":-1}`, `"minLength" must be a non-negative integer`},
		{`{"format":"email"}`, "unsupported format"},
		{`{"items":3}`, "must be an object or a boolean"},
	}
	for _, c := range cases {
		err := Check(json.RawMessage(c.schema))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.schema, err, c.want)
		}
		if err := Validate(json.RawMessage(c.schema), 1); err == nil {
			t.Errorf("%s: Validate accepted an invalid schema", c.schema)
		}
	}
	if err := Check(json.RawMessage(person)); err != nil {
		t.Errorf("person schema: %v", err)
	}
}

func TestBooleanSchemas(t *testing.T) {
	if err := Validate(json.RawMessage(`{"additionalProperties":{"type":"integer"}}`), json.RawMessage(`{"a":1,"b":"x"}`)); err == nil ||
		!strings.Contains(err.Error(), "/b: got string") {
		t.Errorf("additionalProperties schema: %v", err)
	}
	if err := Validate(json.RawMessage(`true`), json.RawMessage(`{"anything":[1]}`)); err != nil {
		t.Errorf("true schema: %v", err)
	}
	if err := Validate(json.RawMessage(`false`), json.RawMessage(`1`)); err == nil {
		t.Error("false schema accepted a value")
	}
}
