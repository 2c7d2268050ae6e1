// Package mcpcore is the part of the MCP edge that needs no MCP SDK: the
// tool definitions (schemas, descriptions, annotations), the endpoint groups,
// the mapping of read_* and can_do calls to the engine, and the serial line a
// stream session runs on. mcpserver adapts it to mcp-go for the Full build;
// litemcp serves it with a small JSON-RPC loop of its own in the Lite build,
// which links neither mcp-go nor net/http.
package mcpcore

import (
	"encoding/json"
	"fmt"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/promcp"
)

// Tool is one MCP tool definition, in the wire shape of tools/list.
type Tool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  Annotations     `json:"annotations"`
	// Meta says what the call asks of the caller's role (promcp.MetaMinRole,
	// promcp.MetaRoles), when it asks more than role none.
	Meta map[string]any `json:"_meta,omitempty"`
}

// Annotations are a tool's hints, always explicit: mcp-go's defaults claim
// every tool is destructive and not idempotent.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint bool   `json:"destructiveHint"`
	IdempotentHint  bool   `json:"idempotentHint"`
	OpenWorldHint   bool   `json:"openWorldHint"`
}

// Tools describes every tool the engine serves, in the engine's order: generated
// input and output schemas, a description that states the facts an agent needs
// before calling, and explicit annotations.
func Tools(e *engine.Engine) ([]Tool, error) {
	m, p := e.Manifest(), e.Policy()
	var tools []Tool
	for _, t := range e.Tools() {
		var (
			in, out promcp.Schema
			title   string
			desc    string
			ann     Annotations
		)
		switch t.Kind {
		case engine.ToolRead:
			in, out = noArguments(), promcp.ReadOutputSchema(t.Capability)
			title = "Read " + words(t.Capability.Name)
			desc = readDescription(t.Capability) + accessFacts(p, t.Name, t.Capability)
			ann = annotations(title, true, false)
		case engine.ToolDo:
			in, out = promcp.DoInputSchema(t.Capability), promcp.DoOutputSchema(t.Capability)
			title = "Change " + words(t.Capability.Name)
			desc = doDescription(t.Capability, accessFacts(p, t.Name, t.Capability)+limitFacts(p, t.Name, t.Capability))
			ann = annotations(title, false, !compensable(t.Capability))
		case engine.ToolStream:
			in, out = promcp.StreamInputSchema(t.Capability), promcp.StreamOutputSchema(t.Capability)
			title = "Stream " + words(t.Capability.Name)
			desc = streamDescription(t.Capability) + accessFacts(p, t.Capability.ToolName(), t.Capability)
			ann = annotations(title, true, false)
		case engine.ToolStart, engine.ToolStatus, engine.ToolCancel, engine.ToolSequence:
			in, out, title, desc, ann = operationTool(t)
		case engine.ToolCanDo:
			in, out = promcp.CanDoInputSchema(), promcp.CanDoOutputSchema()
			title = "Check whether an action is possible (dry run)"
			desc = canDoDescription(m)
			ann = annotations(title, true, false)
		default:
			return nil, fmt.Errorf("tool %s: unknown kind %q", t.Name, t.Kind)
		}
		rawIn, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		rawOut, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("tool %s: output schema: %w", t.Name, err)
		}
		tools = append(tools, Tool{Name: t.Name, Title: title, Description: desc, InputSchema: rawIn, OutputSchema: rawOut, Annotations: ann, Meta: roleMeta(e, t)})
	}
	return tools, nil
}

// roleMeta is tool t's _meta: the roles its call admits, when role none
// is not among them, so that an aggregator adopting it asks as much of its
// own callers (nil for can_do, open to every role).
func roleMeta(e *engine.Engine, t engine.Tool) map[string]any {
	if t.Kind == engine.ToolCanDo {
		return nil
	}
	min, roles := e.Roles(t.Name)
	if min == string(manifest.RoleNone) && roles == nil {
		return nil
	}
	meta := map[string]any{promcp.MetaMinRole: min}
	if roles != nil {
		meta[promcp.MetaRoles] = roles
	}
	return meta
}

// annotations: readOnly tools observe; do_* tools are idempotent through
// their idempotency_key, and destructive unless the manifest lets their
// effect be undone. The world is closed: each tool touches one declared point
// of this device.
func annotations(title string, readOnly, destructive bool) Annotations {
	return Annotations{Title: title, ReadOnlyHint: readOnly, DestructiveHint: destructive, IdempotentHint: true, OpenWorldHint: false}
}
