package lint

import (
	"fmt"
	"sort"
)

// ModelAPIProblems lists what the strictest model tool APIs (Anthropic,
// OpenAI, Bedrock, Vertex) refuse in a tool's input schema, which MCP itself
// allows: a top-level anyOf, oneOf, allOf or not (the input must be one plain
// object), a $ref anywhere (none of them resolves references), and a bare
// boolean where a schema belongs (MCP Inspector --strict fails on those too).
// additionalProperties: false and its kin stay allowed: OpenAI's strict mode
// requires it. An empty list means the schema is portable.
func ModelAPIProblems(schema map[string]any) []string {
	var out []string
	for _, k := range []string{"anyOf", "oneOf", "allOf", "not"} {
		if _, ok := schema[k]; ok {
			out = append(out, fmt.Sprintf("top-level %s (the input must be one plain object; say in a description which properties go together)", k))
		}
	}
	if _, ok := schema["$ref"]; ok {
		out = append(out, "$ref at the top (inline the schema it names)")
	}
	walkSchema(schema, "", func(at string, s any) {
		if m, ok := s.(map[string]any); ok {
			if _, ok := m["$ref"]; ok {
				out = append(out, fmt.Sprintf("$ref at %s (inline the schema it names)", at))
			}
		}
	})
	return append(out, BareBooleans(schema)...)
}

// BareBooleans lists the places where a schema is the bare true or false,
// which MCP Inspector --strict rejects in input and output schemas alike.
func BareBooleans(schema map[string]any) []string {
	var out []string
	walkSchema(schema, "", func(at string, s any) {
		if b, ok := s.(bool); ok {
			out = append(out, fmt.Sprintf("bare %v as the schema at %s (write {} or a typed schema)", b, at))
		}
	})
	return out
}

// Keywords whose value is one schema, an array of schemas, or a map of them.
var (
	subschemaKeys      = []string{"items", "contains", "not", "propertyNames", "if", "then", "else", "additionalProperties", "unevaluatedProperties", "additionalItems", "unevaluatedItems", "contentSchema"}
	subschemaListKeys  = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	subschemaMapKeys   = []string{"properties", "patternProperties", "dependentSchemas", "$defs", "definitions"}
	booleanAllowedKeys = map[string]bool{"additionalProperties": true, "unevaluatedProperties": true, "additionalItems": true, "unevaluatedItems": true}
)

// walkSchema calls visit for every subschema below s (not s itself), with its
// JSON pointer, except booleans under the keywords where they are the norm.
func walkSchema(s map[string]any, at string, visit func(at string, sub any)) {
	step := func(key, path string, sub any) {
		if _, isBool := sub.(bool); isBool && booleanAllowedKeys[key] {
			return
		}
		visit(path, sub)
		if m, ok := sub.(map[string]any); ok {
			walkSchema(m, path, visit)
		}
	}
	for _, k := range subschemaKeys {
		if sub, ok := s[k]; ok {
			if _, isList := sub.([]any); !isList {
				step(k, at+"/"+k, sub)
			}
		}
	}
	for _, k := range subschemaListKeys {
		if list, ok := s[k].([]any); ok {
			for i, sub := range list {
				step(k, fmt.Sprintf("%s/%s/%d", at, k, i), sub)
			}
		}
	}
	for _, k := range subschemaMapKeys {
		if m, ok := s[k].(map[string]any); ok {
			names := make([]string, 0, len(m))
			for name := range m {
				names = append(names, name)
			}
			sort.Strings(names) // problems in a stable order
			for _, name := range names {
				step(k, at+"/"+k+"/"+name, m[name])
			}
		}
	}
}
