//go:build !lite

package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/auth"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/promcp"
)

// statusTrail is an audit tail: lines about both do_* tools and one of the
// trail's own events.
var statusTrail = []string{
	`{"prev":"00","event":"keyed","key_id":"k"}`,
	`{"prev":"01","caller":"operator","tool":"do_vent_fan","arguments":{"value":true},"outcome":"applied"}`,
	`{"prev":"02","caller":"operator","tool":"do_heater_setpoint","arguments":{"value":25},"outcome":"refused","permission":"cooldown_active"}`,
}

type statusAnswer struct {
	Caller   struct{ Name, Role string }
	Readings []struct {
		Tool    string
		Quality string
		Value   any
		AgeMs   *int64 `json:"age_ms"`
	}
	Actions []struct {
		Tool       string
		Permission string
		ClearsInMs int64  `json:"clears_in_ms"`
		LastWrite  string `json:"last_write"`
	}
	Buses []struct {
		Device, State string
		Tools         []string
	}
	Audit struct {
		Kept  bool
		Lines []map[string]any
	}
}

// statusServer serves the status page and its API as serve does, with acc's
// access rules.
func statusServer(t *testing.T, e *engine.Engine, acc mcpserver.Access) string {
	t.Helper()
	tail := func(n int) ([][]byte, error) {
		var out [][]byte
		for _, l := range statusTrail[max(0, len(statusTrail)-n):] {
			out = append(out, []byte(l))
		}
		return out, nil
	}
	api := mcpserver.StatusAPI(e, mcpserver.StatusOptions{Caller: mcpserver.CallerFrom(engine.Caller{Identity: "nobody"}), AuditTail: tail, Logger: quietLogger()}, http.NotFoundHandler())
	ts := httptest.NewServer(mcpserver.StatusPage(mcpserver.Protect(api, acc)))
	t.Cleanup(ts.Close)
	return ts.URL
}

func getStatus(t *testing.T, url, token string) (int, statusAnswer) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url+mcpserver.StatusAPIPath, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body statusAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q", cc)
		}
	}
	return resp.StatusCode, body
}

func TestStatusPageIsStaticAndOpen(t *testing.T) {
	m, p := loadExample(t)
	e := simEngine(t, m, p, nil)
	a, err := auth.New(p, auth.Options{DeviceID: m.Device.ID})
	if err != nil {
		t.Fatal(err)
	}
	url := statusServer(t, e, mcpserver.Access{Auth: a, Permits: mcpserver.RolePermits(e), Logger: quietLogger()})
	for path, want := range map[string]string{"/": "text/html", mcpserver.StatusPath: "text/html",
		"/status/assets/status.js": "javascript", "/status/assets/status.css": "text/css"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), want) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		// The page holds no data: nothing of the device is in it.
		if strings.Contains(string(body), m.Device.ID) {
			t.Errorf("%s names the device without a token", path)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "form-action 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
	}
	// Anything else is the API's or the endpoints', behind the token.
	for _, path := range []string{"/status/other", "/favicon.ico", mcpserver.StatusAPIPath} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d", path, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url+mcpserver.StatusAPIPath, nil)
	req.Header.Set("Authorization", "Bearer operator-example-token-do-not-use")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %s: %d", mcpserver.StatusAPIPath, resp.StatusCode)
	}
}

