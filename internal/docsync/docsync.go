// Package docsync reads the key lists out of the JSON Schemas and reference
// docs, so tests can prove they name exactly the keys the decoder knows.
package docsync

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// SchemaKeys returns, for the schema's root ("") and each of its
// definitions, the sorted names of its properties.
func SchemaKeys(path string) (map[string][]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type object struct {
		Properties  map[string]json.RawMessage `json:"properties"`
		Definitions map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"definitions"`
	}
	var root object
	if err := json.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	out := map[string][]string{"": keys(root.Properties)}
	for name, def := range root.Definitions {
		if def.Properties != nil {
			out[name] = keys(def.Properties)
		}
	}
	return out, nil
}

func keys(m map[string]json.RawMessage) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	slices.Sort(k)
	return k
}

var (
	heading = regexp.MustCompile("^### ([A-Za-z0-9]+)")
	row     = regexp.MustCompile("^\\| `([a-z0-9_]+)` \\|")
)

// DocKeys returns, for each "### Name" section of a Markdown reference, the
// sorted keys of the rows of its key table ("| `key` | ...").
func DocKeys(path string) (map[string][]string, string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	out := map[string][]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			section = m[1]
			out[section] = []string{}
			continue
		}
		if strings.HasPrefix(line, "## ") {
			section = ""
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil && section != "" {
			out[section] = append(out[section], m[1])
		}
	}
	for _, k := range out {
		slices.Sort(k)
	}
	return out, string(data), nil
}

// Check compares what a decoder reads (schema and docs: definition or section
// name → sorted keys) with the JSON Schema at schemaPath and the Markdown at
// docPath, reporting every difference on t. It returns the Markdown text for
// further checks.
func Check(t testing.TB, schemaPath, docPath string, schema, docs map[string][]string) string {
	t.Helper()
	gotSchema, err := SchemaKeys(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range schema {
		if got := gotSchema[name]; !slices.Equal(got, want) {
			t.Errorf("%s: definition %q has keys %v, the decoder knows %v", schemaPath, name, got, want)
		}
	}
	for name := range gotSchema {
		if _, ok := schema[name]; !ok {
			t.Errorf("%s: definition %q matches nothing the decoder reads", schemaPath, name)
		}
	}
	gotDocs, text, err := DocKeys(docPath)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range docs {
		if got, ok := gotDocs[name]; !ok {
			t.Errorf("%s has no section \"### %s\"", docPath, name)
		} else if !slices.Equal(got, want) {
			t.Errorf("%s section %s documents %v, the decoder knows %v", docPath, name, got, want)
		}
	}
	return text
}
