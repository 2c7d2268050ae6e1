package mcpserver

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/promcp"
)

// The fast path writes a tool result byte for byte as mcp-go's encoder does.
func TestFastReadsEncodeAsMCPGo(t *testing.T) {
	unit := "<cm> & \u2028\u2029 \"°\" \\ \x01"
	bodies := []any{
		promcp.ReadResponse{Value: 123, Timestamp: "2026-12-03T10:00:00.000Z", Quality: promcp.QualityGood, DeviceID: "rig"},
		promcp.ReadResponse{Value: "a<b>&c\u2028\xff", Unit: &unit, Quality: promcp.QualityError, Detail: "x</script>"},
		map[string]any{"big": 1e21, "small": 1e-7, "neg": -0.5, "nested": []any{nil, true, map[string]any{}}},
	}
	ids := []any{float64(1), float64(-7), 1.5, float64(9007199254740993), 1e21, "abc", "a<b>&\u2028", ""}
	for _, body := range bodies {
		for _, isError := range []bool{false, true} {
			res, err := result(body, isError)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				msg := mcp.NewJSONRPCResultResponse(mcp.NewRequestId(id), res)
				var want bytes.Buffer
				if err := json.NewEncoder(&want).Encode(msg); err != nil {
					t.Fatal(err)
				}
				got, ok := appendResponse(nil, msg)
				if !ok || !bytes.Equal(got, want.Bytes()) {
					t.Errorf("id %v:\n got %s\nwant %s", id, got, want.Bytes())
				}
			}
		}
	}
	// Structured content as a client could not tell from compact JSON, as
	// the text block too or not, JSON that is not plain (the encoder changes
	// it) and, in another text block, JSON that is not valid (the encoder
	// fails). The same invalid JSON as text block is left out: the same JSON
	// in both is result's, json.Marshal's output (see appendResponse).
	for _, c := range []struct {
		raw   string
		texts []string
	}{
		{` { "a" : [1, "<"] } `, nil}, {`{"a":"<"}`, nil}, {`{"a":"&\u0026"}`, nil}, {"{\"a\":\"\u2028\"}", nil},
		{`{"a": "b c"}`, nil}, {`{"a":"\"\\"}`, nil}, {`{"a":"\"", "b":"\\", "c":1}`, nil}, {"{\"a\":\"\xff\"}", nil}, {"{\"a\":\"\x01\"}", nil},
		{"{\"a\":\"x\ty\"}", []string{"{}"}}, {`{"a":"\`, []string{"{}"}}, {`{"a":1,}`, []string{"{}"}},
	} {
		if c.texts == nil {
			c.texts = []string{c.raw, "{}"}
		}
		raw := c.raw
		for _, text := range c.texts {
			res := &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent(text)}, RawStructuredContent: json.RawMessage(raw)}
			msg := mcp.NewJSONRPCResultResponse(mcp.NewRequestId("x"), res)
			var want bytes.Buffer
			encodes := json.NewEncoder(&want).Encode(msg) == nil
			if got, ok := appendResponse(nil, msg); ok != encodes || ok && !bytes.Equal(got, want.Bytes()) {
				t.Errorf("structured content %q, text %q: encoded %v\n got %s\nwant %s", raw, text, ok, got, want.Bytes())
			}
		}
	}

	// Anything else is left to the encoder.
	meta := mcp.NewTextContent("x")
	meta.Meta = &mcp.Meta{}
	for name, m := range map[string]mcp.JSONRPCMessage{
		"error":              mcp.JSONRPCError{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(1), Error: mcp.NewJSONRPCErrorDetails(1, "x", nil)},
		"no structured":      mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), mcp.NewToolResultText("x")),
		"two blocks":         mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), &mcp.CallToolResult{Content: []mcp.Content{meta, meta}, RawStructuredContent: json.RawMessage("{}")}),
		"content _meta":      mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), &mcp.CallToolResult{Content: []mcp.Content{meta}, RawStructuredContent: json.RawMessage("{}")}),
		"result _meta":       mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), &mcp.CallToolResult{Result: mcp.Result{Meta: &mcp.Meta{}}, Content: []mcp.Content{mcp.NewTextContent("x")}, RawStructuredContent: json.RawMessage("{}")}),
		"image":              mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), &mcp.CallToolResult{Content: []mcp.Content{mcp.NewImageContent("x", "image/png")}, RawStructuredContent: json.RawMessage("{}")}),
		"not a tool result":  mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), mcp.EmptyResult{}),
		"invalid structured": mcp.NewJSONRPCResultResponse(mcp.NewRequestId(1), &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("x")}, RawStructuredContent: json.RawMessage("{")}),
	} {
		if _, ok := appendResponse(nil, m); ok {
			t.Errorf("%s: encoded by the fast path", name)
		}
	}
}
