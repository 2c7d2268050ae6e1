package mcpserver

import (
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver/mcpcore"
)

// Tools describes every tool the engine serves, in the engine's order, as
// mcp-go tool definitions (see mcpcore.Tools).
func Tools(e *engine.Engine) ([]mcp.Tool, error) {
	defs, err := mcpcore.Tools(e)
	if err != nil {
		return nil, err
	}
	tools := make([]mcp.Tool, len(defs))
	for i, d := range defs {
		tools[i] = mcpTool(d)
	}
	return tools, nil
}

// mcpTool is built as a struct, not with mcp.NewTool: NewTool pre-fills a
// structured input schema, and with a raw one beside it mcp-go v1.2.1 fails
// to marshal the whole tools/list.
func mcpTool(d mcpcore.Tool) mcp.Tool {
	a := d.Annotations
	var meta *mcp.Meta
	if d.Meta != nil {
		meta = &mcp.Meta{AdditionalFields: d.Meta}
	}
	return mcp.Tool{
		Meta:            meta,
		Name:            d.Name,
		Title:           d.Title,
		Description:     d.Description,
		RawInputSchema:  d.InputSchema,
		RawOutputSchema: d.OutputSchema,
		Annotations: mcp.ToolAnnotation{
			Title:           a.Title,
			ReadOnlyHint:    mcp.ToBoolPtr(a.ReadOnlyHint),
			DestructiveHint: mcp.ToBoolPtr(a.DestructiveHint),
			IdempotentHint:  mcp.ToBoolPtr(a.IdempotentHint),
			OpenWorldHint:   mcp.ToBoolPtr(a.OpenWorldHint),
		},
	}
}
