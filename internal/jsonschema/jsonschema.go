// Package jsonschema checks documents against the subset of JSON Schema
// (draft 2020-12) that physmcpd emits: type, enum, const, required,
// properties, additionalProperties, items, minItems, maxItems, minimum,
// maximum, minLength, maxLength, anyOf, format (date-time, uuid) and the
// annotation keywords. A schema that uses any other keyword is rejected rather
// than half-checked, so a test that validates against it cannot pass by
// accident. It exists for tests (every structuredContent against its
// outputSchema) and has no dependency outside the standard library.
package jsonschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Validate reports every way doc fails schema. Both may be Go values (structs,
// maps, slices), json.RawMessage or []byte; they are normalised through JSON
// first, so a Go struct is checked exactly as a client would see it. The
// schema itself is checked first (see Check).
func Validate(schema, doc any) error {
	s, err := normalise(schema)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := checkSchema(s, ""); err != nil {
		return err
	}
	d, err := normalise(doc)
	if err != nil {
		return fmt.Errorf("document: %w", err)
	}
	var errs []string
	validate(s, d, "", &errs)
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Check reports whether schema is a well-formed schema in the supported
// subset: known keywords only, each with a value of the right JSON type.
func Check(schema any) error {
	s, err := normalise(schema)
	if err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	return checkSchema(s, "")
}

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
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// annotations carry no constraint.
var annotations = map[string]bool{
	"$schema": true, "$id": true, "$comment": true, "title": true, "description": true,
	"default": true, "examples": true, "readOnly": true, "writeOnly": true, "deprecated": true,
}

var typeNames = map[string]bool{
	"null": true, "boolean": true, "object": true, "array": true, "number": true, "integer": true, "string": true,
}

var formats = map[string]bool{"date-time": true, "uuid": true}

func checkSchema(s any, at string) error {
	where := at
	if where == "" {
		where = "/"
	}
	if _, ok := s.(bool); ok {
		return nil
	}
	obj, ok := s.(map[string]any)
	if !ok {
		return fmt.Errorf("schema %s: a schema must be an object or a boolean, not %s", where, jsonType(s))
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := obj[k]
		bad := func(want string) error {
			return fmt.Errorf("schema %s: %q must be %s, not %s", where, k, want, jsonType(v))
		}
		switch k {
		case "type":
			names := []any{v}
			if list, ok := v.([]any); ok {
				if len(list) == 0 {
					return bad("a non-empty list of type names")
				}
				names = list
			}
			for _, n := range names {
				if name, ok := n.(string); !ok || !typeNames[name] {
					return fmt.Errorf("schema %s: unknown type %v", where, n)
				}
			}
		case "enum":
			if list, ok := v.([]any); !ok || len(list) == 0 {
				return bad("a non-empty array")
			}
		case "const":
		case "required":
			list, ok := v.([]any)
			if !ok {
				return bad("an array of property names")
			}
			for _, n := range list {
				if _, ok := n.(string); !ok {
					return bad("an array of property names")
				}
			}
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return bad("an object")
			}
			for name, sub := range props {
				if err := checkSchema(sub, at+"/properties/"+name); err != nil {
					return err
				}
			}
		case "additionalProperties", "items":
			if err := checkSchema(v, at+"/"+k); err != nil {
				return err
			}
		case "anyOf":
			list, ok := v.([]any)
			if !ok || len(list) == 0 {
				return bad("a non-empty array of schemas")
			}
			for i, sub := range list {
				if err := checkSchema(sub, at+"/anyOf/"+strconv.Itoa(i)); err != nil {
					return err
				}
			}
		case "minimum", "maximum":
			if _, ok := v.(json.Number); !ok {
				return bad("a number")
			}
		case "minItems", "maxItems", "minLength", "maxLength":
			n, ok := v.(json.Number)
			if !ok {
				return bad("a non-negative integer")
			}
			if i, err := n.Int64(); err != nil || i < 0 {
				return bad("a non-negative integer")
			}
		case "format":
			if f, ok := v.(string); !ok || !formats[f] {
				return fmt.Errorf("schema %s: unsupported format %v", where, v)
			}
		default:
			if !annotations[k] {
				return fmt.Errorf("schema %s: keyword %q is not in the supported subset", where, k)
			}
		}
	}
	return nil
}

func validate(s, d any, at string, errs *[]string) {
	where := at
	if where == "" {
		where = "/"
	}
	fail := func(format string, args ...any) {
		*errs = append(*errs, where+": "+fmt.Sprintf(format, args...))
	}
	if b, ok := s.(bool); ok {
		if !b {
			fail("no value is allowed here")
		}
		return
	}
	obj := s.(map[string]any)

	if t, ok := obj["type"]; ok && !typeMatches(t, d) {
		fail("got %s, want %s", jsonType(d), typeText(t))
		return // the other keywords would only repeat the mismatch
	}
	if list, ok := obj["enum"].([]any); ok {
		found := false
		for _, e := range list {
			if equal(e, d) {
				found = true
				break
			}
		}
		if !found {
			fail("%s is not one of %s", show(d), show(list))
		}
	}
	if c, ok := obj["const"]; ok && !equal(c, d) {
		fail("%s is not %s", show(d), show(c))
	}
	if list, ok := obj["anyOf"].([]any); ok {
		var branchErrs []string
		matched := false
		for _, sub := range list {
			var e []string
			validate(sub, d, at, &e)
			if len(e) == 0 {
				matched = true
				break
			}
			branchErrs = append(branchErrs, strings.Join(e, ", "))
		}
		if !matched {
			fail("matches none of anyOf: [%s]", strings.Join(branchErrs, " | "))
		}
	}

	switch v := d.(type) {
	case map[string]any:
		validateObject(obj, v, at, fail, errs)
	case []any:
		if n, ok := intKeyword(obj, "minItems"); ok && int64(len(v)) < n {
			fail("has %d items, want at least %d", len(v), n)
		}
		if n, ok := intKeyword(obj, "maxItems"); ok && int64(len(v)) > n {
			fail("has %d items, want at most %d", len(v), n)
		}
		if items, ok := obj["items"]; ok {
			for i, item := range v {
				validate(items, item, at+"/"+strconv.Itoa(i), errs)
			}
		}
	case json.Number:
		f, _ := v.Float64()
		if m, ok := obj["minimum"].(json.Number); ok {
			if min, _ := m.Float64(); f < min {
				fail("%s is below the minimum %s", v, m)
			}
		}
		if m, ok := obj["maximum"].(json.Number); ok {
			if max, _ := m.Float64(); f > max {
				fail("%s is above the maximum %s", v, m)
			}
		}
	case string:
		n := int64(utf8.RuneCountInString(v))
		if min, ok := intKeyword(obj, "minLength"); ok && n < min {
			fail("is %d characters long, want at least %d", n, min)
		}
		if max, ok := intKeyword(obj, "maxLength"); ok && n > max {
			fail("is %d characters long, want at most %d", n, max)
		}
		if f, ok := obj["format"].(string); ok {
			if err := checkFormat(f, v); err != nil {
				fail("%v", err)
			}
		}
	}
}

func validateObject(obj map[string]any, v map[string]any, at string, fail func(string, ...any), errs *[]string) {
	if req, ok := obj["required"].([]any); ok {
		for _, r := range req {
			if _, present := v[r.(string)]; !present {
				fail("missing required property %q", r)
			}
		}
	}
	props, _ := obj["properties"].(map[string]any)
	extra, hasExtra := obj["additionalProperties"]
	names := make([]string, 0, len(v))
	for name := range v {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := at + "/" + name
		if sub, ok := props[name]; ok {
			validate(sub, v[name], path, errs)
		} else if hasExtra {
			if b, ok := extra.(bool); ok && !b {
				fail("property %q is not allowed", name)
				continue
			}
			validate(extra, v[name], path, errs)
		}
	}
}

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func checkFormat(format, v string) error {
	switch format {
	case "date-time":
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			return fmt.Errorf("%q is not an RFC 3339 date-time", v)
		}
	case "uuid":
		if !uuidPattern.MatchString(v) {
			return fmt.Errorf("%q is not a UUID", v)
		}
	}
	return nil
}

