//go:build !lite

package mcpserver_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/mcpserver"
)

// The role check reads the method as mcp-go does: escaped, in another
// case, repeated (the last wins) or in a batch, a tools/call of a tool the
// role may not call is refused before it runs.
func TestRoleCheckReadsTheMethodAsMCPGoDoes(t *testing.T) {
	d := startAuthDevice(t, nil)
	viewer := map[string]string{"Authorization": "Bearer viewer-token"}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":8,"method":"tools\/call","params":{"name":"do_boiler_setpoint","arguments":{"value":50}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"\u0074ools/call","params":{"name":"do_boiler_setpoint","arguments":{"value":50}}}`,
		`{"jsonrpc":"2.0","id":8,"METHOD":"tools/call","params":{"NAME":"do_boiler_setpoint","arguments":{"value":50}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/list","method":"tools/call","params":{"name":"read_boiler_setpoint","name":"do_boiler_setpoint"}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"do_boiler_\u0073etpoint","arguments":{"value":50}}}`,
		`[{"jsonrpc":"2.0","id":8,"method":"tools/list"},{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"do_boiler_setpoint"}}]`,
	} {
		resp, answer := post(t, d.url+mcpserver.EndpointPath, body, viewer)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(answer, "permission_insufficient") {
			t.Errorf("%s: %d %s", body, resp.StatusCode, answer)
		}
	}
	if n := d.bus.writes.Load(); n != 0 {
		t.Fatalf("%d writes", n)
	}
}