func TestStatusAPIShowsWhatTheRoleMaySee(t *testing.T) {
	m, p := loadExample(t)
	e := simEngine(t, m, p, nil)
	a, err := auth.New(p, auth.Options{DeviceID: m.Device.ID})
	if err != nil {
		t.Fatal(err)
	}
	url := statusServer(t, e, mcpserver.Access{Auth: a, Permits: mcpserver.RolePermits(e), Logger: quietLogger()})
	operator := engine.Caller{Identity: "operator", Role: manifest.RoleOperator}
	if resp, err := e.Do(context.Background(), operator, "do_heater_setpoint", promcp.DoRequest{Value: 20.0}); err != nil || resp.Status != promcp.StatusSuccess {
		t.Fatalf("write: %+v %v", resp, err)
	}

	if code, _ := getStatus(t, url, "wrong-token"); code != http.StatusUnauthorized {
		t.Fatalf("a wrong token: %d", code)
	}
	readings := []string{"read_air_temperature", "read_door_closed", "read_heater_setpoint", "read_heater_flow_temperature", "read_heater_energy"}

	code, viewer := getStatus(t, url, "viewer-example-token-do-not-use")
	if code != http.StatusOK || viewer.Caller.Role != "none" {
		t.Fatalf("viewer: %d %+v", code, viewer.Caller)
	}
	var tools []string
	for _, r := range viewer.Readings {
		tools = append(tools, r.Tool)
		if r.Quality != "good" || r.Value == nil || r.AgeMs == nil || *r.AgeMs < 0 {
			t.Errorf("viewer's reading %+v", r)
		}
	}
	if !slices.Equal(tools, readings) {
		t.Errorf("viewer's readings %v, want %v", tools, readings)
	}
	// Role none calls no do_*: none of their state, bus tools or audit lines.
	if len(viewer.Actions) != 0 || len(viewer.Audit.Lines) != 0 || !viewer.Audit.Kept {
		t.Errorf("viewer sees actions %+v, audit %+v", viewer.Actions, viewer.Audit)
	}
	for _, b := range viewer.Buses {
		for _, tool := range b.Tools {
			if !strings.HasPrefix(tool, "read_") {
				t.Errorf("viewer sees %s behind %s", tool, b.Device)
			}
		}
	}
	if len(viewer.Buses) == 0 {
		t.Error("viewer sees no bus")
	}

	_, op := getStatus(t, url, "operator-example-token-do-not-use")
	if len(op.Readings) != len(readings) || len(op.Actions) != 2 {
		t.Fatalf("operator: %+v", op)
	}
	for _, a := range op.Actions {
		switch a.Tool {
		case "do_heater_setpoint":
			if a.Permission != "cooldown_active" || a.ClearsInMs <= 0 || a.ClearsInMs > 10000 || a.LastWrite == "" {
				t.Errorf("heater right after a write: %+v", a)
			}
		case "do_vent_fan":
			if a.Permission != "allowed" || a.ClearsInMs != 0 {
				t.Errorf("fan: %+v", a)
			}
		}
	}
	var lines []string
	for _, l := range op.Audit.Lines {
		if _, ok := l["prev"]; ok {
			t.Errorf("a line with its chain value: %v", l)
		}
		lines = append(lines, l["tool"].(string)+" "+l["outcome"].(string))
	}
	if want := []string{"do_vent_fan applied", "do_heater_setpoint refused"}; !slices.Equal(lines, want) {
		t.Errorf("operator's audit tail %v, want %v (the trail's own events are admin's)", lines, want)
	}

	// Without identity providers every caller is the local principal: here admin, who sees the trail's events too.
	local := statusServer(t, e, mcpserver.Access{Local: auth.Principal{Name: "local", Role: manifest.RoleAdmin}, Permits: mcpserver.RolePermits(e), Logger: quietLogger()})
	code, admin := getStatus(t, local, "")
	if code != http.StatusOK || admin.Caller.Name != "local" || len(admin.Audit.Lines) != len(statusTrail) {
		t.Errorf("local admin without a token: %d %+v %v", code, admin.Caller, admin.Audit.Lines)
	}
}

// statusDuringApproval answers an approval form after reading the status API
// while the question stands, as a technician's page would poll it.
type statusDuringApproval struct {
	url  string
	seen []map[string]any
}

func (s *statusDuringApproval) Elicit(context.Context, mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
	resp, err := http.Get(s.url + mcpserver.StatusAPIPath)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct{ Approvals []map[string]any }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	s.seen = body.Approvals
	return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionAccept, Content: map[string]any{"approve": true}}}, nil
}

// The status API lists a call waiting for a person's approval while the
// person is asked (through the endpoints' shared issuer), and no longer once
// they answered.
func TestStatusAPIListsPendingApprovals(t *testing.T) {
	m, p := loadDevice(t, accessManifest, "testdata/access/approval.policy.yml")
	e := simEngine(t, m, p, nil)
	approvals := auth.NewApprovals(nil)
	local := engine.Caller{Identity: "local", Role: p.LocalRole()}
	s, err := mcpserver.New(e, mcpserver.Options{Caller: mcpserver.CallerFrom(local), Approvals: approvals, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	api := mcpserver.StatusAPI(e, mcpserver.StatusOptions{Caller: mcpserver.CallerFrom(local), Approvals: approvals, Logger: quietLogger()},
		mcpserver.NewHTTPHandler(s, quietLogger()))
	ts := httptest.NewServer(mcpserver.StatusPage(mcpserver.Protect(api, mcpserver.Access{
		Local: auth.Principal{Name: "local", Role: p.LocalRole(), Method: auth.MethodLocal}, Permits: mcpserver.RolePermits(e), Logger: quietLogger()})))
	t.Cleanup(ts.Close)

	page := &statusDuringApproval{url: ts.URL}
	tr, err := transport.NewStreamableHTTP(ts.URL + mcpserver.EndpointPath)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithElicitationHandler(page))
	start(t, c)
	res, err := callDo(t, c, "do_boiler_setpoint", map[string]any{"value": 55})
	if err != nil || res.IsError {
		t.Fatalf("approved do_: %v %s", err, resultText(res))
	}
	if len(page.seen) != 1 {
		t.Fatalf("approvals while the person was asked: %v", page.seen)
	}
	a := page.seen[0]
	if a["tool"] != "do_boiler_setpoint" || a["caller"] != "local" || a["value"] != 55.0 || a["previous_value"] != 40.0 {
		t.Errorf("pending approval %v", a)
	}
	if ms, _ := a["expires_in_ms"].(float64); ms <= 0 || ms > 30000 {
		t.Errorf("expires in %v ms, want within the rule's 30 s", a["expires_in_ms"])
	}
	resp, err := http.Get(ts.URL + mcpserver.StatusAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var after struct{ Approvals []any }
	if err := json.NewDecoder(resp.Body).Decode(&after); err != nil || len(after.Approvals) != 0 {
		t.Errorf("approvals after the answer: %v %v", after.Approvals, err)
	}
}
