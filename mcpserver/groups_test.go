//go:build !lite

package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/mcpserver"
)

const (
	pumpManifest = "../examples/pump-skid/physmcp.manifest.yml"
	pumpPolicy   = "../examples/pump-skid/physmcp.policy.yml"
)

func pumpSkid(t *testing.T) *engine.Engine {
	t.Helper()
	m, p := loadDevice(t, pumpManifest, pumpPolicy)
	return simEngine(t, m, p, nil)
}

func groupOptions(e *engine.Engine, group string) mcpserver.Options {
	local := engine.Caller{Identity: "local", Role: e.Policy().LocalRole()}
	return mcpserver.Options{Logger: quietLogger(), Group: group, Caller: func(context.Context) engine.Caller { return local }}
}

func TestGroupsAndPaths(t *testing.T) {
	e := pumpSkid(t)
	if got := mcpserver.Groups(e.Manifest()); !slices.Equal(got, []string{"operation", "monitoring"}) {
		t.Errorf("pump-skid groups %q", got)
	}
	m, _ := loadExample(t)
	if got := mcpserver.Groups(m); !slices.Equal(got, []string{""}) {
		t.Errorf("greenhouse groups %q, want the default group only", got)
	}
	if mcpserver.GroupPath("") != "/mcp" || mcpserver.GroupPath("operation") != "/mcp/operation" {
		t.Errorf("paths %s %s", mcpserver.GroupPath(""), mcpserver.GroupPath("operation"))
	}
	for _, group := range []string{"", "nope"} {
		if _, err := mcpserver.New(e, groupOptions(e, group)); err == nil || !strings.Contains(err.Error(), "operation, monitoring") {
			t.Errorf("group %q: err %v, want one naming the device's groups", group, err)
		}
	}
}

func TestGroupEndpointServesItsGroupOnly(t *testing.T) {
	e := pumpSkid(t)
	s, err := mcpserver.New(e, groupOptions(e, "monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	tools, sess := listTools(t, inProcessClient(t, s))
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	want := []string{"can_do", "read_discharge_pressure", "read_flow_rate", "read_pump_mode", "read_tank_level"}
	if !slices.Equal(names, want) {
		t.Fatalf("monitoring tools %q, want %q", names, want)
	}

	// A pump intent: the pump's tools are on the operation endpoint, so
	// nothing here may be named, not even as a related read.
	rep := sess.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"pump"}, "action": "set"}}, false)
	for _, key := range []string{"candidates", "blocked"} {
		for _, entry := range rep[key].([]any) {
			if tool := entry.(map[string]any)["capability"].(string); !slices.Contains(want, tool) {
				t.Errorf("%s names %s, which the monitoring endpoint does not serve", key, tool)
			}
		}
	}
	for _, r := range rep["context"].(map[string]any)["related_reads"].([]any) {
		if !slices.Contains(want, r.(string)) {
			t.Errorf("related_reads names %s, which the monitoring endpoint does not serve", r)
		}
	}
	if rep["feasible"] != false {
		t.Errorf("a pump intent is feasible on the monitoring endpoint: %v", rep)
	}

	// A scope that names only another group's tool matches nothing here.
	rep = sess.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"pump"}}, "scope": []any{"do_pump_speed"}}, false)
	un := rep["unroutable"].([]any)
	if len(un) != 1 || un[0].(map[string]any)["reason"] != "no_producer" || !strings.Contains(un[0].(map[string]any)["detail"].(string), "do_pump_speed") {
		t.Errorf("foreign scope: %v", rep)
	}

	// The device id as scope means this endpoint's tools; the tank level is one.
	rep = sess.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"level"}, "action": "read"},
		"scope": []any{e.Manifest().Device.ID}}, false)
	if findEntry(rep["candidates"], "read_tank_level") == nil {
		t.Errorf("device-id scope lost read_tank_level: %v", rep)
	}

	// The operation endpoint answers a pump intent with its own tools.
	op, err := mcpserver.New(e, groupOptions(e, "operation"))
	if err != nil {
		t.Fatal(err)
	}
	_, opSess := listTools(t, inProcessClient(t, op))
	rep = opSess.call("can_do", map[string]any{"intent": map[string]any{"semantic_tags": []any{"pump", "speed"}, "action": "set", "value": 40.0}}, false)
	if findEntry(rep["candidates"], "do_pump_speed") == nil && findEntry(rep["blocked"], "do_pump_speed") == nil {
		t.Errorf("operation endpoint does not route pump speed: %v", rep)
	}
}

func TestEndpointsHandler(t *testing.T) {
	e := pumpSkid(t)
	eps, err := mcpserver.NewEndpoints(e, groupOptions(e, ""))
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 2 || eps[0].Path != "/mcp/operation" || eps[1].Path != "/mcp/monitoring" {
		t.Fatalf("endpoints %+v", eps)
	}
	h := mcpserver.NewEndpointsHandler(eps, quietLogger(), mcpserver.SessionLimits{})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(func() { h.CloseSessions(context.Background()) })

	resp, err := http.Post(ts.URL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "/mcp/operation, /mcp/monitoring") {
		t.Errorf("/mcp on a grouped device: %d %s", resp.StatusCode, body)
	}
	for _, ep := range eps {
		if body, status := initialize(t, ts.URL+ep.Path); status != http.StatusOK || !strings.Contains(body, `"group":"`+ep.Group+`"`) {
			t.Errorf("%s: initialize %d %s", ep.Path, status, body)
		}
	}
}

func initialize(t *testing.T, url string) (string, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), resp.StatusCode
}
