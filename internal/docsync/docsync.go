// Package docsync reads the key lists out of the JSON Schemas and reference
// docs, so tests can prove they name exactly the keys the decoder knows.
package docsync

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
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
