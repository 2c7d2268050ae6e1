//go:build !lite

package mcpserver_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/mcpserver"
)

// tools/list is answered from bytes after the first time: each role keeps
// its own list, in either protocol era, and repeated answers are the first.
func TestToolsListFromBytes(t *testing.T) {
	d := startAuthDevice(t, nil)
	for _, version := range []string{mcp.LATEST_LEGACY_PROTOCOL_VERSION, mcp.LATEST_PROTOCOL_VERSION} {
		viewer := connectVersion(t, d, "viewer-token", version)
		operator := connectVersion(t, d, "operator-token", version)
		var first [2][]mcp.Tool
		for round := range 3 {
			for i, c := range []*client.Client{viewer, operator} {
				res, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
				if err != nil {
					t.Fatalf("%s round %d: %v", version, round, err)
				}
				if round == 0 {
					first[i] = res.Tools
				} else if !reflect.DeepEqual(res.Tools, first[i]) {
					t.Fatalf("%s round %d: the list changed", version, round)
				}
			}
		}
		names := func(tools []mcp.Tool) []string {
			var n []string
			for _, tl := range tools {
				n = append(n, tl.Name)
			}
			return n
		}
		if v := names(first[0]); slices.Contains(v, "do_boiler_setpoint") || !slices.Contains(v, "read_boiler_setpoint") {
			t.Errorf("%s: viewer sees %v", version, v)
		}
		if o := names(first[1]); !slices.Contains(o, "do_boiler_setpoint") {
			t.Errorf("%s: operator sees %v", version, o)
		}
	}
}

// The answer from bytes is mcp-go's answer, byte for byte, with the id of
// the request; an unknown session is still refused.
func TestToolsListBytesAreMCPGos(t *testing.T) {
	d := startAuthDevice(t, nil)
	op := map[string]string{"Authorization": "Bearer operator-token"}
	resp, _ := post(t, d.url+mcpserver.EndpointPath, initializeBody, op)
	op["Mcp-Session-Id"] = resp.Header.Get("Mcp-Session-Id")
	op["Mcp-Protocol-Version"] = "2025-06-18"
	post(t, d.url+mcpserver.EndpointPath, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, op)
	list := func(id string) string {
		resp, body := post(t, d.url+mcpserver.EndpointPath, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`, op)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("tools/list: %d %s", resp.StatusCode, body)
		}
		return body
	}
	learned, cached := list("1"), list("1")
	if learned != cached || !strings.Contains(learned, `"do_boiler_setpoint"`) {
		t.Fatalf("from bytes:\n%s\nfrom mcp-go:\n%s", cached, learned)
	}
	if s := list(`"req-2"`); s != strings.Replace(learned, `"id":1`, `"id":"req-2"`, 1) {
		t.Fatalf("string id: %s", s[:min(len(s), 80)])
	}
	op["Mcp-Session-Id"] = "mcp-session-unknown"
	if resp, body := post(t, d.url+mcpserver.EndpointPath, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, op); resp.StatusCode != 404 {
		t.Fatalf("unknown session: %d %s", resp.StatusCode, body)
	}
}

func connectVersion(t *testing.T, d *accessDevice, token, version string) *client.Client {
	t.Helper()
	tr, err := transport.NewStreamableHTTP(d.url+mcpserver.EndpointPath, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr)
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = version
	init.Params.ClientInfo = mcp.Implementation{Name: "physmcpd-list", Version: "test"}
	if _, err := c.Initialize(context.Background(), init); err != nil {
		t.Fatal(err)
	}
	return c
}
