//go:build !lite

package mcpserver_test

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/promcp"
)

// A do_* the role may not call is refused with 403 whatever its arguments
// are; Refused gets them decoded for the audit line when they are an
// object, and nil otherwise (a malformed body neither crashes nor bypasses
// the refusal).
func TestRefusedCallCarriesItsArguments(t *testing.T) {
	type refusal struct {
		caller engine.Caller
		tool   string
		p      promcp.Permission
		reason string
		args   map[string]any
	}
	var mu sync.Mutex
	var got []refusal
	acc := mcpserver.Access{Refused: func(c engine.Caller, tool string, p promcp.Permission, reason string, args map[string]any) {
		mu.Lock()
		got = append(got, refusal{c, tool, p, reason, args})
		mu.Unlock()
	}}
	d, h := newAccessDevice(t, authPolicy(t), map[string]string{"jwt.key": jwtSecret + "\n"}, nil, acc)
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	viewer := map[string]string{"Authorization": "Bearer viewer-token"}
	const call = `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"do_boiler_setpoint"`
	for _, c := range []struct {
		body string
		args map[string]any
	}{
		{call + `,"arguments":{"value":50,"idempotency_key":"k1"}}}`, map[string]any{"value": 50.0, "idempotency_key": "k1"}},
		{call + `,"ARGUMENTS":{"value":1},"arguments":{"value":51}}}`, map[string]any{"value": 51.0}},
		{call + `}}`, nil},
		{call + `,"arguments":"value=50"}}`, nil},
		{call + `,"arguments":[50]}}`, nil},
		{call + `,"arguments":null}}`, nil},
		{call + `,"arguments":{"idempotency_key":7}}}`, map[string]any{"idempotency_key": 7.0}},
		{`[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"read_boiler_setpoint","arguments":{"value":1}}},` +
			call + `,"arguments":{"value":52,"idempotency_key":"k2"}}}]`, map[string]any{"value": 52.0, "idempotency_key": "k2"}},
	} {
		got = nil
		resp, answer := post(t, ts.URL+mcpserver.EndpointPath, c.body, viewer)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(answer, "permission_insufficient") {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, answer)
			continue
		}
		want := []refusal{{engine.Caller{Identity: "viewer", Role: "none"}, "do_boiler_setpoint", promcp.PermissionInsufficient,
			"role none may not call do_boiler_setpoint", c.args}}
		mu.Lock()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Refused got %+v, want %+v", c.body, got, want)
		}
		mu.Unlock()
	}
	if n := d.bus.writes.Load(); n != 0 {
		t.Fatalf("%d writes", n)
	}
}