func intKeyword(obj map[string]any, k string) (int64, bool) {
	n, ok := obj[k].(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

func typeMatches(t, d any) bool {
	if list, ok := t.([]any); ok {
		for _, name := range list {
			if isType(name.(string), d) {
				return true
			}
		}
		return false
	}
	return isType(t.(string), d)
}

func isType(name string, d any) bool {
	switch name {
	case "integer":
		n, ok := d.(json.Number)
		if !ok {
			return false
		}
		f, err := n.Float64()
		return err == nil && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "number":
		_, ok := d.(json.Number)
		return ok
	}
	return jsonType(d) == name
}

func jsonType(d any) string {
	switch d.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case json.Number:
		return "number"
	case string:
		return "string"
	}
	return fmt.Sprintf("%T", d)
}

func typeText(t any) string {
	if list, ok := t.([]any); ok {
		parts := make([]string, len(list))
		for i, p := range list {
			parts[i] = p.(string)
		}
		return strings.Join(parts, " or ")
	}
	return t.(string)
}

// equal compares JSON values; numbers compare by value (1 equals 1.0).
func equal(a, b any) bool {
	na, okA := a.(json.Number)
	nb, okB := b.(json.Number)
	if okA && okB {
		fa, errA := na.Float64()
		fb, errB := nb.Float64()
		return errA == nil && errB == nil && fa == fb
	}
	if okA != okB {
		return false
	}
	switch av := a.(type) {
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !equal(av[i], bv[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, x := range av {
			y, ok := bv[k]
			if !ok || !equal(x, y) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
