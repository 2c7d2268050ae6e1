//go:build !lite

// Schema validation is for tests and the lint command; the Lite build, which
// has neither, does not link the validator.

package promcp

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// CompileSchema compiles a JSON Schema (draft 2020-12 unless it says
// otherwise) given as a Go value or raw JSON, checking it against its
// metaschema. Formats (date-time, uuid) are asserted, not just annotated,
// and no $ref is ever loaded from a file or the network.
func CompileSchema(schema any) (*jsonschema.Schema, error) {
	doc, err := normalise(schema)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	const url = "mem:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return c.Compile(url)
}

// Validate reports every way doc fails schema. Both may be Go values
// (structs, maps), json.RawMessage or []byte: they go through JSON first, so
// a Go struct is checked exactly as a client sees it.
func Validate(schema, doc any) error {
	s, err := CompileSchema(schema)
	if err != nil {
		return err
	}
	d, err := normalise(doc)
	if err != nil {
		return fmt.Errorf("document: %w", err)
	}
	return s.Validate(d)
}

// normalise turns a value into what the validator reads: JSON values with
// numbers as json.Number, so 21 and 21.0 compare alike and integers stay exact.
func normalise(v any) (any, error) {
	var raw []byte
	switch t := v.(type) {
	case json.RawMessage:
		raw = t
	case []byte:
		raw = t
	default:
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(raw))
}
