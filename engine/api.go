// Package engine binds a manifest's capabilities to drivers and answers the
// three proMCP verbs: read_* (cached, collapsed, honest quality), do_* (every
// safety check on every call, idempotent) and can_do (the same checks as a dry
// run). It knows nothing of MCP; the adapter in mcpserver is a thin edge.
package engine

import (
	"context"

	"github.com/physmcp/physmcpd/manifest"
)

// Caller is who is calling, as established by the transport (stdio: the
// policy's local role; HTTP: the authenticated token).
type Caller struct {
	Identity string
	Role     manifest.Role
	// Approve asks the caller's person to approve an action (MCP elicitation);
	// nil when the client cannot ask, and then approval-gated calls are refused.
	Approve func(ctx context.Context, req ApprovalRequest) (Approval, error)
}

// ToolKind is a proMCP verb.
type ToolKind string

const (
	ToolRead  ToolKind = "read"
	ToolDo    ToolKind = "do"
	ToolCanDo ToolKind = "can_do"
	// Operations (docs/roadmap.md): start_*, read_status_*, do_cancel_* of
	// a start operation, and the do_* of a sequence.
	ToolStart    ToolKind = "start"
	ToolStatus   ToolKind = "read_status"
	ToolCancel   ToolKind = "do_cancel"
	ToolSequence ToolKind = "do_sequence"
	// ToolStream is stream_* of a streamable read capability (Capability):
	// the edge subscribes the caller to its reading with Watch.
	ToolStream ToolKind = "stream"
)

// Tool is one tool the engine serves.
type Tool struct {
	Name       string
	Kind       ToolKind
	Capability *manifest.Capability // nil for can_do and operations
	Operation  *manifest.Operation  // for the operation kinds
}

// Group is the manifest group of the tool's capability or operation ("" for can_do).
func (t Tool) Group() string {
	switch {
	case t.Capability != nil:
		return t.Capability.Group
	case t.Operation != nil:
		return t.Operation.Group
	}
	return ""
}
