package mcpserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/manifest"
)

// The cache asks the transport once per role and request shape, answers
// the rest itself with each request's id, and leaves everything else to it.
func TestToolListsAskOncePerShape(t *testing.T) {
	asked := 0
	transport := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked++
		var req listRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Fatal(err)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		tools := `[{"name":"read_x"}]`
		if p, _ := auth.PrincipalFrom(r.Context()); p.Role == manifest.RoleOperator {
			tools = `[{"name":"read_x"},{"name":"do_x"}]`
		}
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"tools":` + tools + "}}\n"))
	})
	l := newToolLists(transport, nil)
	send := func(role manifest.Role, body string, session bool) (bool, string) {
		r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r = r.WithContext(auth.WithPrincipal(r.Context(), auth.Principal{Name: "p", Role: role}))
		w := httptest.NewRecorder()
		return l.serve(w, r, session), w.Body.String()
	}
	list := func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/list"}` }
	for i, c := range []struct {
		role    manifest.Role
		body    string
		session bool
		served  bool
		asked   int
		want    string
	}{
		{manifest.RoleNone, list("1"), true, true, 1, `"id":1,"result":{"tools":[{"name":"read_x"}]}}`},
		{manifest.RoleNone, list("2"), true, true, 1, `"id":2,"result":{"tools":[{"name":"read_x"}]}}`},
		{manifest.RoleOperator, list(`"a"`), true, true, 2, `"id":"a","result":{"tools":[{"name":"read_x"},{"name":"do_x"}]}}`},
		{manifest.RoleOperator, list("3"), true, true, 2, `"id":3,"result":{"tools":[{"name":"read_x"},{"name":"do_x"}]}}`},
		{manifest.RoleNone, `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":"x"}}`, true, true, 3, `"id":4`},
		{manifest.RoleNone, list("5"), false, false, 3, ""},            // no session: mcp-go answers 404
		{manifest.RoleNone, list("1.5"), true, false, 3, ""},           // an id mcp-go would rewrite
		{manifest.RoleNone, `[` + list("6") + `]`, true, false, 3, ""}, // batches
		{manifest.RoleNone, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"tools/list"}}`, true, false, 3, ""},
	} {
		served, body := send(c.role, c.body, c.session)
		if served != c.served || asked != c.asked || !strings.Contains(body, c.want) {
			t.Errorf("%d: served %v, asked %d, body %s; want %v, %d, %s", i, served, asked, body, c.served, c.asked, c.want)
		}
	}
}
