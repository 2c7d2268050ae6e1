package promcp

import "github.com/physmcp/physmcpd/manifest"

// stream_*, physmcpd's proposal for proMCP's roadmap v0.4 (docs/roadmap.md):
// a streamable read_* capability's stream_* subscribes the caller's session
// to the reading's MCP resource, and the values arrive as
// notifications/resources/updated, each carrying the reading (a read_* body)
// in _meta.

// StreamRequest is the input of stream_*.
type StreamRequest struct {
	// Deadband and IntervalMs may widen the manifest's pacing, never narrow it.
	Deadband   *float64 `json:"deadband,omitempty"`
	IntervalMs *int     `json:"interval_ms,omitempty"`
}

// Stream statuses.
const (
	StreamSubscribed = "subscribed"
	StreamFailed     = "failed"
)

// StreamResponse is what stream_* answers.
type StreamResponse struct {
	Status      string  `json:"status"`
	ResourceURI string  `json:"resource_uri"`
	IntervalMs  int     `json:"interval_ms"`
	RateHz      float64 `json:"rate_hz"`
	Deadband    float64 `json:"deadband"`
	// First is the reading when the subscription began, as read_* answers it.
	First       *ReadResponse `json:"first"`
	Unsubscribe string        `json:"unsubscribe"`
	Timestamp   string        `json:"timestamp"`
	Reason      string        `json:"reason,omitempty"`
	DeviceID    string        `json:"device_id,omitempty"`
}

// StreamInputSchema is the input of stream_<c.Name>.
func StreamInputSchema(c *manifest.Capability) Schema {
	props := Schema{
		"interval_ms": Schema{"type": "integer", "minimum": c.MinUpdateInterval().Milliseconds(),
			"description": "The least time between two updates (default and least " + Number(float64(c.MinUpdateInterval().Milliseconds())) + ")."},
	}
	if c.IsNumeric() {
		props["deadband"] = Schema{"type": "number", "minimum": c.ChangeDeadband(),
			"description": "A value that moved by no more than this" + unitPhrase(c) + " from the last update is not sent (default and least " + Number(c.ChangeDeadband()) + ")."}
	}
	s := object(props)
	s["additionalProperties"] = false
	return s
}

// StreamOutputSchema is the response of stream_<c.Name>.
func StreamOutputSchema(c *manifest.Capability) Schema {
	first := ReadOutputSchema(c)
	first["type"] = []any{"object", "null"}
	first["description"] = "The reading when the subscription began, as read_" + c.Name + " answers it; null when refused."
	return object(Schema{
		"status": Schema{"type": "string", "enum": []any{StreamSubscribed, StreamFailed},
			"description": "subscribed: updates follow as notifications/resources/updated for resource_uri, the reading in _meta[\"physmcp/reading\"]; failed: see reason."},
		"resource_uri": Schema{"type": "string", "description": "The reading's resource; resources/unsubscribe with it ends the stream, and so does the end of the session."},
		"interval_ms":  Schema{"type": "integer", "minimum": 0, "description": "The least time between two updates."},
		"rate_hz":      Schema{"type": "number", "minimum": 0, "description": "The most updates per second (1000 / interval_ms)."},
		"deadband":     Schema{"type": "number", "minimum": 0, "description": "Changes within it are not sent."},
		"first":        first,
		"unsubscribe":  Schema{"type": "string", "description": "How to end the stream."},
		"timestamp":    timestampSchema("When the answer was made."),
		"reason":       Schema{"type": "string"},
		"device_id":    Schema{"type": "string"},
	}, "status", "resource_uri", "interval_ms", "rate_hz", "deadband", "first", "unsubscribe", "timestamp")
}
