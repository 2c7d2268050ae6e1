package lint

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// toolEntry is one tool in a tool-list file: MCP's tools/list entries and
// physmcpd's tools --json (outputSchema), and the reference linter's entries
// (responseSchema).
type toolEntry struct {
	Name           *string         `json:"name"`
	Description    string          `json:"description"`
	InputSchema    json.RawMessage `json:"inputSchema"`
	OutputSchema   json.RawMessage `json:"outputSchema"`
	ResponseSchema json.RawMessage `json:"responseSchema"`
	Annotations    *Annotations    `json:"annotations"`
}

// ParseToolList reads a tool list: a JSON array of tools, or an object with a
// tools array (tools/list results, physmcpd tools --json).
func ParseToolList(data []byte) ([]Tool, error) {
	data = bytes.TrimSpace(data)
	var entries []toolEntry
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &entries); err != nil {
			return nil, fmt.Errorf("tool list: %w", err)
		}
	} else {
		var wrapped struct {
			Tools *[]toolEntry `json:"tools"`
		}
		if err := json.Unmarshal(data, &wrapped); err != nil {
			return nil, fmt.Errorf("tool list: %w", err)
		}
		if wrapped.Tools == nil {
			return nil, fmt.Errorf("tool list: want a JSON array of tools or an object with a \"tools\" array")
		}
		entries = *wrapped.Tools
	}
	tools := make([]Tool, len(entries))
	for i, e := range entries {
		if e.Name == nil {
			return nil, fmt.Errorf("tool list: entry %d has no name", i)
		}
		t := Tool{Name: *e.Name, Description: e.Description, Annotations: e.Annotations}
		var err error
		if t.InputSchema, err = decodeSchema(e.InputSchema); err != nil {
			return nil, fmt.Errorf("tool list: %s: inputSchema: %w", t.Name, err)
		}
		// responseSchema first: tools --json carries both, with the same content.
		out := e.ResponseSchema
		if len(out) == 0 || string(out) == "null" {
			out = e.OutputSchema
		}
		if t.OutputSchema, err = decodeSchema(out); err != nil {
			return nil, fmt.Errorf("tool list: %s: response schema: %w", t.Name, err)
		}
		tools[i] = t
	}
	return tools, nil
}
