package litemcp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/physmcp/physmcpd/drivers"
	"github.com/physmcp/physmcpd/drivers/sim"
	"github.com/physmcp/physmcpd/engine"
	"github.com/physmcp/physmcpd/manifest"
	"github.com/physmcp/physmcpd/mcpserver"
	"github.com/physmcp/physmcpd/mcpserver/litemcp"
	"github.com/physmcp/physmcpd/policy"
	"github.com/physmcp/physmcpd/profiles"
)

// liteEngine is the example device as the Lite profile serves it, simulated.
func liteEngine(t *testing.T) *engine.Engine {
	return deviceEngine(t, "../../examples/physmcp.manifest.yml", "../../examples/physmcp.policy.yml")
}

// deviceEngine serves a manifest (and a policy, when given) as the Lite
// profile does, simulated.
func deviceEngine(t *testing.T, manifestPath, policyPath string) *engine.Engine {
	t.Helper()
	m, diags := manifest.Load(manifestPath)
	if m == nil || diags.HasErrors() {
		t.Fatalf("manifest: %v", diags)
	}
	var p *policy.Policy
	if policyPath != "" {
		if p, diags = policy.Load(policyPath, m); p == nil || diags.HasErrors() {
			t.Fatalf("policy: %v", diags)
		}
	}
	served, _, err := profiles.Lite.Apply(m)
	if err != nil {
		t.Fatal(err)
	}
	buses, err := drivers.OpenAll(context.Background(), served, nil, sim.Open, true)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(served, p, buses, engine.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func newServer(t *testing.T, e *engine.Engine, role manifest.Role, maxMessage int) *litemcp.Server {
	t.Helper()
	s, err := litemcp.New(e, litemcp.Options{
		Version: "test", Caller: engine.Caller{Identity: "local", Role: role},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Workers: 2, Queue: 8, MaxMessageBytes: maxMessage,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// session sends lines to s and returns its answers by id (notifications get none).
func session(t *testing.T, s *litemcp.Server, lines ...string) (map[string]map[string]any, error) {
	t.Helper()
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- s.Serve(context.Background(), strings.NewReader(strings.Join(lines, "\n")+"\n"), w)
		w.Close()
	}()
	answers := map[string]map[string]any{}
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var a map[string]any
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("answer is not JSON: %q", sc.Text())
		}
		if a["jsonrpc"] != "2.0" {
			t.Errorf("answer without jsonrpc 2.0: %s", sc.Text())
		}
		id, _ := json.Marshal(a["id"])
		answers[string(id)] = a
	}
	return answers, <-done
}

func TestLiteServesReadsAndCanDo(t *testing.T) {
	e := liteEngine(t)
	answers, err := session(t, newServer(t, e, manifest.RoleOperator, 0),
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_air_temperature","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"can_do","arguments":{"intent":{"semantic_tags":["temperature"],"action":"read"}}}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"do_vent_fan","arguments":{"value":true}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read_air_temperature","arguments":{"x":1}}}`,
		`{"jsonrpc":"2.0","id":"p","method":"ping"}`,
		`{"jsonrpc":"2.0","id":7,"method":"resources/list"}`,
		`not json`,
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(answers) != 9 { // every request but the notification, and the parse error (id null)
		t.Errorf("%d answers, want 9: %v", len(answers), answers)
	}
	init := answers["1"]["result"].(map[string]any)
	if init["protocolVersion"] != "2025-06-18" || init["serverInfo"].(map[string]any)["version"] != "test" ||
		!strings.Contains(init["instructions"].(string), "greenhouse_controller_01") {
		t.Errorf("initialize: %v", init)
	}
	var names []string
	for _, tool := range answers["2"]["result"].(map[string]any)["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "do_") }) || !slices.Contains(names, "can_do") || !slices.Contains(names, "read_air_temperature") {
		t.Errorf("tools/list: %v", names)
	}
	read := answers["3"]["result"].(map[string]any)
	body := read["structuredContent"].(map[string]any)
	if read["isError"] != false || body["quality"] != "good" || body["unit"] != "°C" {
		t.Errorf("read: %v", read)
	}
	if text := read["content"].([]any)[0].(map[string]any)["text"].(string); !strings.Contains(text, `"quality":"good"`) {
		t.Errorf("read text block: %s", text)
	}
	if rep := answers["4"]["result"].(map[string]any)["structuredContent"].(map[string]any); rep["feasible"] != true {
		t.Errorf("can_do: %v", rep)
	}
	if e := answers["5"]["error"].(map[string]any); e["code"] != -32602.0 || !strings.Contains(e["message"].(string), "do_vent_fan") {
		t.Errorf("a do_ tool Lite does not serve: %v", answers["5"])
	}
	if bad := answers["6"]["result"].(map[string]any); bad["isError"] != true || !strings.Contains(bad["structuredContent"].(map[string]any)["detail"].(string), "takes no arguments") {
		t.Errorf("read with arguments: %v", bad)
	}
	if answers[`"p"`]["result"] == nil || answers["7"]["error"].(map[string]any)["code"] != -32601.0 || answers["null"]["error"].(map[string]any)["code"] != -32700.0 {
		t.Errorf("ping, unknown method, parse error: %v %v %v", answers[`"p"`], answers["7"], answers["null"])
	}
}

// Lite lists exactly the definitions, in the order, the Full build's mcp-go
// adapter lists for the same tools: one source, two servers.
func TestLiteToolsMatchFull(t *testing.T) {
	e := liteEngine(t)
	answers, err := session(t, newServer(t, e, manifest.RoleOperator, 0), `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if err != nil {
		t.Fatal(err)
	}
	full, err := mcpserver.Tools(e)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(full, func(a, b mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	var want any
	if err := json.Unmarshal(must(json.Marshal(full)), &want); err != nil {
		t.Fatal(err)
	}
	if got := answers["1"]["result"].(map[string]any)["tools"]; !reflect.DeepEqual(got, want) {
		t.Errorf("tools/list differs from mcpserver.Tools:\nlite %s\nfull %s", must(json.Marshal(got)), must(json.Marshal(want)))
	}
}

// A tool the caller's role may not call is neither listed nor callable.
func TestLiteHidesWhatTheRoleMayNotCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.yml")
	const hidden = "read_secret_door"
	if err := os.WriteFile(path, []byte(`physmcp_version: "0.1"
device: {id: lite_test_1, type: test}
buses:
  gpio: {type: gpio, chip: test-gpio, simulated: true}
capabilities:
  - {name: door, kind: read, description: Door., binding: {bus: gpio, offset: 1}, data_type: bool, semantic_tags: [door]}
  - {name: secret_door, kind: read, description: Door., binding: {bus: gpio, offset: 2}, data_type: bool, semantic_tags: [door], requires_permission: operator}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	e := deviceEngine(t, path, "")
	answers, err := session(t, newServer(t, e, manifest.RoleNone, 0),
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+hidden+`"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if list := string(must(json.Marshal(answers["1"]))); strings.Contains(list, hidden) || !strings.Contains(list, "read_door") || answers["2"]["error"] == nil {
		t.Errorf("%s for role none: listed %v, called %v", hidden, answers["1"], answers["2"])
	}
}

// A message longer than the limit ends the session before it is buffered.
func TestLiteEndsOverlongMessages(t *testing.T) {
	s := newServer(t, liteEngine(t), manifest.RoleOperator, 128)
	_, err := session(t, s, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"pad":"`+strings.Repeat("x", 200)+`"}}`)
	if !errors.Is(err, litemcp.ErrMessageTooLong) {
		t.Errorf("overlong message: %v", err)
	}
}

// Cancelling the context ends a session whose peer says nothing.
func TestLiteStopsOnCancel(t *testing.T) {
	s := newServer(t, liteEngine(t), manifest.RoleOperator, 0)
	in, _ := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, in, io.Discard) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
